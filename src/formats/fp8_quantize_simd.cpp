// FP8 E4M3 per-channel quantizer fast path: Highway kernels (one per target, chosen at run time)
// over F32, BF16 and F16 rows, split into row ranges over the thread pool. Bytes identical to
// fp8_channel_quantize_reference.
#include "formats/fp8.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "formats/fp8_quantize_simd.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep

#include <hwy/highway.h>

#include "core/numeric.h"
#include "formats/formats_internal.h"
#include "formats/simd-inl.h"

#include <algorithm>
#include <cmath>

HWY_BEFORE_NAMESPACE();
namespace qf {
namespace HWY_NAMESPACE {
namespace {

template <class Src>
float ScalarToF32(typename Src::T v) {
  if constexpr (std::is_same_v<Src, SrcF32>) {
    return v;
  } else if constexpr (std::is_same_v<Src, SrcBF16>) {
    return bf16_to_f32(v);
  } else {
    return f16_to_f32(v);
  }
}

template <class Src>
void Fp8Rows(const typename Src::T* HWY_RESTRICT x, int64_t rows, int64_t cols, DType scale_dtype,
             uint8_t* HWY_RESTRICT codes, float* HWY_RESTRICT scales) {
  const hn::ScalableTag<float> d;
  const hn::Rebind<uint8_t, decltype(d)> d8;
  const int64_t N = int64_t(hn::Lanes(d));
  const int64_t vec_cols = cols - cols % N;
  for (int64_t r = 0; r < rows; ++r) {
    const typename Src::T* xr = x + r * cols;
    uint8_t* out = codes + r * cols;

    auto acc = hn::Zero(d);
    for (int64_t c = 0; c < vec_cols; c += N) acc = hn::Max(acc, hn::Abs(LoadAsF32<Src>(d, xr + c)));
    float amax = hn::GetLane(hn::MaxOfLanes(d, acc));
    for (int64_t c = vec_cols; c < cols; ++c) amax = std::max(amax, std::fabs(ScalarToF32<Src>(xr[c])));

    const float raw = amax == 0.f ? 1.f : div_by_constant(amax, 448.0f);
    const float scale = detail::round_scale_to_dtype(raw, scale_dtype);
    scales[r] = scale;

    const auto vs = hn::Set(d, scale);
    const auto lo = hn::Set(d, -448.f);
    const auto hi = hn::Set(d, 448.f);
    for (int64_t c = 0; c < vec_cols; c += N) {
      const auto q = hn::Min(hn::Max(hn::Div(LoadAsF32<Src>(d, xr + c), vs), lo), hi);
      hn::StoreU(hn::TruncateTo(d8, E4M3Encode(d, q)), d8, out + c);
    }
    for (int64_t c = vec_cols; c < cols; ++c)
      out[c] = f32_to_e4m3(std::clamp(ScalarToF32<Src>(xr[c]) / scale, -448.f, 448.f));
  }
}

}  // namespace

// Quantizes rows [first, first + count).
void Fp8QuantizeRows(const WeightRows& w, DType scale_dtype, int64_t first, int64_t count,
                     uint8_t* codes, float* scales) {
  const int64_t e = first * w.cols;
  uint8_t* c = codes + e;
  float* s = scales + first;
  switch (w.dtype) {
    case DType::BF16:
      Fp8Rows<SrcBF16>(static_cast<const uint16_t*>(w.data) + e, count, w.cols, scale_dtype, c, s);
      break;
    case DType::F16:
      Fp8Rows<SrcF16>(static_cast<const uint16_t*>(w.data) + e, count, w.cols, scale_dtype, c, s);
      break;
    default:
      Fp8Rows<SrcF32>(static_cast<const float*>(w.data) + e, count, w.cols, scale_dtype, c, s);
      break;
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace qf
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include "core/thread_pool.h"

namespace qf {

HWY_EXPORT(Fp8QuantizeRows);

void fp8_channel_quantize(const WeightRows& w, DType scale_dtype, uint8_t* codes, float* scales,
                          ThreadPool& pool) {
  detail::check_weight_rows(w, 1, "fp8 quantize");
  detail::check_scale_dtype(scale_dtype, "fp8 quantize");
  const detail::TaskSplit split = detail::split_tasks(w.rows, w.cols);
  pool.parallel_for(split.tasks, [&](int64_t t) {
    const int64_t first = t * split.items_per_task;
    const int64_t count = std::min(split.items_per_task, w.rows - first);
    HWY_DYNAMIC_DISPATCH(Fp8QuantizeRows)(w, scale_dtype, first, count, codes, scales);
  });
}

}  // namespace qf
#endif  // HWY_ONCE

// INT4 group-wise quantizer fast path: Highway kernels (one per target, chosen at run time) over
// F32, BF16 and F16 input, split into group ranges over the thread pool. Bytes identical to
// int4_quantize_reference.
#include "formats/int4.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "formats/int4_quantize_simd.cpp"
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
float Int4ScalarToF32(typename Src::T v) {
  if constexpr (std::is_same_v<Src, SrcF32>) {
    return v;
  } else if constexpr (std::is_same_v<Src, SrcBF16>) {
    return bf16_to_f32(v);
  } else {
    return f16_to_f32(v);
  }
}

template <class Src>
void Int4Groups(const typename Src::T* HWY_RESTRICT x, int64_t n_groups, int64_t group,
                DType scale_dtype, int8_t* HWY_RESTRICT q, float* HWY_RESTRICT scales) {
  const hn::CappedTag<float, 16> d;
  const hn::RebindToSigned<decltype(d)> di;
  const hn::Rebind<int8_t, decltype(d)> d8;
  const int64_t N = int64_t(hn::Lanes(d));
  const int64_t vec_part = group - group % N;  // group sizes that are not a lane multiple end scalar
  const auto lo = hn::Set(d, -8.f);
  const auto hi = hn::Set(d, 7.f);
  for (int64_t g = 0; g < n_groups; ++g) {
    const typename Src::T* xg = x + g * group;
    int8_t* out = q + g * group;

    float amax = vec_part > 0 ? BlockAmax<Src>(d, xg, size_t(vec_part)) : 0.f;
    for (int64_t k = vec_part; k < group; ++k)
      amax = std::max(amax, std::fabs(Int4ScalarToF32<Src>(xg[k])));
    const float raw = amax == 0.f ? 1.f : div_by_constant(amax, 7.0f);
    const float scale = detail::round_scale_to_dtype(raw, scale_dtype);
    scales[g] = scale;

    const auto vs = hn::Set(d, scale);
    for (int64_t k = 0; k < vec_part; k += N) {
      // Clamping to the integer bounds before rounding gives the same integer as clamping
      // after (as the reference does), and keeps |v| small enough for RoundHalfEvenSmall.
      const auto v = RoundHalfEvenSmall(d, hn::Min(hn::Max(hn::Div(LoadAsF32<Src>(d, xg + k), vs), lo), hi));
      hn::StoreU(hn::DemoteTo(d8, hn::ConvertTo(di, v)), d8, out + k);
    }
    for (int64_t k = vec_part; k < group; ++k)
      out[k] = int8_t(std::clamp(std::nearbyint(Int4ScalarToF32<Src>(xg[k]) / scale), -8.f, 7.f));
  }
}

}  // namespace

// Quantizes groups [first, first + count) of the flattened matrix (groups never straddle rows).
void Int4QuantizeRange(const WeightRows& w, int group, DType scale_dtype, int64_t first,
                       int64_t count, int8_t* q, float* scales) {
  const int64_t e = first * group;
  int8_t* out = q + e;
  float* s = scales + first;
  switch (w.dtype) {
    case DType::BF16:
      Int4Groups<SrcBF16>(static_cast<const uint16_t*>(w.data) + e, count, group, scale_dtype, out, s);
      break;
    case DType::F16:
      Int4Groups<SrcF16>(static_cast<const uint16_t*>(w.data) + e, count, group, scale_dtype, out, s);
      break;
    default:
      Int4Groups<SrcF32>(static_cast<const float*>(w.data) + e, count, group, scale_dtype, out, s);
      break;
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace qf
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include "core/thread_pool.h"

namespace qf {

HWY_EXPORT(Int4QuantizeRange);

void int4_quantize(const WeightRows& w, int group, DType scale_dtype, int8_t* q, float* scales,
                   ThreadPool& pool) {
  detail::check_int4_group(w, group);
  detail::check_scale_dtype(scale_dtype, "int4 quantize");
  const int64_t groups = w.rows * (w.cols / group);
  const detail::TaskSplit split = detail::split_tasks(groups, group);
  pool.parallel_for(split.tasks, [&](int64_t t) {
    const int64_t first = t * split.items_per_task;
    const int64_t count = std::min(split.items_per_task, groups - first);
    HWY_DYNAMIC_DISPATCH(Int4QuantizeRange)(w, group, scale_dtype, first, count, q, scales);
  });
}

}  // namespace qf
#endif  // HWY_ONCE

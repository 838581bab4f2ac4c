// weight_amax fast path: max |x| and the count of NaN/Inf over F32/F16/BF16 data, computed on
// the raw bit patterns (for non-negative floats, integer order is float order), SIMD with runtime
// dispatch, split into element ranges over the thread pool.
#include "formats/weight_rows.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "formats/weight_amax_simd.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep

#include <hwy/highway.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

HWY_BEFORE_NAMESPACE();
namespace qf {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
namespace {

// Largest finite |x| as a bit pattern and the number of non-finite elements of p[0, n), for
// signed-integer views of the data: abs_mask clears the sign, patterns >= inf_bits are Inf/NaN.
// Clearing the sign leaves patterns non-negative, so signed compares and max are exact.
template <typename TI>
void AmaxBits(const TI* HWY_RESTRICT p, int64_t n, TI abs_mask, TI inf_bits, TI* max_bits,
              int64_t* nonfinite) {
  const hn::ScalableTag<TI> di;
  const int64_t N = int64_t(hn::Lanes(di));
  const auto vmask = hn::Set(di, abs_mask);
  // Integer lanes only have '>' in this Highway: a >= inf_bits is a > inf_bits - 1.
  const auto vfinite_max = hn::Set(di, TI(inf_bits - 1));
  auto acc0 = hn::Zero(di);
  auto acc1 = hn::Zero(di);
  int64_t count = 0;
  int64_t i = 0;
  for (; i + 2 * N <= n; i += 2 * N) {
    const auto a0 = hn::And(hn::LoadU(di, p + i), vmask);
    const auto a1 = hn::And(hn::LoadU(di, p + i + N), vmask);
    const auto bad0 = a0 > vfinite_max;
    const auto bad1 = a1 > vfinite_max;
    acc0 = hn::Max(acc0, hn::IfThenZeroElse(bad0, a0));
    acc1 = hn::Max(acc1, hn::IfThenZeroElse(bad1, a1));
    count += int64_t(hn::CountTrue(di, bad0) + hn::CountTrue(di, bad1));
  }
  TI m = hn::GetLane(hn::MaxOfLanes(di, hn::Max(acc0, acc1)));
  for (; i < n; ++i) {
    TI v;
    std::memcpy(&v, p + i, sizeof v);  // the data are floats: no aliasing through TI
    const TI a = TI(v & abs_mask);
    if (a >= inf_bits) {
      ++count;
    } else {
      m = std::max(m, a);
    }
  }
  *max_bits = m;
  *nonfinite = count;
}

}  // namespace

// Amax over elements [first, first + count) of w, as raw bits of w's dtype (sign cleared).
void AmaxRange(const WeightRows& w, int64_t first, int64_t count, uint32_t* max_bits,
               int64_t* nonfinite) {
  if (w.dtype == DType::F32) {
    int32_t m = 0;
    AmaxBits<int32_t>(static_cast<const int32_t*>(w.data) + first, count, 0x7FFFFFFF,
                      0x7F800000, &m, nonfinite);
    *max_bits = uint32_t(m);
  } else {
    const int16_t inf = w.dtype == DType::BF16 ? int16_t(0x7F80) : int16_t(0x7C00);
    int16_t m = 0;
    AmaxBits<int16_t>(static_cast<const int16_t*>(w.data) + first, count, int16_t(0x7FFF), inf,
                      &m, nonfinite);
    *max_bits = uint32_t(uint16_t(m));
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace qf
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include "core/numeric.h"
#include "core/thread_pool.h"
#include "formats/formats_internal.h"

#include <vector>

namespace qf {

HWY_EXPORT(AmaxRange);

AmaxResult weight_amax(const WeightRows& w, ThreadPool& pool) {
  detail::check_weight_rows(w, 0, "weight amax");
  const int64_t n = w.rows * w.cols;
  const detail::TaskSplit split = detail::split_tasks(n, 1);
  std::vector<uint32_t> max_bits(size_t(split.tasks), 0);
  std::vector<int64_t> nonfinite(size_t(split.tasks), 0);
  pool.parallel_for(split.tasks, [&](int64_t t) {
    const int64_t first = t * split.items_per_task;
    const int64_t count = std::min(split.items_per_task, n - first);
    HWY_DYNAMIC_DISPATCH(AmaxRange)(w, first, count, &max_bits[size_t(t)], &nonfinite[size_t(t)]);
  });
  AmaxResult result;
  uint32_t bits = 0;
  for (size_t t = 0; t < max_bits.size(); ++t) {
    bits = std::max(bits, max_bits[t]);
    result.nonfinite += nonfinite[t];
  }
  switch (w.dtype) {
    case DType::BF16:
      result.amax = bf16_to_f32(uint16_t(bits));
      break;
    case DType::F16:
      result.amax = f16_to_f32(uint16_t(bits));
      break;
    default:
      result.amax = f32_from_bits(bits);
      break;
  }
  return result;
}

}  // namespace qf
#endif  // HWY_ONCE

// INT8 matrix-vector product with one scale per output row (SmoothQuant W8A8 weights as
// stored): codes widened to int32 and converted to float (exact), multiplied with the float
// activations, the row scale applied once per row. Reads one byte per weight.
#include "kernels/kernels_internal.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/matvec_int8.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep

#include <hwy/highway.h>

#include "kernels/simd-inl.h"

HWY_BEFORE_NAMESPACE();
namespace qf::kernels {
namespace HWY_NAMESPACE {

void MatVecInt8(const LinearWeight& w, const float* x, float* y, ThreadPool* pool) {
  const hn::ScalableTag<float> df;
  const hn::Rebind<int32_t, decltype(df)> di32;
  const hn::Rebind<int8_t, decltype(df)> di8;
  const int64_t N = int64_t(hn::Lanes(df));
  const int64_t cols = w.cols;
  const auto* data = static_cast<const int8_t*>(w.data);
  for_row_tasks(pool, w.rows, matvec_rows_per_task(w, 1), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int8_t* p = data + r * cols;
      auto acc0 = hn::Zero(df), acc1 = hn::Zero(df);
      int64_t c = 0;
      for (; c + 2 * N <= cols; c += 2 * N) {
        const auto w0 = hn::ConvertTo(df, hn::PromoteTo(di32, hn::LoadU(di8, p + c)));
        const auto w1 = hn::ConvertTo(df, hn::PromoteTo(di32, hn::LoadU(di8, p + c + N)));
        acc0 = hn::MulAdd(w0, hn::LoadU(df, x + c), acc0);
        acc1 = hn::MulAdd(w1, hn::LoadU(df, x + c + N), acc1);
      }
      float dot = hn::GetLane(hn::SumOfLanes(df, hn::Add(acc0, acc1)));
      for (; c < cols; ++c) dot += float(p[c]) * x[c];
      y[r] = dot * w.scales[r];
    }
  });
}

}  // namespace HWY_NAMESPACE
}  // namespace qf::kernels
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace qf::kernels {
HWY_EXPORT(MatVecInt8);
void matvec_int8(const LinearWeight& w, const float* x, float* y, ThreadPool* pool) {
  HWY_DYNAMIC_DISPATCH(MatVecInt8)(w, x, y, pool);
}
}  // namespace qf::kernels
#endif

// FP8 (E4M3) matrix-vector product with one scale per output row. Codes are widened to FP16 bit
// patterns (sign, exponent and mantissa moved into place; the exponent bias differs by 8, which
// the row scale absorbs as 2^8) and converted by the FP16 hardware path, which handles E4M3
// subnormals exactly and without the slow path float32 subnormal arithmetic takes.
#include "kernels/kernels_internal.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/matvec_fp8.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep

#include <hwy/highway.h>

#include "kernels/simd-inl.h"

HWY_BEFORE_NAMESPACE();
namespace qf::kernels {
namespace HWY_NAMESPACE {

void MatVecFp8(const LinearWeight& w, const float* x, float* y, ThreadPool* pool) {
  const hn::ScalableTag<float> df;
  const hn::Rebind<uint8_t, decltype(df)> d8;
  const hn::Rebind<uint16_t, decltype(df)> d16;
  const hn::Rebind<hwy::float16_t, decltype(df)> dh;
  const int64_t N = int64_t(hn::Lanes(df));
  const int64_t cols = w.cols;
  const int64_t main = cols / N * N;
  const float* tab = e4m3_table();
  const auto* data = static_cast<const uint8_t*>(w.data);
  for_row_tasks(pool, w.rows, matvec_rows_per_task(w, 1), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const uint8_t* p = data + r * cols;
      auto acc0 = hn::Zero(df), acc1 = hn::Zero(df);
      int64_t c = 0;
      for (; c + 2 * N <= main; c += 2 * N) {
        const auto h0 = hn::PromoteTo(d16, hn::LoadU(d8, p + c));
        const auto h1 = hn::PromoteTo(d16, hn::LoadU(d8, p + c + N));
        const auto f0 = hn::Or(hn::ShiftLeft<8>(hn::And(h0, hn::Set(d16, 0x80))),
                               hn::ShiftLeft<7>(hn::And(h0, hn::Set(d16, 0x7F))));
        const auto f1 = hn::Or(hn::ShiftLeft<8>(hn::And(h1, hn::Set(d16, 0x80))),
                               hn::ShiftLeft<7>(hn::And(h1, hn::Set(d16, 0x7F))));
        acc0 = hn::MulAdd(hn::PromoteTo(df, hn::BitCast(dh, f0)), hn::LoadU(df, x + c), acc0);
        acc1 = hn::MulAdd(hn::PromoteTo(df, hn::BitCast(dh, f1)), hn::LoadU(df, x + c + N), acc1);
      }
      float dot = hn::GetLane(hn::SumOfLanes(df, hn::Add(acc0, acc1))) * 256.f;
      for (; c < cols; ++c) dot += tab[p[c]] * x[c];
      y[r] = dot * w.scales[r];
    }
  });
}

}  // namespace HWY_NAMESPACE
}  // namespace qf::kernels
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace qf::kernels {
HWY_EXPORT(MatVecFp8);
void matvec_fp8(const LinearWeight& w, const float* x, float* y, ThreadPool* pool) {
  HWY_DYNAMIC_DISPATCH(MatVecFp8)(w, x, y, pool);
}
}  // namespace qf::kernels
#endif

// Matrix-vector product for weights stored as F32, BF16 or F16, widened to float32 in
// registers. Highway, runtime dispatch, split by rows.
#include "kernels/kernels_internal.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/matvec_float.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep

#include <hwy/highway.h>

#include "core/numeric.h"
#include "kernels/simd-inl.h"

HWY_BEFORE_NAMESPACE();
namespace qf::kernels {
namespace HWY_NAMESPACE {

template <class Load, class Scalar>
void FloatRows(const LinearWeight& w, const float* x, float* y, ThreadPool* pool, size_t elem,
               const Load& load, const Scalar& scalar) {
  const hn::ScalableTag<float> df;
  const int64_t N = int64_t(hn::Lanes(df));
  const int64_t cols = w.cols;
  const auto* data = static_cast<const uint8_t*>(w.data);
  for_row_tasks(pool, w.rows, matvec_rows_per_task(w, 1), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const uint8_t* row = data + size_t(r * cols) * elem;
      auto a0 = hn::Zero(df), a1 = hn::Zero(df), a2 = hn::Zero(df), a3 = hn::Zero(df);
      int64_t c = 0;
      for (; c + 4 * N <= cols; c += 4 * N) {
        a0 = hn::MulAdd(load(df, row, c), hn::LoadU(df, x + c), a0);
        a1 = hn::MulAdd(load(df, row, c + N), hn::LoadU(df, x + c + N), a1);
        a2 = hn::MulAdd(load(df, row, c + 2 * N), hn::LoadU(df, x + c + 2 * N), a2);
        a3 = hn::MulAdd(load(df, row, c + 3 * N), hn::LoadU(df, x + c + 3 * N), a3);
      }
      for (; c + N <= cols; c += N) a0 = hn::MulAdd(load(df, row, c), hn::LoadU(df, x + c), a0);
      float dot = hn::GetLane(hn::SumOfLanes(df, hn::Add(hn::Add(a0, a1), hn::Add(a2, a3))));
      for (; c < cols; ++c) dot += scalar(row, c) * x[c];
      y[r] = dot;
    }
  });
}

using DF = hn::ScalableTag<float>;

void MatVecBf16(const LinearWeight& w, const float* x, float* y, ThreadPool* pool) {
  FloatRows(
      w, x, y, pool, 2,
      [](DF d, const uint8_t* row, int64_t c) {
        return LoadBF16AsF32(d, reinterpret_cast<const uint16_t*>(row) + c);
      },
      [](const uint8_t* row, int64_t c) {
        return bf16_to_f32(reinterpret_cast<const uint16_t*>(row)[c]);
      });
}

void MatVecF16(const LinearWeight& w, const float* x, float* y, ThreadPool* pool) {
  FloatRows(
      w, x, y, pool, 2,
      [](DF d, const uint8_t* row, int64_t c) {
        return LoadF16AsF32(d, reinterpret_cast<const uint16_t*>(row) + c);
      },
      [](const uint8_t* row, int64_t c) {
        return f16_to_f32(reinterpret_cast<const uint16_t*>(row)[c]);
      });
}

void MatVecF32(const LinearWeight& w, const float* x, float* y, ThreadPool* pool) {
  FloatRows(
      w, x, y, pool, 4,
      [](DF d, const uint8_t* row, int64_t c) {
        return hn::LoadU(d, reinterpret_cast<const float*>(row) + c);
      },
      [](const uint8_t* row, int64_t c) { return reinterpret_cast<const float*>(row)[c]; });
}

}  // namespace HWY_NAMESPACE
}  // namespace qf::kernels
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace qf::kernels {
HWY_EXPORT(MatVecF32);
HWY_EXPORT(MatVecF16);
HWY_EXPORT(MatVecBf16);
void matvec_f32(const LinearWeight& w, const float* x, float* y, ThreadPool* pool) {
  HWY_DYNAMIC_DISPATCH(MatVecF32)(w, x, y, pool);
}
void matvec_f16(const LinearWeight& w, const float* x, float* y, ThreadPool* pool) {
  HWY_DYNAMIC_DISPATCH(MatVecF16)(w, x, y, pool);
}
void matvec_bf16(const LinearWeight& w, const float* x, float* y, ThreadPool* pool) {
  HWY_DYNAMIC_DISPATCH(MatVecBf16)(w, x, y, pool);
}
}  // namespace qf::kernels
#endif

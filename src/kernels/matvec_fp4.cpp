// NVFP4 and MXFP4 matrix-vector products: E2M1 nibbles decoded on the fly through a byte table
// in a register (values doubled so that they are integers), one block scale per 16 (E4M3) or
// 32 (E8M0) elements, the tensor scale (1 for MXFP4) applied once per row. Highway, runtime
// dispatch, split by rows. The float path: the int8-activation kernels
// (AVX-512 VNNI or AVX2) take over in fast mode where available.
#include "kernels/kernels_internal.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/matvec_fp4.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep

#include <hwy/highway.h>

#include "core/numeric.h"
#include "kernels/q4_rows16.h"
#include "kernels/simd-inl.h"

#include <vector>

HWY_BEFORE_NAMESPACE();
namespace qf::kernels {
namespace HWY_NAMESPACE {

// Twice the E2M1 values, so the table holds small integers.
alignas(16) constexpr int8_t kE2M1Doubled[16] = {0, 1, 2, 3, 4, 6, 8, 12,
                                                 0, -1, -2, -3, -4, -6, -8, -12};
alignas(64) constexpr float kE2M1DoubledF[16] = {0, 1, 2, 3, 4, 6, 8, 12,
                                                 0, -1, -2, -3, -4, -6, -8, -12};

// Shared by NVFP4 (E4M3 scale per 16) and MXFP4 (E8M0 scale per 32): only the block length and
// the scale-code table differ.
void MatVecE2M1Blocks(const LinearWeight& w, const float* x, float* y, ThreadPool* pool,
                      int64_t block, const float* stab) {
  const hn::ScalableTag<float> df;
  const int64_t cols = w.cols;
  const int64_t main = NibbleMainLength(cols, block, hn::Lanes(df));
  std::vector<float> xp(static_cast<size_t>(cols));
  DeinterleavePairs(df, x, main, xp.data());
  const auto* data = static_cast<const uint8_t*>(w.data);
  for_row_tasks(pool, w.rows, matvec_rows_per_task(w, 1), [&](int64_t r0, int64_t r1) {
    // This row's block scales as float32, padded for the vector loads of the kernel.
    std::vector<float> bs(static_cast<size_t>(cols / block + 16), 0.f);
    std::vector<uint8_t> scratch;
    for (int64_t r = r0; r < r1; ++r) {
      const uint8_t* p;
      const uint8_t* s;
      if (is_q4_rows16(w.format)) {
        // The row gathered into the stored layout: the same arithmetic, so the same bits.
        const LinearWeight v = q4_rows16_view(w, r, 1, scratch);
        p = static_cast<const uint8_t*>(v.data);
        s = v.block_scales;
      } else {
        p = data + r * (cols / 2);
        s = w.block_scales + r * (cols / block);
      }
      float dot = 0.f;
#if HWY_TARGET != HWY_SCALAR
      for (int64_t b = 0; b < main / block; ++b) bs[size_t(b)] = stab[s[b]];
      dot = NibblePairsDot(df, kE2M1DoubledF, kE2M1Doubled, p, xp.data(), main, block, bs.data());
#endif
      float tail = 0.f;
      for (int64_t c = main; c < cols; ++c) {
        const uint8_t v = (c % 2 == 0) ? (p[c / 2] & 0xF) : (p[c / 2] >> 4);
        tail += kE2M1Values[v] * stab[s[c / block]] * x[c];
      }
      y[r] = (dot * 0.5f + tail) * w.global_scale;
    }
  });
}

void MatVecNvfp4(const LinearWeight& w, const float* x, float* y, ThreadPool* pool) {
  MatVecE2M1Blocks(w, x, y, pool, 16, e4m3_table());
}

void MatVecMxfp4(const LinearWeight& w, const float* x, float* y, ThreadPool* pool) {
  MatVecE2M1Blocks(w, x, y, pool, 32, e8m0_table());
}

}  // namespace HWY_NAMESPACE
}  // namespace qf::kernels
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace qf::kernels {
HWY_EXPORT(MatVecNvfp4);
HWY_EXPORT(MatVecMxfp4);
void matvec_nvfp4(const LinearWeight& w, const float* x, float* y, ThreadPool* pool) {
  HWY_DYNAMIC_DISPATCH(MatVecNvfp4)(w, x, y, pool);
}
void matvec_mxfp4(const LinearWeight& w, const float* x, float* y, ThreadPool* pool) {
  HWY_DYNAMIC_DISPATCH(MatVecMxfp4)(w, x, y, pool);
}
}  // namespace qf::kernels
#endif

// local_hessian: an identity Hessian reproduces the plain FP8 sweep, the static export carries the
// chosen codes, correlated inputs lower the output error, dead inputs fall back to the sweep.
#include "algo/gptq.h"
#include "algo/local_hessian.h"
#include "algo/mse.h"
#include "algo_test_util.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "formats/fake_quant.h"
#include "formats/nvfp4.h"

#include <gtest/gtest.h>

#include <cmath>

namespace qf {
namespace {

float max_abs(const std::vector<float>& w) {
  float g = 0.f;
  for (float v : w) g = std::max(g, std::fabs(v));
  return g;
}

std::vector<float> dequantized(const QuantizedTensor& q) {
  std::vector<float> d(size_t(q.rows * q.cols));
  dequantize(q, d.data());
  return d;
}

TEST(LocalHessianTest, IdentityHessianEqualsThePlainFp8Sweep) {
  ThreadPool pool(2);
  const int64_t rows = 8, cols = 64;
  const std::vector<float> w = test::random_weights(rows, cols, 3);
  LinearStats s;
  s.tokens = 5;
  s.xtx.assign(size_t(cols * cols), 0.0);
  for (int64_t i = 0; i < cols; ++i) s.xtx[size_t(i * cols + i)] = 5.0;  // XtX / N = I
  const float global = max_abs(w);
  const QuantizedTensor a = quantize_nvfp4_local_hessian(test::f32_view(w, rows, cols), s, global, pool);
  const QuantizedTensor b = quantize_nvfp4_fp8_sweep(test::f32_view(w, rows, cols), global, pool);
  EXPECT_EQ(a.block_scales, b.block_scales);
  EXPECT_EQ(a.codes, b.codes);
  EXPECT_EQ(a.global_scale, b.global_scale);
}

TEST(LocalHessianTest, StaticExportReproducesTheChosenCodes) {
  ThreadPool pool(2);
  const int64_t rows = 16, cols = 64, tokens = 256;
  std::vector<float> w = test::random_weights(rows, cols, 5);
  for (int k = 0; k < 16; ++k) w[size_t(3 * cols + 16 + k)] = 0.f;  // one zero block
  const std::vector<float> x = test::correlated_inputs(tokens, cols, 6);
  const LinearStats s = test::stats_from_inputs(x, tokens, cols, 0);
  const float global = max_abs(w);
  std::vector<float> amax;
  const QuantizedTensor q = quantize_nvfp4_local_hessian(test::f32_view(w, rows, cols), s, global, pool, &amax);
  std::vector<float> h(256);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t b = 0; b < cols / 16; ++b) {
      for (int k = 0; k < 16; ++k)
        for (int l = 0; l < 16; ++l)
          h[size_t(k * 16 + l)] = float(s.xtx[size_t((b * 16 + k) * cols + b * 16 + l)] / double(tokens));
      const int64_t i = r * (cols / 16) + b;
      const uint8_t code = nvfp4_local_hessian_block(w.data() + r * cols + b * 16, h.data(), global);
      EXPECT_EQ(q.block_scales[size_t(i)], code) << "row " << r << " block " << b;
      EXPECT_EQ(amax[size_t(i)], global * (e4m3_to_f32(code) / 448.f));
    }
  EXPECT_EQ(q.global_scale, nvfp4_global_scale(global));
}

TEST(LocalHessianTest, CorrelatedInputsLowerTheOutputErrorAndGptqKeepsTheScales) {
  ThreadPool pool(2);
  const int64_t rows = 32, cols = 64, tokens = 512;
  const std::vector<float> w = test::random_weights(rows, cols, 7);
  const std::vector<float> x = test::correlated_inputs(tokens, cols, 8);
  const LinearStats s = test::stats_from_inputs(x, tokens, cols, 0);
  const float global = max_abs(w);
  const QuantizedTensor lh = quantize_nvfp4_local_hessian(test::f32_view(w, rows, cols), s, global, pool);
  const QuantizedTensor sw = quantize_nvfp4_fp8_sweep(test::f32_view(w, rows, cols), global, pool);
  const double e_lh = test::output_error(x, tokens, cols, w, dequantized(lh), rows);
  const double e_sw = test::output_error(x, tokens, cols, w, dequantized(sw), rows);
  EXPECT_LT(e_lh, e_sw);
  GptqOptions go;
  const GptqResult g = gptq_with_scales(w, lh, s.xtx, s.tokens, go, pool);
  EXPECT_EQ(g.tensor.block_scales, lh.block_scales);
  EXPECT_LT(test::output_error(x, tokens, cols, w, dequantized(g.tensor), rows), e_lh);
}

TEST(LocalHessianTest, DeadInputsFallBackToThePlainSweep) {
  ThreadPool pool(2);
  const int64_t rows = 4, cols = 32;
  const std::vector<float> w = test::random_weights(rows, cols, 9);
  LinearStats s;
  s.tokens = 10;
  s.xtx.assign(size_t(cols * cols), 0.0);
  const float global = max_abs(w);
  const QuantizedTensor a = quantize_nvfp4_local_hessian(test::f32_view(w, rows, cols), s, global, pool);
  const QuantizedTensor b = quantize_nvfp4_fp8_sweep(test::f32_view(w, rows, cols), global, pool);
  EXPECT_EQ(a.block_scales, b.block_scales);
}

TEST(LocalHessianTest, RejectsMissingStatistics) {
  ThreadPool pool(1);
  const std::vector<float> w = test::random_weights(2, 16, 1);
  LinearStats s;
  s.tokens = 1;
  EXPECT_THROW(quantize_nvfp4_local_hessian(test::f32_view(w, 2, 16), s, 1.f, pool), Error);
}

}  // namespace
}  // namespace qf

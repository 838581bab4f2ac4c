// GPTQ: the inverse-Hessian factor, equality with RTN under a diagonal Hessian, lower output
// error than RTN on correlated inputs, thread-count independence and the RTN fallback.
#include "algo/gptq.h"
#include "algo/linalg.h"
#include "algo/round_to_nearest.h"
#include "algo_test_util.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "formats/fake_quant.h"

#include <gtest/gtest.h>

#include <random>

namespace qf {
namespace {

using test::random_weights;

TEST(GptqTest, InverseCholeskyFactorInvertsH) {
  ThreadPool pool(2);
  for (int64_t n : {1, 7, 64, 150}) {
    std::mt19937 rng(static_cast<uint32_t>(n));
    std::normal_distribution<double> normal;
    std::vector<double> g(size_t(n * 2 * n));
    for (auto& v : g) v = normal(rng);
    std::vector<double> h(size_t(n * n), 0.0);  // G G^T + 0.1 I: positive definite
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double acc = i == j ? 0.1 : 0.0;
        for (int64_t k = 0; k < 2 * n; ++k) acc += g[size_t(i * 2 * n + k)] * g[size_t(j * 2 * n + k)];
        h[size_t(i * n + j)] = acc;
      }
    std::vector<double> work = h;
    std::vector<float> u;
    ASSERT_TRUE(inverse_cholesky_upper(work, n, u, pool));
    // (U^T U) H = I
    double worst = 0.0;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double acc = 0.0;
        for (int64_t k = 0; k < n; ++k) {
          double inv_ik = 0.0;
          for (int64_t t = 0; t <= std::min(i, k); ++t) inv_ik += double(u[size_t(t * n + i)]) * double(u[size_t(t * n + k)]);
          acc += inv_ik * h[size_t(k * n + j)];
        }
        worst = std::max(worst, std::fabs(acc - (i == j ? 1.0 : 0.0)));
      }
    EXPECT_LT(worst, 1e-3) << "n=" << n;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < i; ++j) EXPECT_EQ(u[size_t(i * n + j)], 0.f);
  }
}

TEST(GptqTest, DiagonalHessianEqualsRtnBitForBit) {
  ThreadPool pool(2);
  const int64_t rows = 24, cols = 256;
  for (Format f : {Format::nvfp4, Format::mxfp4, Format::int4, Format::fp8}) {
    std::vector<float> w = random_weights(rows, cols, 11);
    for (int64_t r = 0; r < rows; ++r) w[size_t(r * cols + 5)] = 0.f;  // a dead weight column
    LinearStats stats;
    stats.tokens = 100;
    stats.xtx.assign(size_t(cols * cols), 0.0);
    std::mt19937 rng(3);
    std::uniform_real_distribution<double> var(0.01, 50.0);
    for (int64_t i = 0; i < cols; ++i) stats.xtx[size_t(i * cols + i)] = i == 9 ? 0.0 : var(rng);
    GptqOptions options;
    options.format.format = f;
    if (f == Format::int4) options.format.block = 64;
    const float amax = 0.3f;
    const WeightRows view = test::f32_view(w, rows, cols);
    const GptqResult g = quantize_gptq(view, stats, options, amax, pool);
    const QuantizedTensor r = quantize_rtn(view, options.format, amax, pool);
    EXPECT_FALSE(g.fell_back_to_rtn);
    EXPECT_EQ(g.dead_columns, 2);
    EXPECT_EQ(g.tensor.codes, r.codes) << format_info(f).name;
    EXPECT_EQ(g.tensor.block_scales, r.block_scales);
    EXPECT_EQ(g.tensor.scales, r.scales);
    EXPECT_EQ(g.tensor.global_scale, r.global_scale);
  }
}

struct CorrelatedLayer {
  int64_t out = 48, in = 256, tokens = 1024;
  std::vector<float> w = random_weights(out, in, 21);
  std::vector<float> x = test::correlated_inputs(tokens, in, 22);
  LinearStats stats = test::stats_from_inputs(x, tokens, in, 0);
};

TEST(GptqTest, LowersOutputErrorVersusRtnOnCorrelatedInputs) {
  ThreadPool pool(2);
  const CorrelatedLayer layer;
  for (Format f : {Format::nvfp4, Format::mxfp4, Format::int4}) {
    GptqOptions options;
    options.format.format = f;
    if (f == Format::int4) options.format.block = 32;
    options.block_size = 64;  // several blocks, so the lazy batch update is exercised
    float amax = 0.f;
    for (float v : layer.w) amax = std::max(amax, std::fabs(v));
    const WeightRows view = test::f32_view(layer.w, layer.out, layer.in);
    const GptqResult g = quantize_gptq(view, layer.stats, options, amax, pool);
    const QuantizedTensor r = quantize_rtn(view, options.format, amax, pool);
    std::vector<float> wg(layer.w.size()), wr(layer.w.size());
    dequantize(g.tensor, wg.data());
    dequantize(r, wr.data());
    const double eg = test::output_error(layer.x, layer.tokens, layer.in, layer.w, wg, layer.out);
    const double er = test::output_error(layer.x, layer.tokens, layer.in, layer.w, wr, layer.out);
    EXPECT_LT(eg, 0.8 * er) << format_info(f).name << ": gptq " << eg << " rtn " << er;
    EXPECT_EQ(g.tensor.block_scales, r.block_scales);  // scales frozen
    EXPECT_EQ(g.tensor.scales, r.scales);
  }
}

TEST(GptqTest, BytesDoNotDependOnThreadCount) {
  const CorrelatedLayer layer;
  GptqOptions options;
  options.block_size = 32;
  const WeightRows view = test::f32_view(layer.w, layer.out, layer.in);
  ThreadPool one(1), three(3);
  const GptqResult a = quantize_gptq(view, layer.stats, options, 0.5f, one);
  const GptqResult b = quantize_gptq(view, layer.stats, options, 0.5f, three);
  EXPECT_EQ(a.tensor.codes, b.tensor.codes);
}

TEST(GptqTest, NotPositiveDefiniteFallsBackToRtn) {
  ThreadPool pool(2);
  const int64_t rows = 4, cols = 32;
  std::vector<float> w = random_weights(rows, cols, 5);
  LinearStats stats;
  stats.tokens = 10;
  stats.xtx.assign(size_t(cols * cols), 0.0);
  for (int64_t i = 0; i < cols; ++i) stats.xtx[size_t(i * cols + i)] = i == 3 ? -100.0 : 1.0;
  GptqOptions options;
  const WeightRows view = test::f32_view(w, rows, cols);
  const GptqResult g = quantize_gptq(view, stats, options, 0.2f, pool);
  EXPECT_TRUE(g.fell_back_to_rtn);
  EXPECT_EQ(g.tensor.codes, quantize_rtn(view, options.format, 0.2f, pool).codes);
}

TEST(GptqTest, RejectsMissingStatistics) {
  ThreadPool pool(1);
  std::vector<float> w = random_weights(2, 16, 1);
  LinearStats stats;
  stats.tokens = 3;
  EXPECT_THROW(quantize_gptq(test::f32_view(w, 2, 16), stats, GptqOptions{}, 0.1f, pool), Error);
}

}  // namespace
}  // namespace qf

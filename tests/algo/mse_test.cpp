// MSE amax search and the NVFP4 static FP8 scale sweep: never worse than max, picks 1.0 when
// that is exact by construction, the sweep equals a brute-force search and its export
// reconstructs the chosen codes.
#include "algo/mse.h"
#include "algo/round_to_nearest.h"
#include "algo_test_util.h"
#include "core/numeric.h"
#include "core/thread_pool.h"
#include "formats/fake_quant.h"
#include "formats/nvfp4.h"

#include <gtest/gtest.h>

#include <random>

namespace qf {
namespace {

double sq_error(const std::vector<float>& w, const QuantizedTensor& q) {
  std::vector<float> d(w.size());
  dequantize(q, d.data());
  double e = 0.0;
  for (size_t i = 0; i < w.size(); ++i) e += (double(w[i]) - d[i]) * (double(w[i]) - d[i]);
  return e;
}

TEST(MseTest, GridIsModelOptsLinspacePlusOne) {
  MseOptions o;
  o.include_one = false;
  const std::vector<float> m = mse_multipliers(o);
  ASSERT_EQ(m.size(), 39u);
  EXPECT_EQ(m.front(), 0.25f);
  EXPECT_EQ(m.back(), 4.0f);
  EXPECT_NEAR(m[8], 0.25 + 8 * 3.75 / 38, 1e-6);
  const std::vector<float> with_one = mse_multipliers(MseOptions{});
  ASSERT_EQ(with_one.size(), 40u);
  EXPECT_TRUE(std::is_sorted(with_one.begin(), with_one.end()));
  EXPECT_EQ(with_one[8], 1.0f);
}

TEST(MseTest, NeverWorseThanMaxOnHeavyTailedWeights) {
  ThreadPool pool(2);
  const int64_t rows = 32, cols = 256;
  for (uint32_t seed : {1u, 2u, 3u}) {
    const std::vector<float> w = test::random_weights(rows, cols, seed);
    const WeightRows view = test::f32_view(w, rows, cols);
    for (Format f : {Format::nvfp4, Format::mxfp4, Format::int4, Format::fp8}) {
      RtnOptions o;
      o.format = f;
      if (f == Format::int4) o.block = 64;
      float amax = 0.f;
      for (float v : w) amax = std::max(amax, std::fabs(v));
      const double e_max = sq_error(w, quantize_rtn(view, o, amax, pool));
      const double e_mse = sq_error(w, quantize_mse(view, o, MseOptions{}, pool));
      EXPECT_LE(e_mse, e_max) << format_info(f).name << " seed " << seed;
    }
  }
}

TEST(MseTest, PicksOneWhenMaxIsExact) {
  // Global amax 2688 (g = 1), every block's amax 6 * v with v an E4M3 value, every element
  // on that block's E2M1 grid: max quantizes exactly, any other global amax does not.
  ThreadPool pool(2);
  const int64_t rows = 8, cols = 64;
  std::vector<float> w(size_t(rows * cols));
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> code(40, 110), nib(0, 15);
  for (int64_t b = 0; b < rows * cols / 16; ++b) {
    const float v = b == 0 ? 448.f : e4m3_to_f32(uint8_t(code(rng)));
    for (int k = 0; k < 16; ++k) w[size_t(b * 16 + k)] = e2m1_to_f32(uint8_t(nib(rng))) * v;
    w[size_t(b * 16)] = 6.f * v;
  }
  float m = 0.f;
  nvfp4_mse_global_amax(test::f32_view(w, rows, cols), 2688.f, MseOptions{}, pool, &m);
  EXPECT_EQ(m, 1.0f);
}

TEST(MseTest, Fp8SweepEqualsBruteForce) {
  const std::vector<float> w = test::random_weights(64, 16, 9);
  float global = 0.f;
  for (float v : w) global = std::max(global, std::fabs(v));
  for (int64_t b = 0; b < 64; ++b) {
    const float* x = w.data() + b * 16;
    // Brute force in double over every finite positive E4M3 value.
    int best = -1;
    double best_loss = 0.0;
    for (int code = 1; code < 127; ++code) {
      const float scale = (e4m3_to_f32(uint8_t(code)) / 448.f) * global * (1.0f / 6.0f);
      double loss = 0.0;
      for (int k = 0; k < 16; ++k) {
        const float a = std::fabs(x[k]);
        const double d = double(a) - double(kE2M1Values[e2m1_index_rne(a / scale)] * scale);
        loss += d * d;
      }
      if (best < 0 || loss < best_loss * (1 - 1e-9)) best = code, best_loss = loss;
    }
    EXPECT_EQ(nvfp4_fp8_sweep_block(x, global), best) << "block " << b;
  }
}

TEST(MseTest, Fp8SweepExportReconstructsTheChosenCodes) {
  ThreadPool pool(2);
  const int64_t rows = 16, cols = 128;
  std::vector<float> w = test::random_weights(rows, cols, 10);
  for (int k = 0; k < 16; ++k) w[size_t(2 * cols + k)] = 0.f;  // one zero block
  float global = 0.f;
  for (float v : w) global = std::max(global, std::fabs(v));
  std::vector<float> amax;
  const QuantizedTensor q = quantize_nvfp4_fp8_sweep(test::f32_view(w, rows, cols), global, pool, &amax);
  for (int64_t b = 0; b < rows * cols / 16; ++b)
    EXPECT_EQ(q.block_scales[size_t(b)], nvfp4_fp8_sweep_block(w.data() + b * 16, global)) << b;
  EXPECT_EQ(q.global_scale, nvfp4_global_scale(global));
  // And the sweep never does worse than the dynamic-block max export per tensor.
  const QuantizedTensor r = quantize_rtn(test::f32_view(w, rows, cols), RtnOptions{}, global, pool);
  EXPECT_LE(sq_error(w, q), sq_error(w, r));
}

}  // namespace
}  // namespace qf

// Proxy scores (against a direct computation on the inputs, and on a planted sensitive layer),
// exact-score enumeration, monotonisation and rank correlation.
#include "plan/sensitivity.h"
#include "algo/four_over_six.h"
#include "formats/fake_quant.h"

#include "core/convert.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "plan_test_util.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>
#include <random>

namespace qf {
namespace {

std::vector<float> gaussian_weights(int64_t rows, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.f, 0.02f);
  std::vector<float> w(size_t(rows * cols));
  for (auto& x : w) x = normal(rng);
  return w;
}

TEST(Sensitivity, ProxyIsTheLayerOutputError) {
  const int64_t n = 37, k = 64, tokens = 200;
  const std::vector<float> w = gaussian_weights(n, k, 1);
  std::vector<float> scale(static_cast<size_t>(k));
  for (int64_t c = 0; c < k; ++c) scale[size_t(c)] = 0.5f + float(c % 7);
  const std::vector<float> x = test::scaled_inputs(tokens, k, scale, 2);
  const LinearStats st = test::stats_of(x, tokens, k, true);
  ThreadPool pool(2);
  const WeightRows wr{w.data(), DType::F32, n, k};
  for (Format f : {Format::nvfp4, Format::mxfp4, Format::fp8}) {
    const std::vector<float> fq = fake_quantize_choice(wr, FormatChoice::of(f), 0.f, pool);
    // Direct: mean over tokens of ||(W_hat - W) x||^2.
    double direct = 0;
    for (int64_t t = 0; t < tokens; ++t)
      for (int64_t r = 0; r < n; ++r) {
        double y = 0;
        for (int64_t c = 0; c < k; ++c)
          y += double(fq[size_t(r * k + c)] - w[size_t(r * k + c)]) * x[size_t(t * k + c)];
        direct += y * y;
      }
    direct /= double(tokens);
    const double proxy = weighted_output_error(wr, fq.data(), st, pool);
    EXPECT_NEAR(proxy, direct, 1e-4 * direct) << format_info(f).name;
    ThreadPool one(1);
    EXPECT_EQ(proxy, weighted_output_error(wr, fq.data(), st, one));  // same bits, any threads
  }
}

TEST(Sensitivity, DiagonalFallbackWithoutXtx) {
  const int64_t n = 8, k = 32;
  const std::vector<float> w = gaussian_weights(n, k, 3);
  std::vector<float> scale(static_cast<size_t>(k), 1.f);
  const std::vector<float> x = test::scaled_inputs(50, k, scale, 4);
  const LinearStats st = test::stats_of(x, 50, k, false);
  ThreadPool pool(1);
  const WeightRows wr{w.data(), DType::F32, n, k};
  const std::vector<float> fq = fake_quantize_choice(wr, FormatChoice::of(Format::nvfp4), 0.f, pool);
  double expect = 0;
  for (int64_t r = 0; r < n; ++r)
    for (int64_t c = 0; c < k; ++c) {
      const double d = double(fq[size_t(r * k + c)]) - double(w[size_t(r * k + c)]);
      expect += d * d * double(st.channel_mean_abs[size_t(c)]) * double(st.channel_mean_abs[size_t(c)]);
    }
  EXPECT_NEAR(weighted_output_error(wr, fq.data(), st, pool), expect, 1e-6 * expect);
  LinearStats bad = st;
  bad.channel_mean_abs.resize(3);
  EXPECT_THROW(weighted_output_error(wr, fq.data(), bad, pool), Error);
  // No token seen (a routed expert calibration never reached): no output error to weigh.
  EXPECT_EQ(weighted_output_error(wr, fq.data(), LinearStats{}, pool), 0.0);
  bad = LinearStats{};
  bad.tokens = 5;
  EXPECT_THROW(weighted_output_error(wr, fq.data(), bad, pool), Error);
}

// The fast proxy is the full-H measure with H = X_s^T X_s / n: on the same rows the two agree
// (the sampled one is a matrix product, the other a quadratic form in X^T X).
TEST(Sensitivity, SampledProxyEqualsFullHessianOnTheSameRows) {
  const int64_t n = 45, k = 96, tokens = 150;
  const std::vector<float> w = gaussian_weights(n, k, 11);
  std::vector<float> scale(static_cast<size_t>(k));
  for (int64_t c = 0; c < k; ++c) scale[size_t(c)] = c % 13 == 0 ? 30.f : 1.f;
  const std::vector<float> x = test::scaled_inputs(tokens, k, scale, 12);
  LinearStats st = test::stats_of(x, tokens, k, true);
  st.samples = x;
  ThreadPool pool(2), one(1);
  for (DType dt : {DType::F32, DType::BF16}) {
    std::vector<uint8_t> bytes(w.size() * dtype_size(dt));
    convert_from_f32(dt, w.data(), bytes.data(), w.size());
    const WeightRows wr{bytes.data(), dt, n, k};
    for (Format f : {Format::nvfp4, Format::mxfp4, Format::fp8}) {
      const std::vector<float> fq = fake_quantize_choice(wr, FormatChoice::of(f), 0.f, pool);
      const double full = weighted_output_error(wr, fq.data(), st, pool);
      const double sampled = sampled_output_error(wr, fq.data(), st, pool);
      EXPECT_GT(sampled, 0.0);
      // dW is rounded to bf16 for the product (and X too on AVX512-BF16 CPUs).
      EXPECT_NEAR(sampled, full, 3e-3 * full) << format_info(f).name;
      EXPECT_EQ(sampled, sampled_output_error(wr, fq.data(), st, one));  // any thread count
    }
  }
  // proxy_unit_scores takes the sampled path when the statistics hold samples.
  const Architecture arch = test::tiny_llama(1, 96, 128);
  CandidateOptions o;
  o.formats = {FormatChoice::of(Format::nvfp4)};
  const auto units = decision_units(arch, o);
  const DecisionUnit& u = units[1];  // o_proj: one Linear of [96, 96]
  ASSERT_EQ(u.linears.size(), 1u);
  const std::vector<float> wo = gaussian_weights(96, 96, 13);
  const WeightRows wr{wo.data(), DType::F32, 96, 96};
  const LinearStats* sp = &st;
  const std::vector<double> s = proxy_unit_scores(u, std::span(&wr, 1), std::span(&sp, 1), pool);
  const std::vector<float> fq = fake_quantize_choice(wr, u.candidates[0].choice, 0.f, pool);
  EXPECT_EQ(s[0], sampled_output_error(wr, fq.data(), st, pool));
  LinearStats bad = st;
  bad.samples.resize(bad.samples.size() - 1);
  EXPECT_THROW(sampled_output_error(wr, fq.data(), bad, pool), Error);
  bad.samples.clear();
  EXPECT_THROW(sampled_output_error(wr, fq.data(), bad, pool), Error);
}

// A weight over 8M elements is fake-quantized and multiplied a slice of rows at a time; the
// slices give the whole weight's error (the scales belong to rows; NVFP4's tensor scale is
// shared).
TEST(Sensitivity, SampledProxyInRowSlicesEqualsTheWholeWeight) {
  const int64_t n = 2100, k = 4096, tokens = 24;  // 2 slices of 2048 rows and 52
  const std::vector<float> w = gaussian_weights(n, k, 21);
  std::vector<float> scale(static_cast<size_t>(k), 1.f);
  LinearStats st;
  st.tokens = tokens;
  st.samples = test::scaled_inputs(tokens, k, scale, 22);
  ThreadPool pool(2);
  const WeightRows wr{w.data(), DType::F32, n, k};
  DecisionUnit unit;
  unit.name = "big";
  unit.linears = {0};
  unit.candidates = {{FormatChoice::of(Format::nvfp4), 0}, {FormatChoice::of(Format::fp8), 0},
                     {FormatChoice::nvfp4_four_over_six(), 0}};
  const LinearStats* sp = &st;
  const std::vector<double> s = proxy_unit_scores(unit, std::span(&wr, 1), std::span(&sp, 1), pool);
  for (size_t c = 0; c < 3; ++c) {
    const std::vector<float> fq = fake_quantize_choice(wr, unit.candidates[c].choice, 0.f, pool);
    const double whole = sampled_output_error(wr, fq.data(), st, pool);
    EXPECT_GT(whole, 0.0);
    EXPECT_NEAR(s[c], whole, 1e-9 * whole) << unit.candidates[c].choice.name();
  }
}

// The synthetic test: one layer's inputs carry large outlier channels; the proxy ranks it
// first for every format.
class PlantedSensitive : public ::testing::TestWithParam<bool> {};  // sampled rows or X^T X

TEST_P(PlantedSensitive, LayerIsFoundFirst) {
  const bool sampled = GetParam();
  const Architecture arch = test::tiny_llama(4, 64, 128);
  CandidateOptions o;
  o.formats = {FormatChoice::of(Format::nvfp4), FormatChoice::of(Format::mxfp4),
               FormatChoice::of(Format::fp8)};
  const auto units = decision_units(arch, o);
  const size_t sensitive = 6;  // layer 1 gate+up
  ASSERT_EQ(units[sensitive].name, "model.layers.1.mlp.gate_proj+up_proj");
  ThreadPool pool(2);
  std::vector<std::vector<float>> weights(arch.linears.size());
  for (size_t m = 0; m < arch.linears.size(); ++m)
    weights[m] = gaussian_weights(arch.linears[m].out_features, arch.linears[m].in_features,
                                  uint32_t(100 + m));
  UnitScores proxy;
  for (size_t u = 0; u < units.size(); ++u) {
    const int64_t k = arch.linears[units[u].linears[0]].in_features;
    std::vector<float> scale(static_cast<size_t>(k), 1.f);
    if (u == sensitive)
      for (int64_t c = 0; c < k; c += 16) scale[size_t(c)] = 40.f;  // outlier channels
    const std::vector<float> x = test::scaled_inputs(128, k, scale, uint32_t(u));
    LinearStats st = test::stats_of(x, 128, k, !sampled);
    if (sampled) st.samples.assign(x.begin(), x.begin() + 64 * k);  // half the rows
    std::vector<WeightRows> wr;
    std::vector<const LinearStats*> sp;
    for (size_t m : units[u].linears) {
      wr.push_back({weights[m].data(), DType::F32, arch.linears[m].out_features,
                    arch.linears[m].in_features});
      sp.push_back(&st);  // fused members share their input
    }
    proxy.push_back(proxy_unit_scores(units[u], wr, sp, pool));
  }
  for (size_t c = 0; c < 3; ++c) {
    size_t best = 0;
    for (size_t u = 1; u < units.size(); ++u)
      if (proxy[u][c] > proxy[best][c]) best = u;
    EXPECT_EQ(best, sensitive) << units[0].candidates[c].choice.name();
    EXPECT_EQ(proxy[sensitive][3], 0.0);  // keep
  }
  // FP8 loses less than the 4-bit formats.
  EXPECT_LT(proxy[sensitive][2], proxy[sensitive][0]);
}

INSTANTIATE_TEST_SUITE_P(Sensitivity, PlantedSensitive, ::testing::Values(true, false),
                         [](const auto& p) { return p.param ? "sampled" : "xtx"; });

TEST(Sensitivity, ExactScoresQuantizeOneUnitAtATime) {
  const Architecture arch = test::tiny_llama(2);
  CandidateOptions o;
  o.formats = {FormatChoice::of(Format::nvfp4), FormatChoice::of(Format::fp8)};
  const auto units = decision_units(arch, o);
  int calls = 0;
  const KlOfAssignment kl = [&](const Assignment& a) {
    ++calls;
    double s = 0;
    for (const auto& [name, mc] : a.modules) {
      EXPECT_FALSE(mc.format.is_keep());
      s += (mc.format == FormatChoice::of(Format::nvfp4) ? 4.0 : 1.0) * double(name.size());
    }
    return s;
  };
  const UnitScores s = exact_scores(arch, units, kl);
  EXPECT_EQ(calls, int(units.size()) * 2);
  for (size_t u = 0; u < units.size(); ++u) {
    double names = 0;
    for (size_t m : units[u].linears) names += double(arch.linears[m].name.size());
    EXPECT_EQ(s[u][0], 4 * names);
    EXPECT_EQ(s[u][1], names);
    EXPECT_EQ(s[u][2], 0.0);
  }
}

TEST(Sensitivity, MonotonizeFollowsCompression) {
  DecisionUnit u;
  u.name = "x";
  // Bytes: nvfp4 < int4 < fp8 < keep; given out of order.
  u.candidates = {{FormatChoice::of(Format::fp8), 300},
                  {FormatChoice::of(Format::nvfp4), 100},
                  {FormatChoice::keep(), 400},
                  {FormatChoice::of(Format::int4), 150}};
  UnitScores s = {{5.0, 2.0, 7.0, 3.0}};
  monotonize({u}, s);
  // nvfp4 2 -> int4 min(3, 2) = 2 -> fp8 min(5, 2) = 2 -> keep 0.
  EXPECT_EQ(s[0], (std::vector<double>{2.0, 2.0, 0.0, 2.0}));
  UnitScores ok = {{1.0, 9.0, 0.0, 4.0}};
  monotonize({u}, ok);
  EXPECT_EQ(ok[0], (std::vector<double>{1.0, 9.0, 0.0, 4.0}));
  UnitScores bad = {{1.0}};
  EXPECT_THROW(monotonize({u}, bad), Error);
}

TEST(Sensitivity, MonotonizeLeavesEqualBytesAlternativesApart) {
  DecisionUnit u;
  u.name = "x";
  // nvfp4 and nvfp4:4o6 store the same bytes: neither lowers the other.
  u.candidates = {{FormatChoice::of(Format::nvfp4), 100},
                  {FormatChoice::nvfp4_four_over_six(), 100},
                  {FormatChoice::of(Format::fp8), 300},
                  {FormatChoice::keep(), 400}};
  UnitScores s = {{5.0, 3.0, 4.0, 9.0}};
  monotonize({u}, s);
  EXPECT_EQ(s[0], (std::vector<double>{5.0, 3.0, 3.0, 0.0}));
  UnitScores t = {{2.0, 3.0, 4.0, 9.0}};
  monotonize({u}, t);
  EXPECT_EQ(t[0], (std::vector<double>{2.0, 3.0, 2.0, 0.0}));
  // A smaller format lowers both alternatives.
  u.candidates.push_back({FormatChoice::of(Format::mxfp4), 50});
  UnitScores v = {{5.0, 3.0, 4.0, 9.0, 1.0}};
  monotonize({u}, v);
  EXPECT_EQ(v[0], (std::vector<double>{1.0, 1.0, 1.0, 0.0, 1.0}));
}

TEST(Sensitivity, FourOverSixCandidateFakeQuantizesWithItsScales) {
  ThreadPool pool(2);
  const int64_t n = 96, k = 64;
  const std::vector<float> w = gaussian_weights(n, k, 31);
  const WeightRows wr{w.data(), DType::F32, n, k};
  const float group = 1.25f * weight_amax(wr, pool).amax;
  const std::vector<float> got =
      fake_quantize_choice(wr, FormatChoice::nvfp4_four_over_six(), group, pool);
  std::vector<float> want(size_t(n * k));
  dequantize(quantize_nvfp4_four_over_six(wr, group, pool), want.data());
  EXPECT_EQ(got, want);
  EXPECT_NE(got, fake_quantize_choice(wr, FormatChoice::of(Format::nvfp4), group, pool));
}

TEST(Sensitivity, SpearmanRankCorrelation) {
  const std::vector<double> a = {1, 2, 3, 4, 5};
  EXPECT_DOUBLE_EQ(spearman_correlation(a, std::vector<double>{10, 20, 30, 40, 50}), 1.0);
  EXPECT_DOUBLE_EQ(spearman_correlation(a, std::vector<double>{5, 4, 3, 2, 1}), -1.0);
  // Monotone transforms do not change ranks.
  EXPECT_DOUBLE_EQ(spearman_correlation(a, std::vector<double>{1, 8, 27, 64, 125}), 1.0);
  // Ties take average ranks: ranks (1.5, 1.5, 3) vs (1, 2, 3) -> 0.866...
  EXPECT_NEAR(spearman_correlation(std::vector<double>{1, 1, 2}, std::vector<double>{1, 2, 3}),
              std::sqrt(3.0) / 2, 1e-12);
  EXPECT_TRUE(std::isnan(spearman_correlation(std::vector<double>{1}, std::vector<double>{2})));
  EXPECT_TRUE(std::isnan(spearman_correlation(std::vector<double>{1, 1}, std::vector<double>{1, 2})));
  EXPECT_THROW(spearman_correlation(a, std::vector<double>{1}), Error);
}

}  // namespace
}  // namespace qf

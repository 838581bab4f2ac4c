// AWQ: identity on a layer whose channels are alike, lower output error than RTN where
// activations have outlier channels, the clip search, AWQ then GPTQ, norm folding and the
// scaled statistics.
#include "algo/awq.h"
#include "algo/gptq.h"
#include "algo/round_to_nearest.h"
#include "algo_test_util.h"
#include "core/convert.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "formats/fake_quant.h"

#include <gtest/gtest.h>

#include <random>

namespace qf {
namespace {

// Output error of a quantized member on X: deq / s versus W (x * pqs) Q^T vs x W^T.
double awq_error(const std::vector<float>& x, int64_t tokens, int64_t in, const std::vector<float>& w,
                 const QuantizedTensor& q, const std::vector<float>& pqs, int64_t out) {
  std::vector<float> d(w.size());
  dequantize(q, d.data());
  for (int64_t r = 0; r < out; ++r)
    for (int64_t c = 0; c < in; ++c) d[size_t(r * in + c)] *= pqs[size_t(c)];
  return test::output_error(x, tokens, in, w, d, out);
}

TEST(AwqTest, EqualMagnitudesLeaveWeightsUnchanged) {
  ThreadPool pool(2);
  const int64_t out = 16, in = 128;
  std::mt19937 rng(4);
  std::uniform_real_distribution<float> mag(0.01f, 0.1f);
  std::bernoulli_distribution sign;
  std::vector<float> w(size_t(out * in));
  for (int64_t r = 0; r < out; ++r) {
    const float a = mag(rng);
    for (int64_t c = 0; c < in; ++c) w[size_t(r * in + c)] = sign(rng) ? a : -a;
  }
  std::vector<float> x = test::correlated_inputs(32, in, 5);
  LinearStats stats = test::stats_from_inputs(x, 32, in, 32, false);
  std::fill(stats.channel_mean_abs.begin(), stats.channel_mean_abs.end(), 0.7f);
  for (Format f : {Format::nvfp4, Format::int4, Format::mxfp4}) {
    AwqOptions o;
    o.format.format = f;
    o.clip = false;
    const WeightRows view = test::f32_view(w, out, in);
    const AwqResult a = quantize_awq(std::span(&view, 1), stats, o, pool);
    for (float p : a.pre_quant_scale) ASSERT_EQ(p, 1.f) << format_info(f).name;
    EXPECT_EQ(a.scaled_weights[0], w);
    const QuantizedTensor r = quantize_rtn(view, o.format, a.group_amax, pool);
    EXPECT_EQ(a.tensors[0].codes, r.codes);
    EXPECT_EQ(a.tensors[0].block_scales, r.block_scales);
    EXPECT_EQ(a.tensors[0].scales, r.scales);
  }
}

struct OutlierLayer {
  int64_t out = 32, in = 256, tokens = 512;
  std::vector<float> w = test::random_weights(out, in, 31, false);
  std::vector<float> x = test::correlated_inputs(tokens, in, 32);
  LinearStats stats = test::stats_from_inputs(x, tokens, in, 128);
  float amax() const {
    float a = 0.f;
    for (float v : w) a = std::max(a, std::fabs(v));
    return a;
  }
};

TEST(AwqTest, LowersOutputErrorVersusRtn) {
  ThreadPool pool(2);
  const OutlierLayer L;
  for (Format f : {Format::nvfp4, Format::int4}) {
    for (bool clip : {false, true}) {
      AwqOptions o;
      o.format.format = f;
      o.format.block = f == Format::int4 ? 32 : 0;
      o.clip = clip;
      const WeightRows view = test::f32_view(L.w, L.out, L.in);
      const AwqResult a = quantize_awq(std::span(&view, 1), L.stats, o, pool);
      const double ea = awq_error(L.x, L.tokens, L.in, L.w, a.tensors[0], a.pre_quant_scale, L.out);
      const std::vector<float> ones(size_t(L.in), 1.f);
      const double er = awq_error(L.x, L.tokens, L.in, L.w, quantize_rtn(view, o.format, L.amax(), pool), ones, L.out);
      EXPECT_LT(ea, er) << format_info(f).name << " clip " << clip << " alpha " << a.alpha;
      EXPECT_EQ(a.alpha_losses.size(), 11u);
      // The result is (x * pqs) (W s)^T: W s times pqs must give W back.
      for (int64_t c = 0; c < L.in; ++c)
        EXPECT_NEAR(a.scaled_weights[0][size_t(c)] * a.pre_quant_scale[size_t(c)], L.w[size_t(c)],
                    1e-6f * std::fabs(L.w[size_t(c)]) + 1e-12f);
    }
  }
}

TEST(AwqTest, PreQuantScaleInWeightDtypeIsTheScaleApplied) {
  ThreadPool pool(2);
  const OutlierLayer L;
  AwqOptions o;
  o.format.format = Format::nvfp4;
  o.clip = false;
  o.pre_quant_scale_dtype = DType::BF16;
  const WeightRows view = test::f32_view(L.w, L.out, L.in);
  const AwqResult a = quantize_awq(std::span(&view, 1), L.stats, o, pool);
  for (int64_t c = 0; c < L.in; ++c) {
    const float p = a.pre_quant_scale[size_t(c)];
    float stored = p;
    round_through(DType::BF16, &stored, 1);
    ASSERT_EQ(p, stored) << "channel " << c << " is not a BF16 value";
    // The weights were scaled by exactly 1/pqs (float32), not by the unrounded search scale.
    EXPECT_EQ(a.scaled_weights[0][size_t(c)], L.w[size_t(c)] * (1.f / p)) << c;
  }
  o.pre_quant_scale_dtype = DType::I8;
  EXPECT_THROW(quantize_awq(std::span(&view, 1), L.stats, o, pool), Error);
}

TEST(AwqTest, FusedMembersShareScalesAndGlobalAmax) {
  ThreadPool pool(2);
  const OutlierLayer L;
  const std::vector<float> w2 = test::random_weights(8, L.in, 77, false);
  const WeightRows views[2] = {test::f32_view(L.w, L.out, L.in), test::f32_view(w2, 8, L.in)};
  AwqOptions o;
  const AwqResult a = quantize_awq(views, L.stats, o, pool);
  ASSERT_EQ(a.tensors.size(), 2u);
  EXPECT_EQ(a.tensors[0].global_scale, a.tensors[1].global_scale);
  float input_amax = 0.f;
  for (int64_t c = 0; c < L.in; ++c)
    input_amax = std::max(input_amax, L.stats.channel_amax[size_t(c)] * a.pre_quant_scale[size_t(c)]);
  EXPECT_EQ(a.input_amax, input_amax);
}

TEST(AwqTest, ThenGptqOnScaledStatistics) {
  ThreadPool pool(2);
  const OutlierLayer L;
  AwqOptions o;
  o.clip = false;
  const WeightRows view = test::f32_view(L.w, L.out, L.in);
  const AwqResult a = quantize_awq(std::span(&view, 1), L.stats, o, pool);
  const LinearStats scaled = scale_linear_stats(L.stats, a.pre_quant_scale);
  GptqOptions g;
  const GptqResult q = quantize_gptq(test::f32_view(a.scaled_weights[0], L.out, L.in), scaled, g,
                                     a.group_amax, pool);
  const double e_awq = awq_error(L.x, L.tokens, L.in, L.w, a.tensors[0], a.pre_quant_scale, L.out);
  const double e_both = awq_error(L.x, L.tokens, L.in, L.w, q.tensor, a.pre_quant_scale, L.out);
  EXPECT_LT(e_both, e_awq);
}

TEST(AwqTest, ScaledStatisticsMatchScaledInputs) {
  const int64_t in = 16, tokens = 40;
  const std::vector<float> x = test::correlated_inputs(tokens, in, 8);
  std::vector<float> pqs(static_cast<size_t>(in));
  for (int64_t c = 0; c < in; ++c) pqs[size_t(c)] = std::ldexp(1.f, int(c % 5) - 2);  // x * pqs exact
  std::vector<float> xs = x;
  for (size_t i = 0; i < xs.size(); ++i) xs[i] *= pqs[i % size_t(in)];
  const LinearStats a = scale_linear_stats(test::stats_from_inputs(x, tokens, in, 4), pqs);
  const LinearStats b = test::stats_from_inputs(xs, tokens, in, 4);
  EXPECT_EQ(a.channel_amax, b.channel_amax);
  EXPECT_EQ(a.input_amax, b.input_amax);
  EXPECT_EQ(a.samples, b.samples);
  for (size_t i = 0; i < a.xtx.size(); ++i) EXPECT_NEAR(a.xtx[i], b.xtx[i], 1e-9 * std::fabs(b.xtx[i]) + 1e-9);
  for (size_t i = 0; i < a.channel_mean_abs.size(); ++i)
    EXPECT_NEAR(a.channel_mean_abs[i], b.channel_mean_abs[i], 1e-5f * b.channel_mean_abs[i]);
}

TEST(AwqTest, FoldIntoNormMultipliesByPreQuantScale) {
  std::vector<float> w = {1.f, 2.f, 0.5f}, b = {0.1f, -0.2f, 0.f}, g = {0.f, 1.f, -0.5f};
  const std::vector<float> pqs = {2.f, 0.25f, 4.f};
  fold_pre_quant_scale_into_norm(w.data(), b.data(), pqs);
  EXPECT_EQ(w, (std::vector<float>{2.f, 0.5f, 2.f}));
  EXPECT_EQ(b, (std::vector<float>{0.2f, -0.05f, 0.f}));
  fold_pre_quant_scale_into_norm(g.data(), nullptr, pqs, /*one_plus=*/true);  // (1+w)*pqs - 1
  EXPECT_EQ(g, (std::vector<float>{1.f, -0.5f, 1.f}));
}

}  // namespace
}  // namespace qf

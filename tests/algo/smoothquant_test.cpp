// SmoothQuant: the smoothed layer computes the same product before quantization, the scale rule
// (alpha, dead channels, clamp), and the INT8 per-channel weight format.
#include "algo/smoothquant.h"
#include "algo_test_util.h"
#include "core/thread_pool.h"
#include "core/convert.h"
#include "core/error.h"
#include "formats/fake_quant.h"
#include "formats/int8.h"

#include <gtest/gtest.h>

namespace qf {
namespace {

TEST(SmoothQuantTest, PreservesProductBeforeQuantization) {
  ThreadPool pool(2);
  const int64_t out = 12, in = 64, tokens = 50;
  const std::vector<float> w = test::random_weights(out, in, 3);
  const std::vector<float> x = test::correlated_inputs(tokens, in, 4);
  const LinearStats stats = test::stats_from_inputs(x, tokens, in, 0, false);
  for (float alpha : {1.0f, 0.5f}) {
    SmoothQuantOptions o;
    o.alpha = alpha;
    const WeightRows view = test::f32_view(w, out, in);
    const SmoothQuantResult s = smoothquant(std::span(&view, 1), stats, o, pool);
    for (int64_t t = 0; t < tokens; ++t)
      for (int64_t r = 0; r < out; ++r) {
        double ref = 0.0, got = 0.0, mag = 0.0;
        for (int64_t c = 0; c < in; ++c) {
          const float xc = x[size_t(t * in + c)];
          ref += double(xc) * w[size_t(r * in + c)];
          got += double(xc * s.pre_quant_scale[size_t(c)]) * s.smoothed[0][size_t(r * in + c)];
          mag += std::fabs(double(xc) * w[size_t(r * in + c)]);
        }
        ASSERT_NEAR(got, ref, 1e-6 * mag) << "alpha " << alpha;
      }
  }
}

TEST(SmoothQuantTest, ScaleRule) {
  ThreadPool pool(1);
  const int64_t in = 4;
  const std::vector<float> w = {0.5f, -2.f, 1.f, 3.f, -0.25f, 1.f, 0.f, 1.f};  // 2 rows
  LinearStats stats;
  stats.channel_amax = {4.f, 0.f, 1e-6f, 2.f};
  const WeightRows view = test::f32_view(w, 2, in);
  const SmoothQuantResult a = smoothquant(std::span(&view, 1), stats, SmoothQuantOptions{}, pool);
  // alpha = 1: s = 1 / a_max; dead channel -> 1; 1/1e-6 clamped to 1e4.
  EXPECT_EQ(a.pre_quant_scale, (std::vector<float>{0.25f, 1.f, 1e4f, 0.5f}));
  EXPECT_EQ(a.input_amax, 1.f);
  EXPECT_EQ(a.input_scale, 1.f * (1.0f / 127.0f));
  EXPECT_EQ(a.smoothed[0][0], 2.f);  // W[:,c] / s_c
  SmoothQuantOptions half;
  half.alpha = 0.5f;
  const SmoothQuantResult b = smoothquant(std::span(&view, 1), stats, half, pool);
  EXPECT_FLOAT_EQ(b.pre_quant_scale[0], std::sqrt(0.5f) / 2.f);  // sqrt(w_max) / sqrt(a_max)
}

TEST(SmoothQuantTest, Int8ChannelFormat) {
  ThreadPool pool(1);
  const std::vector<float> w = {127.f, 0.5f, 1.5f, -2.5f, 0.f, 0.f, 0.f, 0.f};
  const Int8ChannelTensor q = int8_channel_quantize(w.data(), 2, 4, DType::BF16, pool);
  EXPECT_EQ(q.scales, (std::vector<float>{1.f, 1.f}));  // 127 * fl32(1/127) -> bf16 1; dead row 1
  EXPECT_EQ(q.codes, (std::vector<int8_t>{127, 0, 2, -2, 0, 0, 0, 0}));  // half to even
  std::vector<float> d(8);
  int8_channel_dequantize(q, d.data());
  EXPECT_EQ(d[2], 2.f);
}

TEST(SmoothQuantTest, PreQuantScaleRoundedToItsStoredDtype) {
  // BF16 pre_quant_scale (ModelOpt stores it in the model dtype): s is rounded before the
  // weights are divided, so x*s_stored*(W/s_stored) is the layer, and input_amax uses s_stored.
  ThreadPool pool(2);
  const int64_t out = 8, in = 32, tokens = 20;
  const std::vector<float> w = test::random_weights(out, in, 5);
  const std::vector<float> x = test::correlated_inputs(tokens, in, 6);
  const LinearStats stats = test::stats_from_inputs(x, tokens, in, 0, false);
  SmoothQuantOptions o;
  o.alpha = 0.5f;
  o.pre_quant_scale_dtype = DType::BF16;
  const WeightRows view = test::f32_view(w, out, in);
  const SmoothQuantResult s = smoothquant(std::span(&view, 1), stats, o, pool);
  float amax = 0.f;
  for (int64_t c = 0; c < in; ++c) {
    const float v = s.pre_quant_scale[size_t(c)];
    uint16_t b = 0;
    convert_from_f32(DType::BF16, &v, &b, 1);
    float back = 0.f;
    convert_to_f32(DType::BF16, &b, &back, 1);
    EXPECT_EQ(back, v) << c;  // exactly representable in BF16
    EXPECT_EQ(s.smoothed[0][size_t(c)], w[size_t(c)] / v) << c;
    amax = std::max(amax, stats.channel_amax[size_t(c)] * v);
  }
  EXPECT_EQ(s.input_amax, amax);
  o.pre_quant_scale_dtype = DType::I8;
  EXPECT_THROW(smoothquant(std::span(&view, 1), stats, o, pool), Error);
}

TEST(SmoothQuantTest, Int8AsRegistryTensor) {
  ThreadPool pool(1);
  const int64_t rows = 3, cols = 16;
  const std::vector<float> w = test::random_weights(rows, cols, 7);
  Int8ChannelTensor t = int8_channel_quantize(w.data(), rows, cols, DType::F32, pool);
  std::vector<float> ref(w.size()), got(w.size());
  int8_channel_dequantize(t, ref.data());
  const std::vector<int8_t> codes = t.codes;
  const QuantizedTensor q = int8_to_quantized(std::move(t));
  EXPECT_EQ(q.format, Format::int8);
  EXPECT_EQ(q.block, 1);
  ASSERT_EQ(q.codes.size(), codes.size());
  for (size_t i = 0; i < codes.size(); ++i) EXPECT_EQ(int8_t(q.codes[i]), codes[i]);
  dequantize(q, got.data());
  EXPECT_EQ(got, ref);
  // One row through fake_quantize_unit: the same scale rule and rounding.
  float amax = 0.f;
  for (int64_t c = 0; c < cols; ++c) amax = std::max(amax, std::fabs(w[size_t(c)]));
  EXPECT_EQ(int8_scale_from_amax(amax, DType::F32), q.scales[0]);
  std::vector<float> row(static_cast<size_t>(cols));
  fake_quantize_unit(Format::int8, w.data(), cols, amax, DType::F32, row.data());
  for (int64_t c = 0; c < cols; ++c) EXPECT_EQ(row[size_t(c)], ref[size_t(c)]) << c;
  EXPECT_EQ(int8_scale_from_amax(0.f, DType::F32), 1.f);  // dead row
}

}  // namespace
}  // namespace qf

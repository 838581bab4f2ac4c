// Calibration capture: the statistics accumulator on known inputs, the per-layer engine API
// against the whole-model forward, K/V amax, and the simulated activation quantizers.
#include "calib/layer_calibration.h"
#include "core/error.h"
#include "core/numeric.h"
#include "core/thread_pool.h"
#include "engine/activation_quant.h"
#include "engine/model.h"
#include "test_util.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

namespace qf {
namespace {

namespace fs = std::filesystem;

fs::path tinystories656k() { return test::fixtures_dir() / "models" / "tinystories-656K-hf"; }

std::vector<float> random_rows(int64_t n, int64_t cols, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.f, 1.f);
  std::vector<float> x(size_t(n * cols));
  for (auto& v : x) v = d(rng);
  return x;
}

TEST(StatsAccumulator, AmaxMeanAndXtxOfAKnownInput) {
  const int64_t cols = 3;
  const std::vector<float> x = {1.f, -2.f, 0.5f,   //
                                -3.f, 1.f, 0.f,    //
                                2.f, 0.f, -0.25f};
  CaptureOptions o;
  o.xtx = true;
  o.sample_rows = 2;
  ThreadPool pool(2);
  StatsAccumulator acc(cols, o, 0);
  acc.add(x.data(), 2, &pool);
  acc.add(x.data() + 6, 1, &pool);
  const LinearStats s = std::move(acc).finish();
  EXPECT_EQ(s.tokens, 3);
  EXPECT_EQ(s.input_amax, 3.f);
  EXPECT_EQ(s.channel_amax, (std::vector<float>{3.f, 2.f, 0.5f}));
  EXPECT_FLOAT_EQ(s.channel_mean_abs[0], 2.f);
  EXPECT_FLOAT_EQ(s.channel_mean_abs[1], 1.f);
  EXPECT_FLOAT_EQ(s.channel_mean_abs[2], 0.25f);
  ASSERT_EQ(s.xtx.size(), 9u);
  for (int64_t i = 0; i < cols; ++i)
    for (int64_t j = 0; j < cols; ++j) {
      double direct = 0;
      for (int64_t t = 0; t < 3; ++t) direct += double(x[size_t(t * cols + i)]) * x[size_t(t * cols + j)];
      EXPECT_EQ(s.xtx[size_t(i * cols + j)], direct) << i << "," << j;
    }
  EXPECT_EQ(s.sample_count(cols), 2);
}

TEST(StatsAccumulator, XtxSymmetricAndIndependentOfThreadsAndChunking) {
  const int64_t cols = 40, n = 300;
  const auto x = random_rows(n, cols, 3);
  CaptureOptions o;
  o.xtx = true;
  o.sample_rows = 64;
  o.seed = 9;
  ThreadPool one(1), four(4);
  StatsAccumulator a(cols, o, 1), b(cols, o, 1);
  a.add(x.data(), n, &one);
  for (int64_t t = 0; t < n; t += 100) b.add(x.data() + t * cols, 100, &four);
  const LinearStats sa = std::move(a).finish(), sb = std::move(b).finish();
  EXPECT_EQ(sa.xtx, sb.xtx);
  EXPECT_EQ(sa.samples, sb.samples);
  EXPECT_EQ(sa.sample_count(cols), 64);
  for (int64_t i = 0; i < cols; ++i)
    for (int64_t j = 0; j < cols; ++j)
      EXPECT_EQ(sa.xtx[size_t(i * cols + j)], sa.xtx[size_t(j * cols + i)]);
  // Every kept sample is an input row.
  for (int64_t r = 0; r < 64; ++r) {
    bool found = false;
    for (int64_t t = 0; t < n && !found; ++t)
      found = std::equal(x.begin() + t * cols, x.begin() + (t + 1) * cols,
                         sa.samples.begin() + r * cols);
    EXPECT_TRUE(found) << r;
  }
}

TEST(StatsAccumulator, NanIsAnError) {
  CaptureOptions o;
  StatsAccumulator acc(2, o, 0);
  const float x[2] = {1.f, std::nanf("")};
  EXPECT_THROW(acc.add(x, 1, nullptr), Error);
}

// Records the raw K/V maxima and input maxima itself.
class RecordingObserver final : public LayerObserver {
 public:
  float in_amax[kLayerInputs] = {};
  float k = 0, v = 0;
  void linear_input(LayerInput which, int, const float* x, int64_t n, int64_t cols) override {
    for (int64_t i = 0; i < n * cols; ++i)
      in_amax[int(which)] = std::max(in_amax[int(which)], std::fabs(x[i]));
  }
  void key_value(const float* kk, const float* vv, int64_t n, int64_t kd, int64_t vd) override {
    for (int64_t i = 0; i < n * kd; ++i) k = std::max(k, std::fabs(kk[i]));
    for (int64_t i = 0; i < n * vd; ++i) v = std::max(v, std::fabs(vv[i]));
  }
};

TEST(LayerCalibration, LayerByLayerEqualsTheWholeForwardAndCapturesKv) {
  QF_REQUIRE_FIXTURES();
  ModelOptions mo;
  mo.threads = 2;
  mo.max_seq = 64;
  auto m = Model::load(tinystories656k(), mo);
  const Architecture& a = m->arch();
  std::vector<int32_t> ids(48);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = int32_t((i * 37 + 1) % size_t(a.vocab_size));
  const int64_t n = int64_t(ids.size());
  std::vector<float> ref(size_t(n * a.vocab_size)), got(ref.size());
  m->forward(ids, 0, ref.data(), true);
  std::vector<float> h(size_t(n * a.hidden_size));
  m->embed(ids, h.data());
  std::vector<RecordingObserver> obs(size_t(a.num_layers));
  std::vector<double> out_ms(size_t(a.num_layers), 0.0);  // mean ||h_{l+1}||^2 per token
  for (int64_t l = 0; l < a.num_layers; ++l) {
    m->forward_layer(l, h.data(), n, &obs[size_t(l)]);
    for (float x : h) out_ms[size_t(l)] += double(x) * double(x) / double(n);
  }
  m->head(h.data(), n, got.data());
  EXPECT_EQ(ref, got);

  // calibrate_layers over two windows reports the same maxima per layer.
  const std::vector<std::vector<int32_t>> windows = {ids, std::vector<int32_t>(ids.rbegin(), ids.rend())};
  std::vector<LayerCapture> caps;
  LayerCalibrationOptions co;
  const auto rep = calibrate_layers(*m, windows, co, [&](int64_t, LayerCapture& c) {
    caps.push_back(c);
    return static_cast<const LayerWeights*>(nullptr);
  });
  ASSERT_EQ(int64_t(caps.size()), a.num_layers);
  EXPECT_EQ(rep.tokens, 2 * n);
  EXPECT_GT(rep.activation_bytes, 0u);
  // Window 0 alone gave obs; the capture over both windows is at least that and finite.
  for (int64_t l = 0; l < a.num_layers; ++l) {
    EXPECT_GE(caps[size_t(l)].k_amax, obs[size_t(l)].k);
    EXPECT_GE(caps[size_t(l)].v_amax, obs[size_t(l)].v);
    for (int i = 0; i < kLayerInputs; ++i) {
      EXPECT_GE(caps[size_t(l)].inputs[size_t(i)].input_amax, obs[size_t(l)].in_amax[i]);
      // Every input a Linear of the layer reads sees every token; the others (MLA's latents
      // in a Llama) none.
      bool read = false;
      for (size_t j : a.layers[size_t(l)].linears) read |= a.linears[j].input == LayerInput(i);
      EXPECT_EQ(caps[size_t(l)].inputs[size_t(i)].tokens, read ? 2 * n : 0) << i;
    }
  }
  // Layer 0 sees the embeddings of both windows only through its own weights: the same
  // window twice must give exactly the single-window maxima.
  caps.clear();
  calibrate_layers(*m, {ids, ids}, co, [&](int64_t, LayerCapture& c) {
    caps.push_back(c);
    return static_cast<const LayerWeights*>(nullptr);
  });
  for (int64_t l = 0; l < a.num_layers; ++l) {
    EXPECT_GT(out_ms[size_t(l)], 0.0);
    EXPECT_NEAR(caps[size_t(l)].output_mean_square, out_ms[size_t(l)], 1e-9 * out_ms[size_t(l)]);
    EXPECT_EQ(caps[size_t(l)].k_amax, obs[size_t(l)].k);
    EXPECT_EQ(caps[size_t(l)].v_amax, obs[size_t(l)].v);
    for (int i = 0; i < kLayerInputs; ++i)
      EXPECT_EQ(caps[size_t(l)].inputs[size_t(i)].input_amax, obs[size_t(l)].in_amax[i]);
  }
}

TEST(ActivationQuant, Nvfp4BlockRuleAndFp8) {
  // One block whose amax equals the calibrated amax: s8 = e4m3(448) and 6 maps to the amax.
  std::vector<float> x(16, 0.f);
  x[0] = 2688.f;
  x[1] = -1344.f;
  x[2] = 100.f;
  fake_quantize_activations(ActQuant::nvfp4, 1.0f, x.data(), 16);
  EXPECT_EQ(x[0], 2688.f);
  EXPECT_EQ(x[1], -1344.f);
  EXPECT_EQ(x[2], 0.f);  // 100 / 448 = 0.22 -> 0
  // A block far below the global range underflows the E4M3 scale: all zeros.
  std::vector<float> tiny(16, 1e-6f);
  fake_quantize_activations(ActQuant::nvfp4, 1.0f, tiny.data(), 16);
  for (float v : tiny) EXPECT_EQ(v, 0.f);
  // FP8: on-grid values survive, values past 448 * scale saturate.
  float f[3] = {1.5f, 2.f * 448.f, 1000.f};
  fake_quantize_activations(ActQuant::fp8, 2.f, f, 3);
  EXPECT_EQ(f[0], 1.5f);
  EXPECT_EQ(f[1], 896.f);
  EXPECT_EQ(f[2], 896.f);
  // Error bound: nvfp4 relative error of a random block stays under one E2M1 step.
  auto r = random_rows(1, 64, 5);
  auto q = r;
  fake_quantize_activations(ActQuant::nvfp4, 4.f / 2688.f, q.data(), 64);
  for (size_t b = 0; b < r.size(); b += 16) {
    float bamax = 0.f;
    for (size_t i = b; i < b + 16; ++i) bamax = std::max(bamax, std::fabs(r[i]));
    // Largest E2M1 gap (4 -> 6) is 2 units of bamax / 6; half of it, plus E4M3 scale rounding.
    for (size_t i = b; i < b + 16; ++i) EXPECT_LE(std::fabs(q[i] - r[i]), 1.1f * bamax / 6.f);
  }
}

}  // namespace
}  // namespace qf

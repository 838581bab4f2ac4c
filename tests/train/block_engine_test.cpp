// The training code's block forward against the engine's Model::forward_layer on a real tiny
// model (tests/data/conformance/llama_v5, weights widened to F32, exact kernels): the backward
// then differentiates the function the engine computes.
#include "core/error.h"
#include "core/numeric.h"
#include "engine/model.h"
#include "io/safetensors.h"
#include "io/safetensors_writer.h"
#include "kernels/linear.h"
#include "train/block_grad.h"
#include "train/head_grad.h"
#include "test_util.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <random>

namespace qf {
namespace {

namespace fs = std::filesystem;

// max |a − b| / max |b|.
template <typename T>
double relative_diff(const std::vector<T>& a, const std::vector<float>& b) {
  double worst = 0, scale = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    worst = std::max(worst, std::fabs(double(a[i]) - double(b[i])));
    scale = std::max(scale, std::fabs(double(b[i])));
  }
  return worst / scale;
}

TEST(TrainBlock, ForwardMatchesEngineLayer) {
  const fs::path src = fs::path(QFORGE_SOURCE_DIR) / "tests/data/conformance/llama_v5";
  test::ScratchDir scratch;
  test::write_f32_copy(src, scratch.path());
  ModelOptions mo;
  mo.threads = 2;
  mo.kernels = KernelMode::exact;
  auto model = Model::load(scratch.path(), mo);
  const Architecture& a = model->arch();
  const int64_t T = 24, H = a.hidden_size;

  std::mt19937 rng(7);
  std::vector<int32_t> tokens(T);
  for (int32_t& t : tokens) t = int32_t(rng() % uint32_t(a.vocab_size));
  std::vector<float> x(size_t(T * H));
  model->embed(tokens, x.data());

  for (int64_t layer = 0; layer < a.num_layers; ++layer) {
    std::vector<float> engine = x;
    model->forward_layer(layer, engine.data(), T);

    const BlockShape s = block_shape(a, layer);
    const RopeSpec& rope_spec = a.ropes[size_t(a.layers[size_t(layer)].rope)];
    std::vector<float> yf(x.size());
    BlockSaved<float> svf;
    block_forward<float>(s, block_weights<float>(model->weights(), layer),
                         rope_table<float>(rope_spec, T), x.data(), T, yf.data(), svf);
    std::vector<double> xd(x.begin(), x.end()), yd(x.size());
    BlockSaved<double> svd;
    block_forward<double>(s, block_weights<double>(model->weights(), layer),
                          rope_table<double>(rope_spec, T), xd.data(), T, yd.data(), svd);

    // The block's update y − x, which the residual would otherwise hide.
    std::vector<float> d_engine(x.size());
    std::vector<double> d_f(x.size()), d_d(x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      d_engine[i] = engine[i] - x[i];
      d_f[i] = double(yf[i]) - double(x[i]);
      d_d[i] = yd[i] - double(x[i]);
    }
    const double rf = relative_diff(yf, engine), rd = relative_diff(yd, engine);
    const double uf = relative_diff(d_f, d_engine), ud = relative_diff(d_d, d_engine);
    std::printf("[engine] llama_v5 layer %lld: block forward vs forward_layer, max|dy|/max|y|: "
                "float %.2e double %.2e; of the update y-x: float %.2e double %.2e\n",
                (long long)layer, rf, rd, uf, ud);
    EXPECT_LE(rf, 1e-5);
    EXPECT_LE(rd, 1e-5);
    EXPECT_LE(uf, 1e-5);
    EXPECT_LE(ud, 1e-5);
    x = engine;  // the next layer reads what the engine's layer wrote
  }
}

// The head loss against the cross-entropy of the engine's own logits (Model::head) on the
// hidden states after the last layer.
TEST(TrainBlock, HeadLossMatchesEngineLogits) {
  const fs::path src = fs::path(QFORGE_SOURCE_DIR) / "tests/data/conformance/llama_v5";
  test::ScratchDir scratch;
  test::write_f32_copy(src, scratch.path());
  ModelOptions mo;
  mo.threads = 2;
  auto model = Model::load(scratch.path(), mo);
  const Architecture& a = model->arch();
  const int64_t T = 16, H = a.hidden_size, V = a.vocab_size;
  std::mt19937 rng(8);
  std::vector<int32_t> tokens(size_t(T + 1));
  for (int32_t& t : tokens) t = int32_t(rng() % uint32_t(V));
  std::vector<float> x(size_t(T * H));
  model->embed(std::span(tokens).first(size_t(T)), x.data());
  for (int64_t l = 0; l < a.num_layers; ++l) model->forward_layer(l, x.data(), T);

  std::vector<float> logits(size_t(T * V));
  model->head(x.data(), T, logits.data());
  double want = 0;
  for (int64_t t = 0; t < T; ++t) {
    const float* row = logits.data() + t * V;
    const double mx = *std::max_element(row, row + V);
    double sum = 0;
    for (int64_t v = 0; v < V; ++v) sum += std::exp(double(row[v]) - mx);
    want += mx + std::log(sum) - double(row[tokens[size_t(t + 1)]]);
  }
  want /= double(T);

  const ModelWeights& mw = model->weights();
  std::vector<float> head_w(size_t(V * H));
  dequantize_weight_rows(mw.lm_head.w, 0, V, head_w.data());
  const HeadShape hs{T, H, V, a.rms_norm_eps};
  const float got = head_cross_entropy<float>(hs, x.data(), mw.final_norm.data(), head_w.data(),
                                              tokens.data() + 1, {});
  std::printf("[engine] llama_v5 head: cross-entropy %.7f, from the engine's logits %.7f\n",
              double(got), want);
  EXPECT_NEAR(got, want, 1e-5 * want);
}

TEST(TrainBlock, RefusesWhatItDoesNotDifferentiate) {
  nlohmann::json c = nlohmann::json::parse(std::ifstream(
      fs::path(QFORGE_SOURCE_DIR) / "tests/data/conformance/llama_v5/config.json"));
  EXPECT_NO_THROW(block_shape(Architecture::from_config(c, "llama"), 0));
  c["attention_bias"] = true;
  EXPECT_THROW(block_shape(Architecture::from_config(c, "llama"), 0), Error);
}

}  // namespace
}  // namespace qf

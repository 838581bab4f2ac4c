// gpt-oss pieces on their own: the layer spec its config gives (defaults included), its
// routing (top-k logits, softmax over those k), the clamped SwiGLU of its experts, attention
// sinks, and the hub's fused transposed expert tensors read as per-expert [out, in] Linears.
// The whole forward pass is checked against transformers in conformance_test.cpp.
#include "core/error.h"
#include "core/numeric.h"
#include "engine/model.h"
#include "engine/moe_topk_softmax.h"
#include "io/checkpoint.h"
#include "kernels/ops.h"
#include "model/architecture.h"
#include "model/expert_tensors.h"
#include "test_util.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <numeric>

namespace qf {
namespace {

namespace fs = std::filesystem;

fs::path case_dir() { return fs::path(QFORGE_SOURCE_DIR) / "tests/data/conformance/gpt_oss"; }

nlohmann::json case_config() {
  return nlohmann::json::parse(test::read_file(case_dir() / "config.json"));
}

TEST(GptOssArchitecture, LayerSpecOfTheConformanceConfig) {
  const Architecture a = Architecture::from_config(case_config(), "cfg.json");
  EXPECT_EQ(a.model_type, "gpt_oss");
  EXPECT_EQ(a.activation, Activation::clamped_swiglu);
  EXPECT_EQ(a.swiglu_limit, 7.0f);
  EXPECT_EQ(a.swiglu_alpha, 1.702f);
  ASSERT_EQ(a.layers.size(), 2u);
  EXPECT_EQ(a.layers[0].sliding_window, 32);
  EXPECT_EQ(a.layers[1].sliding_window, 0);
  EXPECT_EQ(a.ropes[0].type, RopeType::yarn);
  EXPECT_FALSE(a.ropes[0].truncate);
  const LayerSpec& l = a.layers[1];
  EXPECT_EQ(l.sinks, "model.layers.1.self_attn.sinks");
  ASSERT_TRUE(l.is_moe);
  EXPECT_EQ(l.moe.router, "model.layers.1.mlp.router");
  EXPECT_TRUE(l.moe.router_bias);
  EXPECT_TRUE(l.moe.gate_up_interleaved);
  EXPECT_EQ(l.moe.routing, Routing::topk_softmax);
  EXPECT_EQ(l.moe.num_experts, 8);
  EXPECT_EQ(l.moe.top_k, 2);
  EXPECT_EQ(l.moe.expert_intermediate, 48);
  ASSERT_EQ(l.moe.experts.size(), 8u);
  EXPECT_EQ(l.linears.size(), 4u + 2u * 8u);  // q, k, v, o, then gate_up and down per expert
  const auto& slots = l.moe.experts[5];
  EXPECT_EQ(slots[0], -1);
  const LinearModule& gu = a.linears[l.linears[size_t(slots[1])]];
  const LinearModule& dn = a.linears[l.linears[size_t(slots[2])]];
  EXPECT_EQ(gu.name, "model.layers.1.mlp.experts.5.gate_up_proj");
  EXPECT_EQ(gu.role, LinearRole::gate_up_proj);
  EXPECT_EQ(gu.input, LayerInput::ffn_norm);
  EXPECT_EQ(gu.out_features, 96);
  EXPECT_EQ(gu.in_features, 64);
  EXPECT_TRUE(gu.bias);
  EXPECT_EQ(gu.expert, 5);
  EXPECT_EQ(gu.fold_norm, -1);
  EXPECT_EQ(gu.group, -1);
  EXPECT_EQ(dn.name, "model.layers.1.mlp.experts.5.down_proj");
  EXPECT_EQ(dn.input, LayerInput::mlp_act);
  EXPECT_EQ(dn.out_features, 64);
  EXPECT_EQ(dn.in_features, 48);
  EXPECT_TRUE(dn.bias);
  for (size_t s = 0; s < 4; ++s) EXPECT_TRUE(a.linears[l.linears[s]].bias);  // q/k/v/o
  const auto never = a.never_quantized_modules();
  EXPECT_NE(std::find(never.begin(), never.end(), "model.layers.0.mlp.router"), never.end());
}

// What GptOssConfig fills in when config.json says nothing: yarn RoPE (factor 32, original
// 4096, theta 150000, not truncated), alternating sliding layers of 128, attention biases.
TEST(GptOssArchitecture, ConfigDefaults) {
  nlohmann::json c = case_config();
  for (const char* key : {"rope_parameters", "layer_types", "sliding_window", "attention_bias",
                          "swiglu_alpha", "swiglu_limit", "head_dim", "hidden_act"})
    c.erase(key);
  c["num_hidden_layers"] = 3;
  const Architecture a = Architecture::from_config(c, "cfg.json");
  EXPECT_EQ(a.head_dim, 64);
  EXPECT_EQ(a.ropes[0].type, RopeType::yarn);
  EXPECT_EQ(a.ropes[0].factor, 32.0);
  EXPECT_EQ(a.ropes[0].theta, 150000.0);
  EXPECT_EQ(a.ropes[0].original_max_position_embeddings, 4096);
  EXPECT_FALSE(a.ropes[0].truncate);
  EXPECT_EQ(a.layers[0].sliding_window, 128);
  EXPECT_EQ(a.layers[1].sliding_window, 0);
  EXPECT_EQ(a.layers[2].sliding_window, 128);
  EXPECT_TRUE(a.linears[0].bias);
  EXPECT_EQ(a.swiglu_limit, 7.0f);
  EXPECT_EQ(a.swiglu_alpha, 1.702f);
  // The 4.x layout the hub ships: rope_theta + rope_scaling.
  nlohmann::json v4 = case_config();
  v4.erase("rope_parameters");
  v4["rope_theta"] = 150000;
  v4["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 32.0}, {"beta_fast", 32.0},
                        {"beta_slow", 1.0}, {"truncate", false},
                        {"original_max_position_embeddings", 4096}};
  const Architecture b = Architecture::from_config(v4, "cfg.json");
  const Architecture ref = Architecture::from_config(case_config(), "cfg.json");
  EXPECT_EQ(b.ropes[0].inv_freq(256), ref.ropes[0].inv_freq(256));
  EXPECT_EQ(b.ropes[0].attention_factor, ref.ropes[0].attention_factor);
}

TEST(GptOssRouting, TopKLogitsThenSoftmaxOverThoseK) {
  const float logits[6] = {0.5f, 2.0f, -1.0f, 2.0f, 1.5f, -3.0f};
  int experts[3];
  float weights[3];
  route_topk_softmax(logits, 6, 3, experts, weights);
  // Ties go to the lower index.
  EXPECT_EQ(experts[0], 1);
  EXPECT_EQ(experts[1], 3);
  EXPECT_EQ(experts[2], 4);
  const double z = 2 * std::exp(2.0) + std::exp(1.5);
  EXPECT_NEAR(weights[0], std::exp(2.0) / z, 1e-7);
  EXPECT_NEAR(weights[1], std::exp(2.0) / z, 1e-7);
  EXPECT_NEAR(weights[2], std::exp(1.5) / z, 1e-7);
  // Softmax over the top k equals a full softmax renormalised over them (Mixtral's order).
  double full = 0;
  for (float l : logits) full += std::exp(double(l));
  double kept = 0;
  for (int e : experts) kept += std::exp(double(logits[e])) / full;
  for (int j = 0; j < 3; ++j)
    EXPECT_NEAR(weights[j], std::exp(double(logits[experts[j]])) / full / kept, 1e-7);
  // k = 1: weight 1.
  route_topk_softmax(logits, 6, 1, experts, weights);
  EXPECT_EQ(experts[0], 1);
  EXPECT_EQ(weights[0], 1.0f);
}

TEST(GptOssActivation, ClampedSwiGlu) {
  const float limit = 7.f, alpha = 1.702f;
  auto ref = [&](double g, double u) {
    g = std::min(g, double(limit));
    u = std::clamp(u, -double(limit), double(limit));
    return (u + 1) * g / (1 + std::exp(-alpha * g));
  };
  const float gate_in[] = {0.5f, -2.f, 9.f, 7.f, -20.f, 3.f, 0.f};
  const float up[] = {1.f, 0.25f, -0.5f, 12.f, -9.f, -7.5f, 4.f};
  float gate[7];
  std::copy(std::begin(gate_in), std::end(gate_in), gate);
  clamped_swiglu_mul(gate, up, 7, limit, alpha);
  for (int i = 0; i < 7; ++i)
    EXPECT_NEAR(gate[i], ref(gate_in[i], up[i]), 1e-6 * std::max(1.0, std::fabs(ref(gate_in[i], up[i])))) << i;
  // The gate is clamped from above only, the up projection on both sides.
  EXPECT_EQ(gate[2], gate[3] * float((-0.5 + 1) / (7 + 1)));
  EXPECT_NEAR(gate[5], -6.0 * ref(3.0, 0.0), 1e-5);  // up -7.5 -> -7, (u + 1) = -6
  EXPECT_EQ(gate[6], 0.f);
  // A very negative gate is not clamped: g sigmoid(alpha g) is a tiny negative, times -6.
  EXPECT_GT(gate[4], 0.f);
  EXPECT_LT(gate[4], 1e-12f);
}

TEST(GptOssAttention, SinkOfMinusInfinityIsNoSink) {
  const float x[5] = {0.3f, -1.2f, 2.5f, 0.0f, 1.1f};
  float a[5], b[5];
  std::copy(x, x + 5, a);
  std::copy(x, x + 5, b);
  softmax(a, 5);
  softmax_with_sink(b, 5, -std::numeric_limits<float>::infinity());
  for (int i = 0; i < 5; ++i) EXPECT_EQ(a[i], b[i]) << i;
}

TEST(GptOssAttention, SinkTakesItsShareAndIsDropped) {
  const float x[4] = {0.3f, -1.2f, 2.5f, 0.0f};
  for (float sink : {-3.f, 0.7f, 4.f}) {
    float p[4];
    std::copy(x, x + 4, p);
    softmax_with_sink(p, 4, sink);
    double z = std::exp(double(sink));
    for (float v : x) z += std::exp(double(v));
    double sum = 0;
    for (int i = 0; i < 4; ++i) {
      EXPECT_NEAR(p[i], std::exp(double(x[i])) / z, 1e-7);
      sum += p[i];
    }
    EXPECT_NEAR(sum, 1 - std::exp(double(sink)) / z, 1e-6);
  }
  // A sink far above the scores takes (almost) everything, and nothing overflows.
  float p[4];
  std::copy(x, x + 4, p);
  softmax_with_sink(p, 4, 200.f);
  for (float v : p) EXPECT_TRUE(v >= 0 && v < 1e-30);
}

// The hub layout: expert e's Linear weight is the transpose of slice e of the x @ W tensor,
// and its bias is slice e of the fused bias.
TEST(GptOssExperts, FusedTransposedTensorsReadAsPerExpertLinears) {
  auto ck = open_model_checkpoint(case_dir());
  EXPECT_EQ(ck->find("model.layers.0.mlp.experts.gate_up_proj"), nullptr);
  const SafetensorsFile raw = SafetensorsFile::open(case_dir() / "model.safetensors");
  const TensorView gu_all = raw.view(*raw.find("model.layers.1.mlp.experts.gate_up_proj"));
  const TensorView dn_all = raw.view(*raw.find("model.layers.1.mlp.experts.down_proj"));
  const TensorView gb_all = raw.view(*raw.find("model.layers.1.mlp.experts.gate_up_proj_bias"));
  const int64_t H = 64, I2 = 96, I = 48;
  auto bf16 = [](const std::byte* p, int64_t i) {
    uint16_t h;
    std::memcpy(&h, p + 2 * i, 2);
    return bf16_to_f32(h);
  };
  for (int e : {0, 3, 7}) {
    const CheckpointTensor* gu = ck->find(fmt::format("model.layers.1.mlp.experts.{}.gate_up_proj.weight", e));
    const CheckpointTensor* dn = ck->find(fmt::format("model.layers.1.mlp.experts.{}.down_proj.weight", e));
    const CheckpointTensor* gb = ck->find(fmt::format("model.layers.1.mlp.experts.{}.gate_up_proj.bias", e));
    ASSERT_TRUE(gu && dn && gb);
    EXPECT_TRUE(gu->transposed);
    EXPECT_FALSE(gb->transposed);
    EXPECT_EQ(gu->entry->shape, (Shape{I2, H}));
    EXPECT_EQ(dn->entry->shape, (Shape{H, I}));
    const TensorData g = read_tensor(*gu), d = read_tensor(*dn), b = read_tensor(*gb);
    EXPECT_NE(g.owned, nullptr);
    EXPECT_EQ(b.owned, nullptr);
    for (int64_t r = 0; r < I2; ++r)
      for (int64_t c = 0; c < H; ++c)
        ASSERT_EQ(bf16(g.view.data, r * H + c), bf16(gu_all.data, e * H * I2 + c * I2 + r));
    for (int64_t r = 0; r < H; ++r)
      for (int64_t c = 0; c < I; ++c)
        ASSERT_EQ(bf16(d.view.data, r * I + c), bf16(dn_all.data, e * I * H + c * H + r));
    for (int64_t r = 0; r < I2; ++r) ASSERT_EQ(bf16(b.view.data, r), bf16(gb_all.data, e * I2 + r));
  }
}

// A fused expert tensor of the wrong shape is a one-line error naming it.
TEST(GptOssExperts, WrongShapeNamesTheTensor) {
  test::ScratchDir dir;
  fs::copy(case_dir(), dir.path(), fs::copy_options::recursive);
  auto c = case_config();
  c["intermediate_size"] = 40;
  test::write_file(dir / "config.json", c.dump());
  try {
    ModelWeights::load(dir.path());
    FAIL() << "loaded";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
    EXPECT_NE(m.find("tensor 'model.layers.0.mlp.experts.gate_up_proj' is [8, 64, 96], expected "
                     "[8, 64, 80]"), std::string::npos) << m;
  }
}

}  // namespace
}  // namespace qf

// gpt-oss pieces on their own: the layer spec its config gives (defaults included), its
// routing (top-k logits, softmax over those k), the clamped SwiGLU of its experts, attention
// sinks, and the hub's fused transposed expert tensors read as per-expert [out, in] Linears.
// The whole forward pass is checked against transformers in conformance_test.cpp.
#include "core/error.h"
#include "core/numeric.h"
#include "algo/round_to_nearest.h"
#include "core/thread_pool.h"
#include "engine/model.h"
#include "engine/weights.h"
#include "formats/weight_rows.h"
#include "pipeline/linear_quantizer.h"
#include "kernels/linear.h"
#include "engine/moe_topk_softmax.h"
#include "formats/mxfp4.h"
#include "io/checkpoint.h"
#include "io/safetensors_writer.h"
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
#include <map>
#include <limits>
#include <numeric>
#include <random>

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

// A synthetic original release in `dir`/mx (MXFP4 experts, `*_blocks` [E, out, in/32, 16] +
// `*_scales` E8M0, out-major, element 2j in the low nibble) and the same model with the
// dequantized experts in the BF16 hub layout in `dir`/ref. With `wide`, rows 0-3 of layer 1
// expert 2's gate_up are scaled by 2^-30, so that tensor's block scales span more than 18
// binades.
void write_mxfp4_release(const fs::path& dir, bool wide = false) {
  const int64_t E = 8, H = 64, I = 32;  // MXFP4 needs hidden and intermediate multiples of 32
  nlohmann::json config = case_config();
  config["intermediate_size"] = I;
  fs::create_directories(dir / "mx");
  fs::create_directories(dir / "ref");
  test::write_file(dir / "ref" / "config.json", config.dump());
  config["quantization_config"] = {
      {"quant_method", "mxfp4"},
      {"modules_to_not_convert",
       {"model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"}}};
  test::write_file(dir / "mx" / "config.json", config.dump());
  test::write_file(dir / "mx" / "tokenizer.json", test::byte_level_tokenizer());

  const SafetensorsFile src = SafetensorsFile::open(case_dir() / "model.safetensors");
  struct Tensor {
    TensorSpec spec;
    std::vector<std::byte> bytes;
  };
  std::vector<Tensor> common, mx, ref;
  for (const auto& e : src.tensors()) {
    if (e.name.find(".mlp.experts.") != std::string::npos) continue;
    const TensorView v = src.view(e);
    common.push_back({{e.name, e.dtype, e.shape}, std::vector<std::byte>(v.data, v.data + v.nbytes)});
  }
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.f, 1.f);
  auto bf16_bytes = [](const std::vector<float>& f) {
    std::vector<std::byte> b(f.size() * 2);
    for (size_t i = 0; i < f.size(); ++i) {
      const uint16_t h = f32_to_bf16(f[i]);
      std::memcpy(b.data() + 2 * i, &h, 2);
    }
    return b;
  };
  for (int layer = 0; layer < 2; ++layer) {
    const std::string p = fmt::format("model.layers.{}.mlp.experts.", layer);
    // proj 0: gate_up [2I, H] (std 3/sqrt(H): the clamp is hit), 1: down [H, I].
    for (int proj = 0; proj < 2; ++proj) {
      const int64_t rows = proj == 0 ? 2 * I : H, cols = proj == 0 ? H : I;
      const float std_dev = proj == 0 ? 3.f / 8.f : 0.3f / std::sqrt(float(I));
      std::vector<std::byte> blocks, scales;
      std::vector<float> stored(size_t(E * rows * cols)), bias(size_t(E * rows));
      for (int64_t x = 0; x < E; ++x) {
        std::vector<float> w(size_t(rows * cols));
        for (float& v : w) v = normal(rng) * std_dev;
        if (wide && layer == 1 && proj == 0 && x == 2)
          for (size_t i = 0; i < size_t(4 * cols); ++i) w[i] = std::ldexp(w[i], -30);
        std::vector<uint8_t> packed(size_t(rows * cols / 2)), sc(size_t(rows * cols / 32));
        mxfp4_quantize_reference(WeightRows{w.data(), DType::F32, rows, cols}, packed.data(), sc.data());
        for (uint8_t b : packed) blocks.push_back(std::byte(b));
        for (uint8_t b : sc) scales.push_back(std::byte(b));
        std::vector<float> deq(w.size());
        mxfp4_dequantize(packed.data(), sc.data(), rows, cols, deq.data());
        // The hub's float layout is x @ W: [in, out] per expert.
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t c = 0; c < cols; ++c)
            stored[size_t(x * rows * cols + c * rows + r)] = deq[size_t(r * cols + c)];
      }
      for (float& v : bias) v = bf16_to_f32(f32_to_bf16(0.1f * normal(rng)));
      const std::string name = p + (proj == 0 ? "gate_up_proj" : "down_proj");
      mx.push_back({{name + "_blocks", DType::U8, {E, rows, cols / 32, 16}}, blocks});
      mx.push_back({{name + "_scales", DType::U8, {E, rows, cols / 32}}, scales});
      mx.push_back({{name + "_bias", DType::BF16, {E, rows}}, bf16_bytes(bias)});
      ref.push_back({{name, DType::BF16, {E, cols, rows}}, bf16_bytes(stored)});
      ref.push_back({{name + "_bias", DType::BF16, {E, rows}}, bf16_bytes(bias)});
    }
  }
  for (const auto& [sub, extra] : {std::pair{"mx", &mx}, std::pair{"ref", &ref}}) {
    std::vector<TensorSpec> specs;
    for (const auto* list : {&common, extra})
      for (const Tensor& t : *list) specs.push_back(t.spec);
    SafetensorsWriter w(dir / sub / "model.safetensors", specs);
    for (const auto* list : {&common, extra})
      for (const Tensor& t : *list) w.write(t.spec.name, t.bytes);
    w.finish();
  }
}

// The original release's MXFP4 experts are read as MXFP4 Linears in place: a model made of
// them computes what the same model with the dequantized values in the BF16 hub layout does.
TEST(GptOssExperts, Mxfp4ReleaseLayoutReadsAsMxfp4Experts) {
  test::ScratchDir dir;
  write_mxfp4_release(dir.path());
  ModelOptions mo;
  mo.threads = 2;
  auto quantized = Model::load(dir / "mx", mo);
  auto reference = Model::load(dir / "ref", mo);
  EXPECT_EQ(quantized->weights().quantization, "gpt-oss-mxfp4 MXFP4");
  const Architecture& a = quantized->arch();
  const LayerSpec& spec = a.layers[1];
  const auto& slots = spec.moe.experts[3];
  const EngineLinear& gu = quantized->weights().layers[1].linears[size_t(slots[1])];
  EXPECT_EQ(gu.w.format, WeightFormat::mxfp4);
  EXPECT_EQ(gu.storage, nullptr);  // a view of the mapped blocks
  EXPECT_EQ(quantized->weights().layers[1].linears[0].w.format, WeightFormat::bf16);  // q_proj
  EXPECT_EQ(quantized->weights().layers[1].router.w.format, WeightFormat::bf16);

  std::vector<int32_t> ids(96);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = int32_t((i * 37 + 11) % 256);
  const int64_t V = a.vocab_size, T = int64_t(ids.size());
  std::vector<float> lq(size_t(T * V)), lr(size_t(T * V));
  quantized->forward(ids, 0, lq.data(), true);
  reference->forward(ids, 0, lr.data(), true);
  double max_diff = 0, max_abs = 0;
  for (size_t i = 0; i < lq.size(); ++i) {
    max_diff = std::max(max_diff, std::fabs(double(lq[i]) - double(lr[i])));
    max_abs = std::max(max_abs, std::fabs(double(lr[i])));
  }
  EXPECT_LT(max_diff, 1e-4) << "logits up to " << max_abs;
  EXPECT_GT(max_abs, 0.5);

  // quantize casts the MXFP4 experts to NVFP4 only.
  const auto r = test::run_qforge("quantize " + test::quote(dir / "mx") + " -o " +
                                  test::quote(dir / "out") + " --format fp8");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("can be cast to NVFP4 weight-only"), std::string::npos) << r.err;
}

// Every expert weight of `a` dequantized, by module name (engine weights of any format).
std::map<std::string, std::vector<float>> expert_values(const ModelWeights& w) {
  std::map<std::string, std::vector<float>> out;
  const Architecture& a = w.arch;
  for (size_t l = 0; l < a.layers.size(); ++l)
    for (size_t s = 0; s < a.layers[l].linears.size(); ++s) {
      const LinearModule& m = a.linears[a.layers[l].linears[s]];
      if (m.expert < 0) continue;
      const LinearWeight& lw = w.layers[l].linears[s].w;
      std::vector<float> v(size_t(lw.rows * lw.cols));
      dequantize_weight_rows(lw, 0, lw.rows, v.data());
      out[m.name] = std::move(v);
    }
  return out;
}

// `quantize --format nvfp4` of the MXFP4 release casts the experts (formats/mxfp4_nvfp4_cast.h):
// in both exports every expert weight dequantizes to exactly the MXFP4 value, the summary says
// the cast was exact, and with attention kept the logits are the release's.
TEST(GptOssMxfp4Cast, ReleaseCastsToNvfp4ExactlyInBothExports) {
  test::ScratchDir dir;
  write_mxfp4_release(dir.path());
  ModelOptions mo;
  mo.threads = 2;
  auto source = Model::load(dir / "mx", mo);
  const auto want = expert_values(source->weights());
  for (const std::string exp : {"modelopt", "compressed-tensors"}) {
    SCOPED_TRACE(exp);
    const fs::path out = dir / exp;
    const auto q = test::run_qforge("quantize " + test::quote(dir / "mx") + " -o " +
                                    test::quote(out) + " --export " + exp +
                                    " --exclude '*self_attn*' --json -q");
    ASSERT_EQ(q.exit_code, 0) << q.err;
    const auto j = nlohmann::json::parse(q.out);
    EXPECT_EQ(j["mxfp4_cast"]["exact"], true) << q.out;
    EXPECT_EQ(j["mxfp4_cast"]["inexact_blocks"], 0) << q.out;
    EXPECT_EQ(j["mxfp4_cast"]["blocks"], 2 * 8 * (64 * 2 + 64 * 1)) << q.out;
    EXPECT_EQ(j["modules_quantized"], 32) << q.out;
    auto cast = Model::load(out, mo);
    const auto got = expert_values(cast->weights());
    // The compressed-tensors export reads back linearised (gate_proj / up_proj): compare the
    // interleaved rows.
    for (const auto& [name, values] : want) {
      if (exp == "modelopt" || name.find("gate_up_proj") == std::string::npos) {
        ASSERT_TRUE(got.count(name)) << name;
        ASSERT_EQ(got.at(name), values) << name;
        continue;
      }
      const std::string prefix = name.substr(0, name.size() - std::string("gate_up_proj").size());
      const auto& gate = got.at(prefix + "gate_proj");
      const auto& up = got.at(prefix + "up_proj");
      const size_t cols = 64, half = values.size() / cols / 2;
      for (size_t r = 0; r < half; ++r)
        for (size_t c = 0; c < cols; ++c) {
          ASSERT_EQ(gate[r * cols + c], values[2 * r * cols + c]) << name;
          ASSERT_EQ(up[r * cols + c], values[(2 * r + 1) * cols + c]) << name;
        }
    }
    std::vector<int32_t> ids(64);
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = int32_t((i * 29 + 3) % 256);
    const int64_t V = source->arch().vocab_size, T = int64_t(ids.size());
    std::vector<float> lc(size_t(T * V)), ls(size_t(T * V));
    cast->forward(ids, 0, lc.data(), true);
    source->forward(ids, 0, ls.data(), true);
    double max_diff = 0;
    for (size_t i = 0; i < lc.size(); ++i) max_diff = std::max(max_diff, std::fabs(double(lc[i]) - double(ls[i])));
    EXPECT_LT(max_diff, 1e-4);
  }
}

// Block scales spanning more than 18 binades in one tensor: those blocks are requantized and
// counted, the summary warns, and only that expert changes.
TEST(GptOssMxfp4Cast, WideSpanIsReportedAndOnlyThoseBlocksChange) {
  test::ScratchDir dir;
  write_mxfp4_release(dir.path(), /*wide=*/true);
  const fs::path out = dir / "ct";
  const auto q = test::run_qforge("quantize " + test::quote(dir / "mx") + " -o " + test::quote(out) +
                                  " --export compressed-tensors --json -q");
  ASSERT_EQ(q.exit_code, 0) << q.err;
  const auto j = nlohmann::json::parse(q.out);
  EXPECT_EQ(j["mxfp4_cast"]["exact"], false) << q.out;
  const int64_t inexact = j["mxfp4_cast"]["inexact_blocks"].get<int64_t>();
  EXPECT_GT(inexact, 0);
  EXPECT_LE(inexact, 4 * 2);  // rows 0-3 of one [64, 64] tensor: 2 blocks each
  EXPECT_NE(j["warnings"].dump().find("requantized"), std::string::npos) << q.out;
  ModelOptions mo;
  mo.threads = 2;
  const auto want = expert_values(Model::load(dir / "mx", mo)->weights());
  const auto got = expert_values(Model::load(out, mo)->weights());
  EXPECT_EQ(got.at("model.layers.0.mlp.experts.2.down_proj"), want.at("model.layers.0.mlp.experts.2.down_proj"));
  EXPECT_EQ(got.at("model.layers.1.mlp.experts.3.down_proj"), want.at("model.layers.1.mlp.experts.3.down_proj"));
  // The ModelOpt export shares one tensor scale across the 8 experts of the layer: the same
  // blocks are the inexact ones (their expert holds the small rows), the others stay exact.
  const auto mo_run = test::run_qforge("quantize " + test::quote(dir / "mx") + " -o " +
                                       test::quote(dir / "mo") + " --json -q");
  ASSERT_EQ(mo_run.exit_code, 0) << mo_run.err;
  EXPECT_GT(nlohmann::json::parse(mo_run.out)["mxfp4_cast"]["inexact_blocks"].get<int64_t>(), 0);
}

// A float gpt-oss checkpoint whose experts are also stored in MXFP4 is refused.
TEST(GptOssExperts, MixedLayoutsAreRefused) {
  test::ScratchDir dir;
  fs::copy(case_dir(), dir.path(), fs::copy_options::recursive);
  const SafetensorsFile src = SafetensorsFile::open(case_dir() / "model.safetensors");
  std::vector<TensorSpec> specs;
  for (const auto& e : src.tensors()) specs.push_back({e.name, e.dtype, e.shape});
  specs.push_back({"model.layers.0.mlp.experts.gate_up_proj_blocks", DType::U8, {8, 96, 2, 16}});
  {
    SafetensorsWriter w(dir / "model.safetensors", specs);
    for (const auto& e : src.tensors()) {
      const TensorView v = src.view(e);
      w.write(e.name, {v.data, v.nbytes});
    }
    std::vector<std::byte> zeros(8 * 96 * 32);
    w.write("model.layers.0.mlp.experts.gate_up_proj_blocks", zeros);
    w.finish();
  }
  try {
    ModelWeights::load(dir.path());
    FAIL() << "loaded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("model.layers.0.mlp.experts.gate_up_proj_blocks"),
              std::string::npos) << e.what();
  }
}

// Both gpt-oss exports read back expert by expert as the quantizer made them from the hub's
// fused tensors: ModelOpt's fused layout (codes and scales transposed per expert, one
// weight_scale_2 for all experts = max amax over them) and compressed-tensors' linearised
// layout (gate_proj = the even rows of gate_up, up_proj = the odd, one global scale per expert).
TEST(GptOssExports, EngineReadsEveryExpertAsQuantizedFromTheHub) {
  test::ScratchDir dir;
  fs::copy(case_dir(), dir / "model");
  const auto hub = open_model_checkpoint(dir / "model");
  const Architecture a = Architecture::from_config(hub->config(), "config.json");
  ThreadPool pool(2);
  for (const std::string exp : {"modelopt", "compressed-tensors"}) {
    SCOPED_TRACE(exp);
    const auto q = test::run_qforge("quantize " + test::quote(dir / "model") + " -o " +
                                    test::quote(dir / exp) + " --export " + exp + " -q");
    ASSERT_EQ(q.exit_code, 0) << q.err;
    const ModelWeights w = ModelWeights::load(dir / exp);
    const bool ct = exp != "modelopt";
    const RtnOptions rtn{Format::nvfp4, 16, DType::F32,
                         ct ? ExportNumerics::llm_compressor : ExportNumerics::modelopt};
    for (size_t l = 0; l < a.layers.size(); ++l) {
      const LayerSpec& spec = a.layers[l];
      for (int proj = 1; proj < 3; ++proj) {
        std::vector<WeightRows> rows;
        float stack_amax = 0.f;
        for (const auto& slots : spec.moe.experts) {
          const LinearModule& m = a.linears[spec.linears[size_t(slots[size_t(proj)])]];
          rows.push_back(weight_rows(read_tensor(*hub->find(m.weight_name()))));
          stack_amax = std::max(stack_amax, weight_amax(rows.back(), pool).amax);
        }
        for (size_t e = 0; e < rows.size(); ++e) {
          const float amax = ct ? weight_amax(rows[e], pool).amax : stack_amax;
          const QuantizedTensor want = quantize_rtn(rows[e], rtn, amax, pool);
          const LayerSpec& read = w.arch.layers[l];
          // The linear(s) holding this expert's projection in the export as read: one, or for
          // compressed-tensors' gate_up two (gate: even rows, up: odd rows).
          std::vector<std::pair<const EngineLinear*, QuantizedTensor>> parts;
          const auto& slots = read.moe.experts[e];
          if (ct && proj == 1) {
            parts.push_back({&w.layers[l].linears[size_t(slots[0])], every_other_row(want, 0)});
            parts.push_back({&w.layers[l].linears[size_t(slots[1])], every_other_row(want, 1)});
          } else {
            parts.push_back({&w.layers[l].linears[size_t(slots[size_t(proj)])], want});
          }
          for (const auto& [lin, qt] : parts) {
            const LinearWeight& lw = lin->w;
            ASSERT_EQ(lw.format, WeightFormat::nvfp4) << lin->name;
            ASSERT_EQ(lw.rows, qt.rows) << lin->name;
            const auto* codes = static_cast<const uint8_t*>(lw.data);
            ASSERT_TRUE(std::equal(qt.codes.begin(), qt.codes.end(), codes)) << lin->name;
            ASSERT_TRUE(std::equal(qt.block_scales.begin(), qt.block_scales.end(), lw.block_scales))
                << lin->name;
            EXPECT_NEAR(lw.global_scale, qt.global_scale, 1e-6 * qt.global_scale) << lin->name;
            EXPECT_EQ(lin->bias.size(), size_t(qt.rows)) << lin->name;
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace qf

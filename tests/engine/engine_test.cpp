// Engine tests on the fixture models: greedy generation by token ids, prefill against
// token-by-token decode, thread-count independence, and checkpoints whose quantization config
// does not match their tensors.
#include "core/error.h"
#include "engine/generate.h"
#include "engine/model.h"
#include "io/safetensors.h"
#include "io/safetensors_writer.h"
#include "model/synthetic_checkpoint.h"
#include "test_util.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>

namespace qf {
namespace {

namespace fs = std::filesystem;

fs::path stories260k() { return test::fixtures_dir() / "models" / "stories260K-hf"; }
fs::path tinystories656k() { return test::fixtures_dir() / "models" / "tinystories-656K-hf"; }

TEST(EngineModel, Stories260KGreedyFromBosMatchesPublishedText) {
  QF_REQUIRE_FIXTURES();
  auto m = Model::load(stories260k(), {});
  const std::vector<int32_t> bos{1};
  // "Once upon a time, there was a little girl named Lily. She loved to play outside in the
  // park. One day, she saw a big, red ball." in the model's sentencepiece ids.
  const std::vector<int32_t> expected = {403, 407, 261, 378, 432, 383, 286, 261, 376, 298, 315,
                                         421, 395, 317, 426, 338, 401, 396, 267, 337, 410, 408,
                                         419, 292, 411, 322, 265, 282, 295, 433, 426, 385, 328,
                                         432, 358, 394, 261, 370, 432, 352};
  const auto out = generate(*m, bos, int64_t(expected.size()), {}, -1, nullptr);
  EXPECT_EQ(out, expected);
}

TEST(EngineModel, LoadsTiedEmbeddingsStoredEitherWay) {
  QF_REQUIRE_FIXTURES();
  auto a = Model::load(stories260k(), {});  // only embed_tokens stored
  auto b = Model::load(tinystories656k(), {});  // only lm_head stored, aliased
  EXPECT_EQ(a->weights().embed.data, a->weights().lm_head.w.data);
  EXPECT_EQ(b->weights().embed.data, b->weights().lm_head.w.data);
  EXPECT_EQ(b->arch().vocab_size, 2048);
  EXPECT_EQ(a->weights().quantization, "none");
}

TEST(EngineModel, PrefillMatchesDecodeAndThreadCount) {
  QF_REQUIRE_FIXTURES();
  ModelOptions one;
  one.threads = 1;
  ModelOptions two;
  two.threads = 2;
  auto m1 = Model::load(tinystories656k(), one);
  auto m2 = Model::load(tinystories656k(), two);
  const std::vector<int32_t> ids = {1, 400, 17, 300, 1200, 5, 66, 900, 31, 2000, 12};
  const int64_t V = m1->vocab_size(), n = int64_t(ids.size());
  std::vector<float> pre1(size_t(n * V)), pre2(pre1.size()), dec(static_cast<size_t>(V));
  m1->forward(ids, 0, pre1.data(), true);
  m2->forward(ids, 0, pre2.data(), true);
  EXPECT_EQ(pre1, pre2);  // split by rows: bit-identical whatever the thread count
  for (int64_t t = 0; t < n; ++t) {
    m1->forward(std::span<const int32_t>(&ids[size_t(t)], 1), t, dec.data(), false);
    for (int64_t v = 0; v < V; ++v)
      ASSERT_NEAR(dec[size_t(v)], pre1[size_t(t * V + v)], 1e-4) << "token " << t << " id " << v;
  }
}

TEST(EngineModel, RejectsContextBeyondLimitAndBadIds) {
  QF_REQUIRE_FIXTURES();
  auto m = Model::load(stories260k(), {});
  std::vector<float> logits(size_t(m->vocab_size()));
  const int32_t id = 5, bad = 512;
  EXPECT_THROW(m->forward(std::span<const int32_t>(&id, 1), m->max_seq(), logits.data(), false),
               Error);
  EXPECT_THROW(m->forward(std::span<const int32_t>(&bad, 1), 0, logits.data(), false), Error);
}

// A synthetic DeepSeek-V3 (multi-head latent attention, keys of 48 and values of 32 per head,
// sigmoid group routing): it loads, its logits are finite, and decoding token by token through
// the KV cache gives what the prefill gives.
TEST(EngineModel, SynthDeepSeekLoadsAndDecodesAsItPrefills) {
  test::ScratchDir tmp;
  SynthOptions so;
  so.shape = "tiny-deepseek";
  so.layers = 2;  // one dense layer, one MoE layer
  so.dtype = DType::F32;
  so.progress = false;
  so.threads = 2;
  write_synthetic_checkpoint(tmp / "ds", so);
  ModelOptions mo;
  mo.threads = 2;
  mo.max_seq = 64;
  auto m = Model::load(tmp / "ds", mo);
  const Architecture& a = m->arch();
  ASSERT_TRUE(a.is_mla());
  ASSERT_TRUE(a.layers[1].is_moe);
  EXPECT_FALSE(a.layers[0].is_moe);
  EXPECT_EQ(m->weights().layers[1].score_bias.size(), 8u);
  const std::vector<int32_t> ids = {1, 400, 17, 300, 1000, 5, 66, 900, 31, 200, 12};
  const int64_t V = m->vocab_size(), n = int64_t(ids.size());
  std::vector<float> pre(size_t(n * V)), dec(static_cast<size_t>(V));
  m->forward(ids, 0, pre.data(), true);
  for (float x : pre) ASSERT_TRUE(std::isfinite(x));
  // Per layer, room for whole tiles of 16 positions: keys [heads, nope + rope] and values
  // [heads, v_head_dim].
  EXPECT_GE(n, 1);
  EXPECT_LE(n, 16);
  EXPECT_EQ(m->kv_cache_bytes(),
            uint64_t(a.num_layers) * uint64_t(16 * 4 * (48 + 32)) * sizeof(float));
  for (int64_t t = 0; t < n; ++t) {
    m->forward(std::span<const int32_t>(&ids[size_t(t)], 1), t, dec.data(), false);
    for (int64_t v = 0; v < V; ++v)
      ASSERT_NEAR(dec[size_t(v)], pre[size_t(t * V + v)], 1e-4) << "token " << t << " id " << v;
  }
}

// Hub DeepSeek-V3 checkpoints hold the multi-token-prediction layer as
// model.layers.<num_hidden_layers>.*: not part of the model, so the engine does not read it.
TEST(EngineModel, DeepSeekIgnoresTheMultiTokenPredictionLayer) {
  const fs::path src = fs::path(QFORGE_SOURCE_DIR) / "tests/data/conformance/deepseek_v3";
  if (!fs::exists(src)) GTEST_SKIP() << "conformance data missing";
  test::ScratchDir tmp;
  fs::create_directories(tmp / "mtp");
  fs::copy_file(src / "config.json", tmp / "mtp" / "config.json");
  const SafetensorsFile in = SafetensorsFile::open(src / "model.safetensors");
  std::vector<TensorSpec> specs;
  for (const auto& e : in.tensors()) specs.push_back({e.name, e.dtype, e.shape});
  const std::vector<TensorSpec> extra = {{"model.layers.3.eh_proj.weight", DType::BF16, {64, 128}},
                                         {"model.layers.3.self_attn.q_a_proj.weight", DType::BF16, {48, 64}}};
  specs.insert(specs.end(), extra.begin(), extra.end());
  {
    SafetensorsWriter out(tmp / "mtp" / "model.safetensors", specs);
    for (const auto& e : in.tensors()) {
      const TensorView v = in.view(e);
      out.write(e.name, std::span(v.data, v.nbytes));
    }
    for (const auto& t : extra)
      out.write(t.name, std::vector<std::byte>(size_t(t.nbytes()), std::byte{0x3f}));
    out.finish();
  }
  auto base = Model::load(src, {});
  auto mtp = Model::load(tmp / "mtp", {});
  const std::vector<int32_t> ids = {1, 40, 17, 30, 100, 5, 66, 90};
  const int64_t V = base->vocab_size();
  std::vector<float> a(size_t(int64_t(ids.size()) * V)), b(a.size());
  base->forward(ids, 0, a.data(), true);
  mtp->forward(ids, 0, b.data(), true);
  EXPECT_EQ(a, b);
}

// A copy of stories260K whose config.json claims a quantization the tensors do not have.
void write_config_with(const fs::path& dir, const nlohmann::json& qc) {
  fs::create_directories(dir);
  for (const auto& e : fs::directory_iterator(stories260k()))
    if (e.path().filename() != "config.json") fs::create_symlink(e.path(), dir / e.path().filename());
  nlohmann::json cfg;
  std::ifstream(stories260k() / "config.json") >> cfg;
  cfg["quantization_config"] = qc;
  std::ofstream(dir / "config.json") << cfg.dump(2);
}

std::string load_error(const fs::path& dir) {
  try {
    Model::load(dir, {});
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(EngineWeights, ConfigSaysQuantizedButTensorsAreFloat) {
  QF_REQUIRE_FIXTURES();
  test::ScratchDir tmp;
  write_config_with(tmp / "m", {{"quant_method", "modelopt"},
                                {"quant_algo", "W4A16_NVFP4"},
                                {"ignore", {"lm_head"}}});
  const std::string err = load_error(tmp / "m");
  EXPECT_NE(err.find("model.layers.0.self_attn.q_proj.weight"), std::string::npos) << err;
  EXPECT_NE(err.find("F32 [64, 64]"), std::string::npos) << err;
  EXPECT_EQ(err.find('\n'), std::string::npos);

  write_config_with(tmp / "ct", {{"quant_method", "compressed-tensors"},
                                 {"format", "pack-quantized"},
                                 {"ignore", nlohmann::json::array()}});
  const std::string err2 = load_error(tmp / "ct");
  EXPECT_NE(err2.find("model.layers.0.self_attn.q_proj.weight_packed"), std::string::npos) << err2;

  write_config_with(tmp / "u", {{"quant_method", "modelopt"}, {"quant_algo", "W8A8_SQ"}});
  EXPECT_NE(load_error(tmp / "u").find("W8A8_SQ"), std::string::npos);
}

TEST(EngineWeights, ScaleShapeMismatchNamesTheTensor) {
  QF_REQUIRE_FIXTURES();
  test::ScratchDir tmp;
  const auto out = tmp / "nv";
  const auto r = test::run_qforge("quantize '" + stories260k().string() + "' -o '" + out.string() +
                                  "' --format nvfp4");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ASSERT_NO_THROW(Model::load(out, {}));
  // Relabel the NVFP4 export as MXFP4: the block scales have the wrong dtype and shape.
  nlohmann::json cfg;
  std::ifstream(out / "config.json") >> cfg;
  cfg["quantization_config"]["quant_algo"] = "mxfp4";
  std::ofstream(out / "config.json") << cfg.dump(2);
  fs::remove(out / "hf_quant_config.json");
  const std::string err = load_error(out);
  EXPECT_NE(err.find("model.layers.0.self_attn.q_proj.weight_scale"), std::string::npos) << err;
  EXPECT_NE(err.find("F8_E4M3 [64, 4]"), std::string::npos) << err;
}

TEST(EngineSampler, GreedyAndSeededSampling) {
  std::vector<float> logits = {0.1f, 2.f, 2.f, -1.f};
  EXPECT_EQ(argmax(logits.data(), 4), 1);
  SamplingOptions so;
  so.temperature = 1.f;
  so.top_p = 0.9f;
  so.seed = 42;
  std::vector<int32_t> a, b;
  for (auto* out : {&a, &b}) {
    Sampler s(so);
    for (int i = 0; i < 50; ++i) {
      auto l = logits;
      out->push_back(s.sample(l.data(), 4));
    }
  }
  EXPECT_EQ(a, b);
  for (int32_t id : a) EXPECT_TRUE(id == 1 || id == 2 || id == 0);
}

}  // namespace
}  // namespace qf

// Nemotron-H layer specs from config.json (model/nemotron_h): the four block kinds, their
// tensors, the legacy key aliases, and one-line errors for what qforge does not compute.
#include "core/error.h"
#include "engine/model.h"
#include "io/safetensors.h"
#include "io/safetensors_writer.h"
#include "model/architecture.h"
#include "test_util.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

namespace qf {
namespace {

namespace fs = std::filesystem;

nlohmann::json config() {
  return {{"model_type", "nemotron_h"},
          {"hidden_size", 64},
          {"vocab_size", 256},
          {"hybrid_override_pattern", "M*-E"},
          {"num_attention_heads", 4},
          {"num_key_value_heads", 2},
          {"head_dim", 16},
          {"intermediate_size", 96},
          {"mamba_num_heads", 8},
          {"mamba_head_dim", 8},
          {"ssm_state_size", 16},
          {"n_groups", 2},
          {"conv_kernel", 4},
          {"chunk_size", 32},
          {"n_routed_experts", 8},
          {"num_experts_per_tok", 2},
          {"moe_intermediate_size", 32},
          {"moe_shared_expert_intermediate_size", 48},
          {"n_group", 2},
          {"topk_group", 1}};
}

std::string error_of(const nlohmann::json& c) {
  try {
    Architecture::from_config(c, "cfg.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(NemotronH, LayerSpecsOfEachKind) {
  const Architecture a = Architecture::from_config(config(), "cfg.json");
  ASSERT_EQ(a.num_layers, 4);
  EXPECT_TRUE(a.has_mamba());
  EXPECT_TRUE(a.ropes.empty());
  EXPECT_FALSE(a.gated_mlp);
  EXPECT_EQ(a.activation, Activation::relu2);
  EXPECT_EQ(a.embed_name, "backbone.embeddings.weight");
  EXPECT_EQ(a.final_norm_name, "backbone.norm_f.weight");
  EXPECT_EQ(a.mamba.conv_dim(), 64 + 2 * 2 * 16);
  EXPECT_EQ(a.mamba.in_proj_rows(), 64 + 128 + 8);

  const LayerSpec& m = a.layers[0];
  EXPECT_TRUE(m.is_mamba && !m.has_attention && !m.has_mlp);
  EXPECT_EQ(m.norm(NormSlot::attn_in), "backbone.layers.0.norm.weight");
  const LinearModule& in = a.linears[m.linears[size_t(m.slot_of(LinearRole::in_proj))]];
  EXPECT_EQ(in.name, "backbone.layers.0.mixer.in_proj");
  EXPECT_EQ(in.out_features, 200);
  EXPECT_EQ(in.input, LayerInput::attn_norm);
  const LinearModule& out = a.linears[m.linears[size_t(m.slot_of(LinearRole::out_proj))]];
  EXPECT_EQ(out.input, LayerInput::ssm_out);
  EXPECT_EQ(m.mamba.a_log, "backbone.layers.0.mixer.A_log");
  EXPECT_EQ(m.mamba.conv_bias, "backbone.layers.0.mixer.conv1d.bias");

  const LayerSpec& at = a.layers[1];
  EXPECT_TRUE(at.has_attention && !at.has_mlp && !at.is_mamba);
  EXPECT_EQ(at.rope, -1);
  EXPECT_EQ(a.linears[at.linears[0]].name, "backbone.layers.1.mixer.q_proj");
  EXPECT_GE(a.linears[at.linears[0]].group, 0);  // q/k/v share a fused group

  const LayerSpec& mlp = a.layers[2];
  EXPECT_TRUE(mlp.has_mlp && !mlp.has_attention && !mlp.is_moe);
  EXPECT_EQ(mlp.norm(NormSlot::mlp_in), "backbone.layers.2.norm.weight");
  EXPECT_EQ(mlp.slot_of(LinearRole::gate_proj), -1);
  EXPECT_EQ(a.linears[mlp.linears[0]].name, "backbone.layers.2.mixer.up_proj");

  const LayerSpec& e = a.layers[3];
  EXPECT_TRUE(e.is_moe && e.has_mlp);
  EXPECT_EQ(e.moe.routing, Routing::sigmoid_grouped);
  EXPECT_EQ(e.moe.router, "backbone.layers.3.mixer.gate");
  EXPECT_EQ(e.moe.score_bias, "backbone.layers.3.mixer.gate.e_score_correction_bias");
  ASSERT_EQ(e.moe.experts.size(), 8u);
  EXPECT_EQ(e.moe.experts[0][0], -1);  // no gate
  EXPECT_EQ(a.linears[e.linears[size_t(e.moe.experts[7][1])]].name,
            "backbone.layers.3.mixer.experts.7.up_proj");
  EXPECT_EQ(a.linears[e.linears[size_t(e.moe.shared[2])]].name,
            "backbone.layers.3.mixer.shared_experts.down_proj");
  EXPECT_EQ(e.moe.latent, 0);
  const auto never = a.never_quantized_modules();
  EXPECT_NE(std::find(never.begin(), never.end(), "backbone.embeddings"), never.end());
  EXPECT_NE(std::find(never.begin(), never.end(), "backbone.layers.3.mixer.gate"), never.end());
}

TEST(NemotronH, LayerTypesListLegacyKeysAndLatent) {
  nlohmann::json c = config();
  c.erase("hybrid_override_pattern");
  c["layers_block_type"] = {"mamba", "attention", "mlp", "moe"};
  c.erase("n_groups");
  c["mamba_n_groups"] = 4;
  c.erase("chunk_size");
  c["mamba_chunk_size"] = 64;
  c["moe_latent_size"] = 32;
  c["time_step_limit"] = {0.0, {{"__float__", "Infinity"}}};
  const Architecture a = Architecture::from_config(c, "cfg.json");
  EXPECT_EQ(a.mamba.groups, 4);
  EXPECT_EQ(a.mamba.chunk_size, 64);
  EXPECT_TRUE(std::isinf(a.mamba.dt_max));
  EXPECT_EQ(a.layers[3].moe.latent, 32);
  EXPECT_GE(a.layers[3].moe.fc1_latent, 0);
  const LinearModule& up = a.linears[a.layers[3].linears[size_t(a.layers[3].moe.experts[0][1])]];
  EXPECT_EQ(up.in_features, 32);
  // The config class's names (5.24) for the same list.
  c["layers_block_type"] = {"linear_attention", "full_attention", "mlp", "moe"};
  EXPECT_EQ(error_of(c), "");
}

TEST(NemotronH, BadConfigsNameTheField) {
  auto with = [](const char* key, nlohmann::json v) {
    nlohmann::json c = config();
    c[key] = std::move(v);
    return error_of(c);
  };
  EXPECT_EQ(with("hybrid_override_pattern", "M*X-"),
            "cfg.json: 'hybrid_override_pattern'[2] is 'X'; qforge knows M (Mamba2), * "
            "(attention), - (MLP) and E (MoE)");
  EXPECT_EQ(with("n_groups", 3), "cfg.json: 'n_groups' 3 does not divide 'mamba_num_heads' 8");
  EXPECT_EQ(with("chunk_size", 0),
            "cfg.json: 'chunk_size' is 0; the chunked scan needs a positive chunk size");
  EXPECT_EQ(with("mlp_hidden_act", "gelu"),
            "cfg.json: 'mlp_hidden_act' is 'gelu'; qforge computes Nemotron-H's MLPs with relu2");
  EXPECT_EQ(with("mamba_hidden_act", "gelu"),
            "cfg.json: 'mamba_hidden_act' is 'gelu'; qforge computes the Mamba convolution with "
            "silu");
  EXPECT_EQ(with("mamba_ssm_cache_dtype", "bfloat16"),
            "cfg.json: 'mamba_ssm_cache_dtype' is 'bfloat16'; qforge keeps the SSM state in float32");
  EXPECT_EQ(with("time_step_limit", nlohmann::json::array({0.1, 0.01})),
            "cfg.json: 'time_step_limit' is [0.1,0.01], not [low, high] with 0 <= low <= high");
  EXPECT_EQ(with("n_shared_experts", 2),
            "cfg.json: 'n_shared_experts' is 2; transformers ignores it and vLLM widens the shared "
            "expert by it: refusing to guess");
  EXPECT_EQ(with("sliding_window", 128),
            "cfg.json: 'sliding_window' is 128; transformers' Nemotron-H ignores it, other engines "
            "may not: refusing to guess");
  EXPECT_EQ(with("num_hidden_layers", 6),
            "cfg.json: 'num_hidden_layers' 6 differs from the 4 layers of the layer pattern");
  EXPECT_EQ(with("layers_block_type", nlohmann::json::array({"mamba", "attention", "mlp", "moe2"})),
            "cfg.json: 'layers_block_type'[3] is \"moe2\"; qforge knows mamba (linear_attention), "
            "attention (full_attention), mlp and moe");
  EXPECT_EQ(with("layers_block_type", nlohmann::json::array({"mamba", "mamba", "mlp", "moe"})),
            "cfg.json: 'hybrid_override_pattern' M*-E disagrees with the layer types list (MM-E)");
  EXPECT_EQ(with("n_group", 3), "cfg.json: 'n_group' 3 does not divide 'n_routed_experts' 8");
}

// A checkpoint without one of a Mamba layer's tensors: the load names it.
TEST(NemotronH, MissingMambaTensorIsNamed) {
  const fs::path src = fs::path(QFORGE_SOURCE_DIR) / "tests/data/conformance/nemotron_h";
  if (!fs::exists(src)) GTEST_SKIP() << "conformance data missing";
  test::ScratchDir dir;
  fs::copy_file(src / "config.json", dir / "config.json");
  const std::string dropped = "backbone.layers.2.mixer.D";
  {
    const SafetensorsFile in = SafetensorsFile::open(src / "model.safetensors");
    std::vector<TensorSpec> specs;
    for (const auto& e : in.tensors())
      if (e.name != dropped) specs.push_back({e.name, e.dtype, e.shape});
    SafetensorsWriter out(dir / "model.safetensors", specs);
    for (const auto& e : in.tensors())
      if (e.name != dropped) out.write(e.name, std::span(in.view(e).data, in.view(e).nbytes));
    out.finish();
  }
  try {
    Model::load(dir.path(), ModelOptions{});
    ADD_FAILURE() << "loaded without " << dropped;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(dropped), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace qf

namespace qf {
namespace {

// Several sequences decoded together (each row from its own Mamba state and KV cache) give what
// each gives alone; a sequence cannot be rewound.
TEST(NemotronH, BatchedDecodeKeepsEachSequencesState) {
  const fs::path src = fs::path(QFORGE_SOURCE_DIR) / "tests/data/conformance/nemotron_h";
  if (!fs::exists(src)) GTEST_SKIP() << "conformance data missing";
  ModelOptions mo;
  mo.threads = 2;
  auto batched = Model::load(src, mo);
  auto alone = Model::load(src, mo);
  const int64_t V = batched->vocab_size();
  const std::vector<std::vector<int32_t>> prompts = {{1, 5, 9, 200}, {3, 3}, {7, 100, 2, 8, 50, 60}};
  std::vector<float> logits(static_cast<size_t>(V));
  for (size_t s = 0; s < prompts.size(); ++s)
    batched->forward(prompts[s], 0, logits.data(), false, int64_t(s));
  const std::vector<int32_t> next = {11, 12, 13};
  std::vector<int64_t> pos;
  for (const auto& p : prompts) pos.push_back(int64_t(p.size()));
  std::vector<float> got(size_t(3 * V));
  batched->decode_batch(next, pos, got.data());
  for (size_t s = 0; s < prompts.size(); ++s) {
    std::vector<int32_t> seq = prompts[s];
    seq.push_back(next[s]);
    std::vector<float> want(static_cast<size_t>(V));
    alone->forward(seq, 0, want.data(), false);
    for (int64_t v = 0; v < V; ++v)
      EXPECT_NEAR(got[s * size_t(V) + size_t(v)], want[size_t(v)], 1e-4) << "sequence " << s;
  }
  // Per sequence and Mamba layer: conv state [128, K-1 = 3] and SSM state [8, 8, 16], float32;
  // 3 Mamba layers, 3 sequences.
  EXPECT_EQ(batched->mamba_state_bytes(), uint64_t(3 * 3 * (128 * 3 + 8 * 8 * 16) * 4));
  try {
    alone->forward(std::vector<int32_t>{4}, 2, logits.data(), false);
    ADD_FAILURE() << "rewound a Mamba state";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "sequence 0 stopped at position 7; a model with Mamba layers cannot run from "
              "position 2 (its state cannot be rewound: start again at 0)");
  }
}

}  // namespace
}  // namespace qf

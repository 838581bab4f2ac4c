// Architecture::from_config: the layer specs each family produces, and a one-line refusal
// naming the field for every config value the engine cannot compute.
#include "core/error.h"
#include "engine/model.h"
#include "model/architecture.h"
#include "test_util.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>

namespace qf {
namespace {

namespace fs = std::filesystem;

nlohmann::json base_config(const std::string& model_type = "llama") {
  return {{"model_type", model_type}, {"hidden_size", 64},        {"intermediate_size", 128},
          {"num_hidden_layers", 2},   {"num_attention_heads", 4}, {"num_key_value_heads", 2},
          {"vocab_size", 256},        {"max_position_embeddings", 512}};
}

std::string error_of(const nlohmann::json& c) {
  try {
    Architecture::from_config(c, "cfg.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Architecture, LlamaLayerSpec) {
  const Architecture a = Architecture::from_config(base_config(), "cfg.json");
  ASSERT_EQ(a.layers.size(), 2u);
  const LayerSpec& l = a.layers[1];
  EXPECT_EQ(l.linears.size(), 7u);
  EXPECT_EQ(l.norm(NormSlot::attn_in), "model.layers.1.input_layernorm.weight");
  EXPECT_EQ(l.norm(NormSlot::mlp_in), "model.layers.1.post_attention_layernorm.weight");
  EXPECT_FALSE(l.has(NormSlot::attn_out));
  const LinearModule& o = a.linears[l.linears[size_t(l.slot_of(LinearRole::o_proj))]];
  EXPECT_EQ(o.name, "model.layers.1.self_attn.o_proj");
  EXPECT_EQ(o.input, LayerInput::attn_out);
  EXPECT_EQ(o.fold_norm, -1);
  const LinearModule& q = a.linears[l.linears[0]];
  EXPECT_EQ(q.fold_norm, int(NormSlot::attn_in));
  EXPECT_EQ(a.fused_groups.size(), 4u);
  EXPECT_EQ(a.ropes[0].type, RopeType::default_);
  EXPECT_EQ(a.ropes[0].theta, 10000.0);
}

TEST(Architecture, BiasesFollowTheFamily) {
  auto c = base_config();
  c["attention_bias"] = true;
  c["mlp_bias"] = true;
  for (const auto& m : Architecture::from_config(c, "cfg.json").linears) EXPECT_TRUE(m.bias) << m.name;
  // Qwen2: q/k/v always, o never; attention_bias is not read.
  auto q2 = base_config("qwen2");
  q2["attention_bias"] = false;
  for (const auto& m : Architecture::from_config(q2, "cfg.json").linears)
    EXPECT_EQ(m.bias, m.role == LinearRole::q_proj || m.role == LinearRole::k_proj ||
                          m.role == LinearRole::v_proj) << m.name;
  // Mistral never has biases.
  auto mi = base_config("mistral");
  mi["attention_bias"] = true;
  for (const auto& m : Architecture::from_config(mi, "cfg.json").linears) EXPECT_FALSE(m.bias);
}

TEST(Architecture, Phi3IsFusedOnDisk) {
  const Architecture a = Architecture::from_config(base_config("phi3"), "cfg.json");
  const LayerSpec& l = a.layers[0];
  ASSERT_EQ(l.linears.size(), 4u);
  const LinearModule& qkv = a.linears[l.linears[0]];
  EXPECT_EQ(qkv.name, "model.layers.0.self_attn.qkv_proj");
  EXPECT_EQ(qkv.out_features, 64 + 2 * 32);
  EXPECT_EQ(a.linears[l.linears[2]].out_features, 256);  // gate_up_proj
  EXPECT_TRUE(a.fused_groups.empty());
  // The top-level original_max_position_embeddings overrides the rope's (Phi3Config's default
  // 4096 when absent).
  auto c = base_config("phi3");
  c["rope_scaling"] = {{"rope_type", "longrope"}, {"short_factor", std::vector<double>(8, 1.0)},
                       {"long_factor", std::vector<double>(8, 2.0)},
                       {"original_max_position_embeddings", 64}};
  EXPECT_EQ(Architecture::from_config(c, "cfg.json").ropes[0].original_max_position_embeddings, 4096);
  c["original_max_position_embeddings"] = 128;
  EXPECT_EQ(Architecture::from_config(c, "cfg.json").ropes[0].original_max_position_embeddings, 128);
}

TEST(Architecture, SlidingWindowPatterns) {
  auto m = base_config("mistral");
  m["sliding_window"] = 32;
  for (const auto& l : Architecture::from_config(m, "cfg.json").layers) EXPECT_EQ(l.sliding_window, 32);
  auto q = base_config("qwen2");
  q["sliding_window"] = 32;
  q["max_window_layers"] = 1;
  EXPECT_EQ(Architecture::from_config(q, "cfg.json").layers[1].sliding_window, 0)
      << "without use_sliding_window Qwen2 does not slide";
  q["use_sliding_window"] = true;
  const Architecture qa = Architecture::from_config(q, "cfg.json");
  EXPECT_EQ(qa.layers[0].sliding_window, 0);
  EXPECT_EQ(qa.layers[1].sliding_window, 32);
  auto g = base_config("gemma3_text");
  g["num_hidden_layers"] = 4;
  g["sliding_window"] = 16;
  g["sliding_window_pattern"] = 2;
  g["head_dim"] = 16;
  const Architecture ga = Architecture::from_config(g, "cfg.json");
  EXPECT_EQ(ga.layers[0].sliding_window, 16);
  EXPECT_EQ(ga.layers[1].sliding_window, 0);
  EXPECT_EQ(ga.layers[0].rope, 1);
  EXPECT_EQ(ga.ropes[1].theta, 10000.0);    // local
  EXPECT_EQ(ga.ropes[0].theta, 1000000.0);  // global default
  EXPECT_EQ(ga.norm_style, NormStyle::one_plus);
}

TEST(Architecture, RefusesWhatItCannotCompute) {
  struct Case {
    std::function<void(nlohmann::json&)> edit;
    std::string expect;
  };
  const std::vector<Case> cases = {
      {[](auto& c) { c["model_type"] = "mamba"; }, "unsupported architecture"},
      {[](auto& c) { c["rope_scaling"] = {{"rope_type", "su"}}; }, "unsupported rope type 'su'"},
      {[](auto& c) { c["rope_parameters"] = {{"rope_type", "mrope"}, {"mrope_section", {1, 2}}}; },
       "mrope_section"},
      {[](auto& c) { c["rope_scaling"] = {{"rope_type", "linear"}}; }, "field 'factor' missing"},
      {[](auto& c) { c["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8}}; },
       "low_freq_factor"},
      {[](auto& c) { c["rope_theta"] = -1; }, "rope_theta"},
      {[](auto& c) { c["rms_norm_eps"] = -1e-6; }, "rms_norm_eps"},
      {[](auto& c) { c["hidden_act"] = "relu2"; }, "'hidden_act' is 'relu2'"},
      {[](auto& c) { c["partial_rotary_factor"] = 0.5; }, "partial_rotary_factor"},
      {[](auto& c) { c["num_key_value_heads"] = 3; }, "num_key_value_heads"},
      {[](auto& c) { c["num_attention_heads"] = 4611686018427387912LL; }, "num_attention_heads"},
      {[](auto& c) { c["hidden_size"] = "64"; }, "hidden_size"},
      {[](auto& c) {
         c["model_type"] = "qwen2";
         c["layer_types"] = {"full_attention", "chunked_attention"};
       }, "'layer_types'[1]"},
      {[](auto& c) {
         c["model_type"] = "gemma3_text";
         c["use_bidirectional_attention"] = true;
       }, "use_bidirectional_attention"},
      {[](auto& c) {
         c["model_type"] = "phi3";
         c["rope_scaling"] = {{"rope_type", "longrope"}, {"short_factor", {1.0}},
                              {"long_factor", {1.0}}, {"original_max_position_embeddings", 64}};
       }, "'short_factor' has 1 values"},
  };
  for (const auto& tc : cases) {
    auto c = base_config();
    tc.edit(c);
    const std::string e = error_of(c);
    EXPECT_NE(e.find("cfg.json"), std::string::npos) << e;
    EXPECT_NE(e.find(tc.expect), std::string::npos) << "got: " << e << "\nexpected: " << tc.expect;
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  }
}

// The tiny DeepSeek-V3 of the conformance data (tests/data/conformance/deepseek_v3).
nlohmann::json deepseek_config() {
  auto c = base_config("deepseek_v3");
  c["num_hidden_layers"] = 3;
  c["num_key_value_heads"] = 4;
  c["max_position_embeddings"] = 256;
  c["head_dim"] = 8;  // what transformers writes: qk_rope_head_dim, not the head size
  c["q_lora_rank"] = 48;
  c["kv_lora_rank"] = 32;
  c["qk_nope_head_dim"] = 16;
  c["qk_rope_head_dim"] = 8;
  c["v_head_dim"] = 12;
  c["n_routed_experts"] = 8;
  c["num_experts_per_tok"] = 2;
  c["n_group"] = 2;
  c["topk_group"] = 1;
  c["moe_intermediate_size"] = 32;
  c["n_shared_experts"] = 1;
  c["first_k_dense_replace"] = 1;
  c["routed_scaling_factor"] = 2.5;
  c["norm_topk_prob"] = true;
  c["scoring_func"] = "sigmoid";
  c["topk_method"] = "noaux_tc";
  c["rope_parameters"] = {{"rope_type", "yarn"}, {"factor", 4.0}, {"beta_fast", 32.0},
                          {"beta_slow", 1.0}, {"mscale", 1.0}, {"mscale_all_dim", 1.0},
                          {"original_max_position_embeddings", 64}, {"rope_theta", 10000.0}};
  return c;
}

TEST(Architecture, DeepSeekV3LayerSpec) {
  const Architecture a = Architecture::from_config(deepseek_config(), "cfg.json");
  EXPECT_TRUE(a.is_mla());
  EXPECT_EQ(a.head_dim, 24);
  EXPECT_EQ(a.v_head_dim, 12);
  EXPECT_EQ(a.ropes.size(), 1u);
  EXPECT_EQ(a.ropes[0].rotary_dim, 8);
  EXPECT_EQ(a.ropes[0].attention_factor, 1.0);
  // 24^-0.5 * (0.1 ln 4 + 1)^2
  EXPECT_FLOAT_EQ(a.attention_scale, 0.26464226f);
  auto names = [&](const LayerSpec& l) {
    std::vector<std::string> out;
    for (size_t i : l.linears) out.push_back(a.linears[i].name);
    return out;
  };
  const LayerSpec& dense = a.layers[0];
  EXPECT_FALSE(dense.is_moe);
  EXPECT_EQ(names(dense), (std::vector<std::string>{
                              "model.layers.0.self_attn.q_a_proj", "model.layers.0.self_attn.q_b_proj",
                              "model.layers.0.self_attn.kv_a_proj_with_mqa",
                              "model.layers.0.self_attn.kv_b_proj", "model.layers.0.self_attn.o_proj",
                              "model.layers.0.mlp.gate_proj", "model.layers.0.mlp.up_proj",
                              "model.layers.0.mlp.down_proj"}));
  auto lin = [&](const LayerSpec& l, LinearRole r) -> const LinearModule& {
    return a.linears[l.linears[size_t(l.slot_of(r))]];
  };
  EXPECT_EQ(lin(dense, LinearRole::q_b_proj).out_features, 4 * 24);
  EXPECT_EQ(lin(dense, LinearRole::q_b_proj).input, LayerInput::q_latent);
  EXPECT_EQ(lin(dense, LinearRole::q_b_proj).fold_norm, int(NormSlot::q_a));
  EXPECT_EQ(lin(dense, LinearRole::kv_a_proj_with_mqa).out_features, 32 + 8);
  EXPECT_EQ(lin(dense, LinearRole::kv_b_proj).out_features, 4 * (16 + 12));
  EXPECT_EQ(lin(dense, LinearRole::kv_b_proj).input, LayerInput::kv_latent);
  EXPECT_EQ(lin(dense, LinearRole::kv_b_proj).fold_norm, int(NormSlot::kv_a));
  EXPECT_EQ(lin(dense, LinearRole::o_proj).in_features, 4 * 12);
  EXPECT_EQ(lin(dense, LinearRole::gate_proj).out_features, 128);
  // q_a_proj and kv_a_proj_with_mqa: one group (vLLM's fused_qkv_a_proj).
  EXPECT_GE(lin(dense, LinearRole::q_a_proj).group, 0);
  EXPECT_EQ(lin(dense, LinearRole::q_a_proj).group, lin(dense, LinearRole::kv_a_proj_with_mqa).group);
  EXPECT_EQ(lin(dense, LinearRole::q_b_proj).group, -1);
  EXPECT_EQ(dense.norm(NormSlot::q_a), "model.layers.0.self_attn.q_a_layernorm.weight");
  EXPECT_EQ(dense.norm(NormSlot::kv_a), "model.layers.0.self_attn.kv_a_layernorm.weight");
  EXPECT_EQ(a.norm_size(NormSlot::q_a), 48);
  EXPECT_EQ(a.norm_size(NormSlot::kv_a), 32);
  EXPECT_EQ(a.norm_eps(NormSlot::kv_a), 1e-6);

  const LayerSpec& sparse = a.layers[1];
  ASSERT_TRUE(sparse.is_moe);
  const MoeSpec& m = sparse.moe;
  EXPECT_EQ(m.routing, Routing::sigmoid_grouped);
  EXPECT_EQ(m.num_experts, 8);
  EXPECT_EQ(m.n_group, 2);
  EXPECT_EQ(m.topk_group, 1);
  EXPECT_EQ(m.routed_scaling, 2.5f);
  EXPECT_TRUE(m.norm_topk_prob);
  EXPECT_EQ(m.router, "model.layers.1.mlp.gate");
  EXPECT_EQ(m.score_bias, "model.layers.1.mlp.gate.e_score_correction_bias");
  EXPECT_TRUE(m.shared_gate.empty());
  EXPECT_EQ(m.shared_intermediate, 32);
  EXPECT_EQ(a.linears[sparse.linears[size_t(m.shared[2])]].name,
            "model.layers.1.mlp.shared_experts.down_proj");
  EXPECT_EQ(a.linears[sparse.linears[size_t(m.experts[7][1])]].name,
            "model.layers.1.mlp.experts.7.up_proj");
  const auto never = a.never_quantized_modules();
  EXPECT_NE(std::find(never.begin(), never.end(), "model.layers.2.mlp.gate"), never.end());
  EXPECT_NE(a.describe().find("MLA"), std::string::npos) << a.describe();

  // Without q LoRA: q_proj reads the hidden state, nothing to fuse it with; two shared experts
  // are one MLP twice as wide.
  auto c = deepseek_config();
  c["q_lora_rank"] = nullptr;
  c["n_shared_experts"] = 2;
  c["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 50000.0}};
  const Architecture d = Architecture::from_config(c, "cfg.json");
  const LayerSpec& l0 = d.layers[0];
  EXPECT_EQ(l0.slot_of(LinearRole::q_a_proj), -1);
  EXPECT_FALSE(l0.has(NormSlot::q_a));
  const LinearModule& q = d.linears[l0.linears[size_t(l0.slot_of(LinearRole::q_proj))]];
  EXPECT_EQ(q.out_features, 4 * 24);
  EXPECT_EQ(q.group, -1);
  EXPECT_EQ(q.fold_norm, int(NormSlot::attn_in));
  EXPECT_FLOAT_EQ(d.attention_scale, float(std::pow(24.0, -0.5)));
  EXPECT_EQ(d.layers[1].moe.shared_intermediate, 64);
  // attention_bias: q_a_proj, kv_a_proj_with_mqa and o_proj only.
  auto b = deepseek_config();
  b["attention_bias"] = true;
  for (const auto& m2 : Architecture::from_config(b, "cfg.json").linears)
    EXPECT_EQ(m2.bias, m2.role == LinearRole::q_a_proj || m2.role == LinearRole::kv_a_proj_with_mqa ||
                           m2.role == LinearRole::o_proj) << m2.name;
}

TEST(Architecture, DeepSeekV3RefusesWhatItCannotCompute) {
  struct Case {
    std::function<void(nlohmann::json&)> edit;
    std::string expect;
  };
  const std::vector<Case> cases = {
      {[](auto& c) { c["n_group"] = 3; }, "'n_group' 3 does not divide 'n_routed_experts' 8"},
      {[](auto& c) { c["n_group"] = 8; }, "'n_group' 8 leaves 1 expert per group"},
      {[](auto& c) { c["topk_group"] = 3; }, "'topk_group' 3 is larger than 'n_group' 2"},
      {[](auto& c) { c["num_experts_per_tok"] = 5; }, "'num_experts_per_tok' 5 is more than the 4"},
      {[](auto& c) { c["routed_scaling_factor"] = 0; }, "'routed_scaling_factor' 0 is not positive"},
      {[](auto& c) { c["routed_scaling_factor"] = "2.5"; }, "'routed_scaling_factor' is not a number"},
      {[](auto& c) { c["first_k_dense_replace"] = -1; }, "'first_k_dense_replace' is -1"},
      {[](auto& c) { c["n_routed_experts"] = 0; }, "'n_routed_experts'"},
      {[](auto& c) { c["n_group"] = nullptr; }, "'n_group' is null"},
      {[](auto& c) { c["v_head_dim"] = nullptr; }, "'v_head_dim' is null"},
      {[](auto& c) { c["moe_intermediate_size"] = 0; }, "'moe_intermediate_size'"},
      {[](auto& c) { c["n_shared_experts"] = 0; }, "'n_shared_experts'"},
      {[](auto& c) { c["scoring_func"] = "softmax"; }, "'scoring_func' is 'softmax'"},
      {[](auto& c) { c["topk_method"] = "greedy"; }, "'topk_method' is 'greedy'"},
      {[](auto& c) { c["moe_layer_freq"] = 2; }, "'moe_layer_freq' is 2"},
      {[](auto& c) { c["num_key_value_heads"] = 2; }, "'num_key_value_heads' 2 differs"},
      {[](auto& c) { c["qk_rope_head_dim"] = 7; }, "'qk_rope_head_dim' 7 is odd"},
      {[](auto& c) { c["kv_lora_rank"] = 0; }, "'kv_lora_rank'"},
      {[](auto& c) { c["q_lora_rank"] = -4; }, "'q_lora_rank'"},
      {[](auto& c) { c["rope_parameters"]["partial_rotary_factor"] = 0.5; },
       "'partial_rotary_factor' rotates 4 of the 8"},
      {[](auto& c) { c["rope_parameters"] = {{"rope_type", "linear"}, {"mscale_all_dim", 1.0}}; },
       "field 'factor' missing"},
  };
  for (const auto& tc : cases) {
    auto c = deepseek_config();
    tc.edit(c);
    const std::string e = error_of(c);
    EXPECT_NE(e.find("cfg.json"), std::string::npos) << e;
    EXPECT_NE(e.find(tc.expect), std::string::npos) << "got: " << e << "\nexpected: " << tc.expect;
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  }
  // What DeepSeek-V3 ships, and absent fields (DeepseekV3Config's defaults), are accepted.
  auto c = deepseek_config();
  c["moe_layer_freq"] = 1;
  EXPECT_EQ(error_of(c), "");
  c.erase("scoring_func");
  c.erase("topk_method");
  c.erase("first_k_dense_replace");  // 3: every layer dense here
  const Architecture a = Architecture::from_config(c, "cfg.json");
  EXPECT_FALSE(a.has_moe());
}

// Checkpoint tensors that do not match the spec are named.
TEST(Architecture, CheckpointTensorsMustMatchTheSpec) {
  const fs::path src = fs::path(QFORGE_SOURCE_DIR) / "tests/data/conformance/llama_bias_headdim";
  if (!fs::exists(src)) GTEST_SKIP() << "conformance data missing";
  test::ScratchDir dir;
  fs::copy_file(src / "model.safetensors", dir / "model.safetensors");
  std::ifstream in(src / "config.json");
  nlohmann::json c = nlohmann::json::parse(in);
  auto load_error = [&](const nlohmann::json& cfg) -> std::string {
    std::ofstream(dir / "config.json") << cfg.dump();
    try {
      Model::load(dir.path(), {});
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_EQ(load_error(c), "");
  auto no_bias = c;
  no_bias["mlp_bias"] = false;
  EXPECT_NE(load_error(no_bias).find("mlp.gate_proj.bias' present but config.json"), std::string::npos)
      << load_error(no_bias);
  auto other_head = c;
  other_head["head_dim"] = 16;
  EXPECT_NE(load_error(other_head).find("self_attn.q_proj.weight' is BF16 [128, 64], expected"),
            std::string::npos) << load_error(other_head);
  auto phi = c;
  phi["model_type"] = "phi3";
  phi["architectures"] = {"Phi3ForCausalLM"};
  EXPECT_NE(load_error(phi).find("self_attn.qkv_proj.weight' missing"), std::string::npos)
      << load_error(phi);
}

// The KV cache follows the positions run, not max_position_embeddings.
TEST(Architecture, KvCacheGrowsWithTheContextRun) {
  const fs::path src = fs::path(QFORGE_SOURCE_DIR) / "tests/data/conformance/llama_v4";
  if (!fs::exists(src)) GTEST_SKIP() << "conformance data missing";
  auto model = Model::load(src, {});
  EXPECT_EQ(model->kv_cache_bytes(), 0u);
  std::vector<int32_t> ids(32, 3);
  std::vector<float> logits(256);
  model->forward(ids, 0, logits.data(), false);
  // 2 layers x (K + V) x 32 positions x 2 KV heads x 16.
  EXPECT_EQ(model->kv_cache_bytes(), 2u * 2 * 32 * 32 * 4);
  EXPECT_THROW(model->forward(std::vector<int32_t>(600, 3), 0, logits.data(), false), Error);
}

}  // namespace
}  // namespace qf

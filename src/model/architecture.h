// Decoder architectures described as data: from a Hugging Face config.json to the list of
// Linear modules a checkpoint holds per decoder layer, their shapes, and the groups of modules
// that engines fuse (q/k/v, gate/up) and that must therefore share scales and decisions.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace qf {

enum class LinearRole { q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj };

std::string_view linear_role_name(LinearRole role);

struct LinearModule {
  std::string name;  // HF module prefix, e.g. "model.layers.3.self_attn.q_proj"
  int layer = 0;
  LinearRole role = LinearRole::q_proj;
  int64_t in_features = 0;
  int64_t out_features = 0;
  int group = -1;  // index into Architecture::fused_groups, -1 if not fused
  std::string weight_name() const { return name + ".weight"; }
};

struct Architecture {
  std::string model_type;  // "llama", "mistral", "qwen2", "qwen3"
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_layers = 0;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  int64_t vocab_size = 0;
  int64_t max_position_embeddings = 0;
  double rope_theta = 10000.0;
  double rms_norm_eps = 1e-6;
  bool tie_word_embeddings = false;
  bool qk_norm = false;         // Qwen3: RMSNorm on each head of q and k
  bool attention_bias = false;  // Qwen2: bias on q/k/v

  std::vector<LinearModule> linears;           // layer by layer, q,k,v,o,gate,up,down
  std::vector<std::vector<size_t>> fused_groups;  // indices into `linears`

  // Modules that are never quantized by default and are always listed as excluded in an
  // exported quantization config (the output head and the embedding).
  static std::vector<std::string> never_quantized_modules() {
    return {"lm_head", "model.embed_tokens"};
  }

  // Builds the description from a parsed config.json. Throws qf::Error starting with `label`
  // for an unsupported architecture or a missing/invalid field.
  static Architecture from_config(const nlohmann::json& config, const std::string& label);
};

// Names of the supported model types, for messages.
std::string supported_model_types();

}  // namespace qf

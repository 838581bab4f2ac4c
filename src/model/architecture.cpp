// Llama-family decoder layouts as a table: the families differ only in flags.
#include "model/architecture.h"

#include "core/error.h"

#include <array>
#include <fmt/format.h>

namespace qf {
namespace {

struct FamilyRow {
  std::string_view model_type;
  std::string_view architecture;  // config "architectures"[0]
  bool qk_norm;
  bool default_attention_bias;
};

constexpr std::array<FamilyRow, 4> kFamilies = {{
    {"llama", "LlamaForCausalLM", false, false},
    {"mistral", "MistralForCausalLM", false, false},
    {"qwen2", "Qwen2ForCausalLM", false, true},
    {"qwen3", "Qwen3ForCausalLM", true, false},
}};

int64_t require_int(const nlohmann::json& c, const char* key, const std::string& label) {
  if (!c.contains(key) || !c[key].is_number_integer() || c[key].get<int64_t>() <= 0)
    fail("{}: '{}' missing or not a positive integer", label, key);
  return c[key].get<int64_t>();
}

}  // namespace

std::string_view linear_role_name(LinearRole role) {
  static constexpr std::array<std::string_view, 7> names = {
      "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};
  return names[size_t(role)];
}

std::string supported_model_types() {
  std::string s;
  for (const auto& f : kFamilies) s += (s.empty() ? "" : ", ") + std::string(f.model_type);
  return s;
}

Architecture Architecture::from_config(const nlohmann::json& c, const std::string& label) {
  if (!c.is_object()) fail("{}: not a JSON object", label);
  std::string model_type = c.value("model_type", "");
  std::string arch_name;
  if (c.contains("architectures") && c["architectures"].is_array() && !c["architectures"].empty() &&
      c["architectures"][0].is_string())
    arch_name = c["architectures"][0].get<std::string>();
  const FamilyRow* family = nullptr;
  for (const auto& f : kFamilies)
    if (f.model_type == model_type || (model_type.empty() && f.architecture == arch_name)) family = &f;
  if (!family)
    fail("{}: unsupported architecture '{}' (model_type '{}'); supported model types: {}", label,
         arch_name, model_type, supported_model_types());

  Architecture a;
  a.model_type = std::string(family->model_type);
  a.hidden_size = require_int(c, "hidden_size", label);
  a.intermediate_size = require_int(c, "intermediate_size", label);
  a.num_layers = require_int(c, "num_hidden_layers", label);
  a.num_heads = require_int(c, "num_attention_heads", label);
  a.num_kv_heads = c.contains("num_key_value_heads") ? require_int(c, "num_key_value_heads", label)
                                                     : a.num_heads;
  a.vocab_size = require_int(c, "vocab_size", label);
  a.head_dim = c.contains("head_dim") && !c["head_dim"].is_null() ? require_int(c, "head_dim", label)
                                                                  : a.hidden_size / a.num_heads;
  a.max_position_embeddings = c.value("max_position_embeddings", int64_t(2048));
  a.rope_theta = c.value("rope_theta", 10000.0);
  a.rms_norm_eps = c.value("rms_norm_eps", 1e-6);
  a.tie_word_embeddings = c.value("tie_word_embeddings", false);
  a.qk_norm = family->qk_norm;
  a.attention_bias = c.value("attention_bias", family->default_attention_bias);
  if (a.num_heads % a.num_kv_heads != 0)
    fail("{}: num_attention_heads {} is not a multiple of num_key_value_heads {}", label,
         a.num_heads, a.num_kv_heads);

  const int64_t q_out = a.num_heads * a.head_dim, kv_out = a.num_kv_heads * a.head_dim;
  for (int layer = 0; layer < a.num_layers; ++layer) {
    const std::string attn = fmt::format("model.layers.{}.self_attn.", layer);
    const std::string mlp = fmt::format("model.layers.{}.mlp.", layer);
    auto add = [&](const std::string& prefix, LinearRole role, int64_t in, int64_t out) {
      a.linears.push_back({prefix + std::string(linear_role_name(role)), layer, role, in, out, -1});
      return a.linears.size() - 1;
    };
    const size_t q = add(attn, LinearRole::q_proj, a.hidden_size, q_out);
    const size_t k = add(attn, LinearRole::k_proj, a.hidden_size, kv_out);
    const size_t v = add(attn, LinearRole::v_proj, a.hidden_size, kv_out);
    add(attn, LinearRole::o_proj, q_out, a.hidden_size);
    const size_t g = add(mlp, LinearRole::gate_proj, a.hidden_size, a.intermediate_size);
    const size_t u = add(mlp, LinearRole::up_proj, a.hidden_size, a.intermediate_size);
    add(mlp, LinearRole::down_proj, a.intermediate_size, a.hidden_size);
    for (const auto& members : {std::vector<size_t>{q, k, v}, std::vector<size_t>{g, u}}) {
      for (size_t m : members) a.linears[m].group = int(a.fused_groups.size());
      a.fused_groups.push_back(members);
    }
  }
  return a;
}

}  // namespace qf

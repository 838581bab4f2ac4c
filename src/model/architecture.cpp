// Dense decoder families as rows of a table: the Linears of each block, where the norms sit,
// and the few settings in which families differ. The math each setting selects is in
// engine/model.cpp; what transformers computes for each family is the reference
// (tests/data/conformance, made by scripts/conformance).
#include "model/architecture.h"

#include "core/error.h"
#include "model/config_reader.h"
#include "model/nemotron_h.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace qf {
namespace {

// Where a layer's norms sit.
enum class NormPlacement : uint8_t {
  pre,       // input_layernorm -> attention, post_attention_layernorm -> MLP (Llama)
  sandwich,  // pre and post norms around both blocks (Gemma 3)
  post,      // post norms only, on each block's output (OLMo 2)
};

// Which layers attend through a sliding window.
enum class Sliding : uint8_t {
  none,         // sliding_window is not read by the family's modeling code
  all,          // every layer when sliding_window is set (Mistral, Phi-3)
  layer_types,  // per layer from `layer_types` (or the family's rule for deriving it)
};

// The MLP of a family's layers.
enum class MlpKind : uint8_t {
  dense,
  mixtral,    // every layer a block_sparse_moe: router `gate`, experts w1 (gate) w3 (up) w2 (down)
  qwen2_moe,  // mlp.gate + mlp.experts.N + mlp.shared_expert + mlp.shared_expert_gate
  qwen3_moe,  // mlp.gate + mlp.experts.N
  // mlp.gate (+ gate.e_score_correction_bias) + mlp.experts.N + mlp.shared_experts, after
  // first_k_dense_replace dense layers
  deepseek_v3,
  gpt_oss,    // mlp.router (with bias) + mlp.experts.N.{gate_up_proj (interleaved), down_proj}
};

struct FamilyRow {
  std::string_view model_type;
  std::string_view architecture;  // config "architectures"[0]
  bool fused_on_disk;             // qkv_proj / gate_up_proj (Phi-3)
  NormPlacement norms;
  NormStyle norm_style;
  QkNorm qk_norm;
  // Biases: q/k/v always (Qwen2); q/k/v/o from `attention_bias`; MLP from `mlp_bias`.
  bool qkv_bias_always;
  bool reads_attention_bias;
  bool reads_mlp_bias;
  Sliding sliding;
  bool partial_rotary;     // the modeling code rotates only the first rotary_dim elements
  const char* act_key;     // "hidden_act" or "hidden_activation"
  int64_t default_head_dim;  // when config.json has none; 0: hidden_size / heads
  double default_theta;
  double default_eps;
  bool default_tied;
  MlpKind mlp = MlpKind::dense;
  bool mla = false;  // multi-head latent attention instead of q/k/v (DeepSeek-V3)
  bool default_attention_bias = false;  // `attention_bias` when config.json has none
};

constexpr FamilyRow kFamilies[] = {
    {"llama", "LlamaForCausalLM", false, NormPlacement::pre, NormStyle::plain, QkNorm::none,
     false, true, true, Sliding::none, false, "hidden_act", 0, 10000.0, 1e-6, false},
    {"mistral", "MistralForCausalLM", false, NormPlacement::pre, NormStyle::plain, QkNorm::none,
     false, false, false, Sliding::all, false, "hidden_act", 0, 10000.0, 1e-6, false},
    {"qwen2", "Qwen2ForCausalLM", false, NormPlacement::pre, NormStyle::plain, QkNorm::none,
     true, false, false, Sliding::layer_types, false, "hidden_act", 0, 10000.0, 1e-6, false},
    {"qwen3", "Qwen3ForCausalLM", false, NormPlacement::pre, NormStyle::plain, QkNorm::per_head,
     false, true, false, Sliding::layer_types, false, "hidden_act", 128, 10000.0, 1e-6, false},
    {"gemma3_text", "Gemma3ForCausalLM", false, NormPlacement::sandwich, NormStyle::one_plus,
     QkNorm::per_head, false, true, false, Sliding::layer_types, false, "hidden_activation", 256,
     1000000.0, 1e-6, true},
    {"phi3", "Phi3ForCausalLM", true, NormPlacement::pre, NormStyle::plain, QkNorm::none, false,
     false, false, Sliding::all, true, "hidden_act", 0, 10000.0, 1e-5, false},
    {"granite", "GraniteForCausalLM", false, NormPlacement::pre, NormStyle::plain, QkNorm::none,
     false, true, true, Sliding::none, false, "hidden_act", 0, 10000.0, 1e-6, false},
    {"olmo2", "Olmo2ForCausalLM", false, NormPlacement::post, NormStyle::plain, QkNorm::whole,
     false, true, false, Sliding::none, false, "hidden_act", 0, 10000.0, 1e-5, false},
    {"mixtral", "MixtralForCausalLM", false, NormPlacement::pre, NormStyle::plain, QkNorm::none,
     false, false, false, Sliding::all, false, "hidden_act", 0, 1000000.0, 1e-5, false,
     MlpKind::mixtral},
    {"qwen2_moe", "Qwen2MoeForCausalLM", false, NormPlacement::pre, NormStyle::plain,
     QkNorm::none, false, false, false, Sliding::layer_types, false, "hidden_act", 0, 10000.0,
     1e-6, false, MlpKind::qwen2_moe},
    {"qwen3_moe", "Qwen3MoeForCausalLM", false, NormPlacement::pre, NormStyle::plain,
     QkNorm::per_head, false, true, false, Sliding::all, false, "hidden_act", 0, 10000.0, 1e-6,
     false, MlpKind::qwen3_moe},
    // attention_bias gives q_a_proj, kv_a_proj_with_mqa and o_proj a bias (the MLA branch).
    {"deepseek_v3", "DeepseekV3ForCausalLM", false, NormPlacement::pre, NormStyle::plain,
     QkNorm::none, false, true, false, Sliding::none, false, "hidden_act", 0, 10000.0, 1e-6,
     false, MlpKind::deepseek_v3, true},
    // gpt-oss: hidden_act is not read (the experts' clamped SwiGLU is fixed), attention_bias
    // defaults to true, sliding layers alternate (see from_config).
    {"gpt_oss", "GptOssForCausalLM", false, NormPlacement::pre, NormStyle::plain, QkNorm::none,
     false, true, false, Sliding::layer_types, false, "hidden_act", 64, 150000.0, 1e-5, false,
     MlpKind::gpt_oss, false, true},
};

// The fields of the MoE block of a family that the engine reads, and the rule for which layers
// hold one (transformers' modeling code of each family).
struct MoeConfig {
  MoeSpec base;                  // counts and routing; names and slots filled per layer
  std::vector<bool> sparse;      // per layer: an MoE block (else a dense MLP)
};

// DeepSeek-V3 (DeepseekV3TopkRouter, DeepseekV3MoE). An absent field takes DeepseekV3Config's
// default, as in transformers.
MoeConfig read_deepseek_moe(const ConfigReader& c, int64_t num_layers) {
  const std::string& label = c.label();
  for (const char* key : {"n_routed_experts", "num_experts_per_tok", "n_group", "topk_group",
                          "moe_intermediate_size", "n_shared_experts", "norm_topk_prob",
                          "routed_scaling_factor", "first_k_dense_replace"})
    c.refuse_null(key);
  // transformers' router always scores with sigmoid and the bias-corrected group choice
  // (noaux_tc), reading neither field, and its layers are MoE from first_k_dense_replace on
  // whatever moe_layer_freq says; engines such as vLLM honour them. The values DeepSeek-V3
  // ships agree with both; any other would make the two disagree, so it is refused.
  if (const std::string v = c.string_or("scoring_func", "sigmoid"); v != "sigmoid")
    fail("{}: 'scoring_func' is '{}'; transformers' DeepSeek-V3 ignores it and scores with "
         "sigmoid, other engines do not: refusing to guess", label, v);
  if (const std::string v = c.string_or("topk_method", "noaux_tc"); v != "noaux_tc")
    fail("{}: 'topk_method' is '{}'; transformers' DeepSeek-V3 ignores it and routes as "
         "noaux_tc, other engines do not: refusing to guess", label, v);
  if (c.has("moe_layer_freq") && c.positive("moe_layer_freq") != 1)
    fail("{}: 'moe_layer_freq' is {}; transformers' DeepSeek-V3 ignores it (every layer from "
         "first_k_dense_replace on is MoE), other engines do not: refusing to guess", label,
         c["moe_layer_freq"].dump());

  MoeConfig m;
  MoeSpec& s = m.base;
  s.routing = Routing::sigmoid_grouped;
  s.num_experts = c.positive_or("n_routed_experts", 256, 1 << 16);
  s.top_k = c.positive_or("num_experts_per_tok", 8, 1 << 16);
  s.n_group = c.positive_or("n_group", 8, 1 << 16);
  s.topk_group = c.positive_or("topk_group", 4, 1 << 16);
  s.expert_intermediate = c.positive_or("moe_intermediate_size", 2048);
  s.shared_intermediate = s.expert_intermediate * c.positive_or("n_shared_experts", 1, 1 << 10);
  s.norm_topk_prob = c.flag_or("norm_topk_prob", true);
  const double scaling = c.number_or("routed_scaling_factor", 2.5);
  if (!(scaling > 0)) fail("{}: 'routed_scaling_factor' {} is not positive", label, scaling);
  s.routed_scaling = float(scaling);
  check_group_routing(s, label);
  int64_t dense = 3;
  if (c.has("first_k_dense_replace")) {
    const auto& v = c["first_k_dense_replace"];
    if (!v.is_number_integer() || v.get<int64_t>() < 0)
      fail("{}: 'first_k_dense_replace' is {}, not a non-negative integer", label, v.dump());
    dense = v.get<int64_t>();
  }
  m.sparse.assign(size_t(num_layers), false);
  for (int64_t i = dense; i < num_layers; ++i) m.sparse[size_t(i)] = true;
  return m;
}

MoeConfig read_moe(const ConfigReader& c, const FamilyRow& f, int64_t num_layers) {
  if (f.mlp == MlpKind::deepseek_v3) return read_deepseek_moe(c, num_layers);
  MoeConfig m;
  MoeSpec& s = m.base;
  m.sparse.assign(size_t(num_layers), true);
  // transformers 5 writes Qwen's expert count as num_local_experts (its attribute map); hub
  // configs say num_experts.
  const char* experts_key =
      f.mlp == MlpKind::mixtral || f.mlp == MlpKind::gpt_oss || !c.has("num_experts")
          ? "num_local_experts" : "num_experts";
  s.num_experts = c.positive(experts_key, 1 << 16);
  s.top_k = c.positive("num_experts_per_tok", 1 << 16);
  if (s.top_k > s.num_experts)
    fail("{}: 'num_experts_per_tok' {} is larger than '{}' {}", c.label(), s.top_k, experts_key,
         s.num_experts);
  s.routing = Routing::softmax_topk;
  if (f.mlp == MlpKind::mixtral) {
    s.expert_intermediate = c.positive("intermediate_size");
    s.norm_topk_prob = true;
    return m;
  }
  if (f.mlp == MlpKind::gpt_oss) {
    // GptOssTopKRouter / GptOssExperts: every layer; `experts_per_token` is not read.
    s.expert_intermediate = c.positive("intermediate_size");
    s.routing = Routing::topk_softmax;
    s.router_bias = true;
    s.gate_up_interleaved = true;
    return m;
  }
  s.expert_intermediate = c.positive("moe_intermediate_size");
  s.norm_topk_prob = c.flag_or("norm_topk_prob", false);
  if (f.mlp == MlpKind::qwen2_moe) s.shared_intermediate = c.positive("shared_expert_intermediate_size");
  // Qwen2/3-MoE: layer i is sparse unless listed in mlp_only_layers, and only every
  // decoder_sparse_step-th layer ((i + 1) % step == 0) is.
  const int64_t step = c.positive_or("decoder_sparse_step", 1, 1 << 20);
  for (int64_t i = 0; i < num_layers; ++i) m.sparse[size_t(i)] = (i + 1) % step == 0;
  if (c.has("mlp_only_layers")) {
    const auto& list = c["mlp_only_layers"];
    if (!list.is_array()) fail("{}: 'mlp_only_layers' is not a list of layer indices", c.label());
    for (const auto& v : list) {
      if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= num_layers)
        fail("{}: 'mlp_only_layers' holds {}, not a layer index below {}", c.label(), v.dump(),
             num_layers);
      m.sparse[size_t(v.get<int64_t>())] = false;
    }
  }
  return m;
}

Activation parse_activation(const std::string& name, const char* key, const std::string& label) {
  if (name == "silu" || name == "swish") return Activation::silu;
  if (name == "gelu_pytorch_tanh" || name == "gelu_new" || name == "gelu_fast")
    return Activation::gelu_tanh;
  if (name == "gelu") return Activation::gelu;
  fail("{}: '{}' is '{}', which qforge does not compute (supported: silu, gelu, "
       "gelu_pytorch_tanh)", label, key, name);
}

// The rope parameters of each layer type, from either config layout. Returns one object per
// entry of `types` (null: plain RoPE with the top-level or default theta).
std::vector<nlohmann::json> rope_params(const ConfigReader& c, const std::vector<std::string>& types,
                                        const FamilyRow& f) {
  nlohmann::json top = nlohmann::json::object();
  if (c.has("rope_theta")) top["rope_theta"] = c["rope_theta"];
  nlohmann::json params;
  if (c.has("rope_parameters")) params = c["rope_parameters"];
  else if (c.has("rope_scaling")) params = c["rope_scaling"];
  else if (f.model_type == "gpt_oss")
    // GptOssConfig's default when the config has no rope parameters (theta: default_theta).
    params = {{"rope_type", "yarn"}, {"factor", 32.0}, {"beta_fast", 32.0}, {"beta_slow", 1.0},
              {"truncate", false}, {"original_max_position_embeddings", 4096}};
  if (!params.is_null() && !params.is_object())
    fail("{}: 'rope_parameters' / 'rope_scaling' is not a JSON object", c.label());
  bool nested = false;
  if (params.is_object())
    for (const auto& t : types) nested |= params.contains(t);
  std::vector<nlohmann::json> out;
  for (const auto& t : types) {
    nlohmann::json p = nested ? (params.contains(t) ? params[t] : nlohmann::json()) : params;
    if (p.is_null()) p = nlohmann::json::object();
    if (!p.is_object()) fail("{}: rope parameters of '{}' are not a JSON object", c.label(), t);
    for (const auto& [k, v] : top.items())
      if (!p.contains(k)) p[k] = v;
    if (p.contains("mrope_section"))
      fail("{}: rope field 'mrope_section' (multimodal RoPE) is not supported", c.label());
    out.push_back(std::move(p));
  }
  // Gemma 3 (4.x layout): `rope_scaling` applies to the global layers, `rope_local_base_freq`
  // is the local layers' theta.
  if (f.model_type == "gemma3_text" && !nested) {
    for (size_t i = 0; i < types.size(); ++i) {
      if (types[i] != "sliding_attention") continue;
      nlohmann::json local = nlohmann::json::object();
      local["rope_theta"] = c.number_or("rope_local_base_freq", 10000.0);
      out[i] = local;
    }
  }
  // Phi-3 keeps original_max_position_embeddings at the top level (Phi3Config's default 4096
  // when absent); transformers lets it override the rope's own.
  if (f.model_type == "phi3")
    for (auto& p : out)
      p["original_max_position_embeddings"] =
          c.has("original_max_position_embeddings") ? c["original_max_position_embeddings"]
                                                    : nlohmann::json(4096);
  return out;
}

// DeepseekV3Attention.scaling: qk_head_dim^-0.5, times yarn_get_mscale(factor,
// mscale_all_dim)^2 when the rope type is not default and mscale_all_dim is set (non-zero), in
// double as Python computes it.
double mla_softmax_scale(const nlohmann::json& rope, int64_t qk_head_dim, const std::string& label) {
  double scale = std::pow(double(qk_head_dim), -0.5);
  std::string type = "default";
  for (const char* key : {"rope_type", "type"})
    if (rope.contains(key) && rope[key].is_string()) {
      type = rope[key].get<std::string>();
      break;
    }
  if (type == "default" || !rope.contains("mscale_all_dim") || rope["mscale_all_dim"].is_null())
    return scale;
  if (!rope["mscale_all_dim"].is_number())
    fail("{}: rope field 'mscale_all_dim' is not a number", label);
  const double all_dim = rope["mscale_all_dim"].get<double>();
  if (all_dim == 0) return scale;
  if (!rope.contains("factor") || !rope["factor"].is_number())
    fail("{}: rope field 'factor' missing or not a number; DeepSeek-V3's softmax scale needs it "
         "with 'mscale_all_dim'", label);
  const double factor = rope["factor"].get<double>();
  const double m = factor <= 1 ? 1.0 : 0.1 * all_dim * std::log(factor) + 1.0;
  if (!std::isfinite(m)) fail("{}: rope fields 'factor' / 'mscale_all_dim' are not finite", label);
  return scale * m * m;
}

}  // namespace

std::string_view linear_role_name(LinearRole role) {
  static constexpr std::string_view names[kLinearRoles] = {
      "q_proj", "k_proj", "v_proj", "qkv_proj", "o_proj", "gate_proj", "up_proj", "gate_up_proj",
      "down_proj", "q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "kv_b_proj", "in_proj",
      "out_proj", "fc1_latent_proj", "fc2_latent_proj"};
  return names[size_t(role)];
}

std::string supported_model_types() {
  std::string s;
  for (const auto& f : kFamilies) s += (s.empty() ? "" : ", ") + std::string(f.model_type);
  return s + ", " + std::string(kNemotronHModelType);
}

Architecture Architecture::from_config(const nlohmann::json& config, const std::string& label,
                                       const ArchitectureOptions& options) {
  if (!config.is_object()) fail("{}: not a JSON object", label);
  const ConfigReader c(config, label);
  const std::string model_type = c.has("model_type") && config["model_type"].is_string()
                                     ? config["model_type"].get<std::string>() : "";
  std::string arch_name;
  if (c.has("architectures") && config["architectures"].is_array() &&
      !config["architectures"].empty() && config["architectures"][0].is_string())
    arch_name = config["architectures"][0].get<std::string>();
  if (model_type == kNemotronHModelType || (model_type.empty() && arch_name == kNemotronHArchitecture))
    return nemotron_h_architecture(config, label);
  const FamilyRow* family = nullptr;
  for (const auto& f : kFamilies)
    if (f.model_type == model_type || (model_type.empty() && f.architecture == arch_name)) family = &f;
  // Gemma 3 checkpoints of the text model alone are often labelled "gemma3" with the text
  // architecture.
  if (!family && model_type == "gemma3" && arch_name == "Gemma3ForCausalLM" && !c.has("text_config"))
    family = &kFamilies[4];
  if (!family)
    fail("{}: unsupported architecture '{}' (model_type '{}'); supported model types: {}", label,
         arch_name, model_type, supported_model_types());
  const FamilyRow& f = *family;

  Architecture a;
  a.model_type = std::string(f.model_type);
  a.hidden_size = c.positive("hidden_size");
  a.intermediate_size = c.positive("intermediate_size");
  a.num_layers = c.positive("num_hidden_layers", 4096);
  a.num_heads = c.positive("num_attention_heads", 65536);
  a.num_kv_heads = c.positive_or("num_key_value_heads", a.num_heads, 65536);
  a.vocab_size = c.positive("vocab_size", int64_t(1) << 26);
  if (f.mla) {
    // DeepseekV3Config's defaults for absent fields; its `head_dim` and `qk_head_dim` are
    // derived (qk_rope_head_dim and nope + rope) and overwritten on load, so not read.
    for (const char* key : {"kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim",
                            "rope_interleave"})
      c.refuse_null(key);
    MlaSpec& m = a.mla;
    // q_lora_rank null means q_proj; absent, the config class's 1536.
    m.q_lora_rank = c.is_null("q_lora_rank") ? 0 : c.positive_or("q_lora_rank", 1536, 1 << 20);
    m.kv_lora_rank = c.positive_or("kv_lora_rank", 512, 1 << 20);
    m.qk_nope_head_dim = c.positive_or("qk_nope_head_dim", 128, 65536);
    m.qk_rope_head_dim = c.positive_or("qk_rope_head_dim", 64, 65536);
    m.rope_interleave = c.flag_or("rope_interleave", true);
    if (m.qk_rope_head_dim % 2 != 0)
      fail("{}: 'qk_rope_head_dim' {} is odd; RoPE rotates pairs", label, m.qk_rope_head_dim);
    a.head_dim = m.qk_nope_head_dim + m.qk_rope_head_dim;
    a.v_head_dim = c.positive_or("v_head_dim", 128, 65536);
    if (a.num_kv_heads != a.num_heads)
      fail("{}: 'num_key_value_heads' {} differs from 'num_attention_heads' {}; multi-head latent "
           "attention expands keys and values to every head", label, a.num_kv_heads, a.num_heads);
  } else {
    a.head_dim = c.positive_or("head_dim", f.default_head_dim > 0 ? f.default_head_dim
                                                                   : a.hidden_size / a.num_heads, 65536);
    if (a.head_dim <= 0) fail("{}: head_dim resolves to 0", label);
    a.v_head_dim = a.head_dim;
  }
  a.max_position_embeddings = c.positive_or("max_position_embeddings", 2048, int64_t(1) << 40);
  a.rms_norm_eps = c.number_or("rms_norm_eps", f.default_eps);
  if (!(a.rms_norm_eps >= 0)) fail("{}: 'rms_norm_eps' {} is negative", label, a.rms_norm_eps);
  a.tie_word_embeddings = c.flag_or("tie_word_embeddings", f.default_tied);
  if (a.num_heads % a.num_kv_heads != 0)
    fail("{}: num_attention_heads {} is not a multiple of num_key_value_heads {}", label,
         a.num_heads, a.num_kv_heads);
  a.norm_style = f.norm_style;
  a.qk_norm = f.qk_norm;
  if (f.mlp == MlpKind::gpt_oss) {
    // GptOssExperts reads swiglu_alpha / swiglu_limit (defaults 1.702 / 7.0), never hidden_act.
    a.activation = Activation::clamped_swiglu;
    a.swiglu_limit = float(c.number_or("swiglu_limit", 7.0));
    a.swiglu_alpha = float(c.number_or("swiglu_alpha", 1.702));
  } else {
    a.activation = parse_activation(c.string_or(f.act_key, "silu"), f.act_key, label);
  }
  a.attention_scale = float(std::pow(double(a.head_dim), -0.5));

  // Family settings that change the math.
  if (f.model_type == "gemma3_text") {
    if (c.flag_or("use_bidirectional_attention", false))
      fail("{}: 'use_bidirectional_attention' true is not supported (qforge runs causal "
           "decoders)", label);
    a.embedding_scale = float(std::sqrt(double(a.hidden_size)));
    a.attention_scale = float(std::pow(c.number_or("query_pre_attn_scalar", 256.0), -0.5));
    a.attn_softcap = float(c.number_or("attn_logit_softcapping", 0.0));
    a.final_softcap = float(c.number_or("final_logit_softcapping", 0.0));
    if (a.attn_softcap < 0 || a.final_softcap < 0) fail("{}: softcapping values must be positive", label);
  }
  if (f.model_type == "granite") {
    a.embedding_scale = float(c.number_or("embedding_multiplier", 1.0));
    a.attention_scale = float(c.number_or("attention_multiplier", 1.0));
    a.residual_scale = float(c.number_or("residual_multiplier", 1.0));
    a.logits_divisor = float(c.number_or("logits_scaling", 1.0));
    if (!(a.logits_divisor != 0)) fail("{}: 'logits_scaling' must not be 0", label);
  }
  if (!f.partial_rotary && c.has("partial_rotary_factor") && c.number_or("partial_rotary_factor", 1.0) != 1.0)
    fail("{}: 'partial_rotary_factor' {} is not used by {} models in transformers; refusing to guess",
         label, c.number_or("partial_rotary_factor", 1.0), f.model_type);

  const bool moe_family = f.mlp != MlpKind::dense;
  MoeConfig moe;
  if (moe_family) moe = read_moe(c, f, a.num_layers);

  // Layer types: which layers slide, and which RoPE each uses.
  std::vector<std::string> layer_types(size_t(a.num_layers), "full_attention");
  int64_t window = 0;
  if (f.sliding == Sliding::all && c.has("sliding_window")) {
    window = c.positive("sliding_window", int64_t(1) << 40);
    std::fill(layer_types.begin(), layer_types.end(), "sliding_attention");
  } else if (f.sliding == Sliding::all && f.model_type == "qwen3_moe") {
    // Qwen3-MoE: sliding_window is kept only with use_sliding_window, then on every layer.
    if (c.flag_or("use_sliding_window", false) && c.has("sliding_window")) {
      window = c.positive("sliding_window", int64_t(1) << 40);
      std::fill(layer_types.begin(), layer_types.end(), "sliding_attention");
    }
  } else if (f.sliding == Sliding::layer_types) {
    const bool qwen = f.model_type == "qwen2" || f.model_type == "qwen3" ||
                      f.model_type == "qwen2_moe";
    // Qwen: sliding_window is read only with use_sliding_window (transformers sets it to None
    // otherwise).
    const bool enabled = qwen ? c.flag_or("use_sliding_window", false) : true;
    if (enabled && c.has("sliding_window")) window = c.positive("sliding_window", int64_t(1) << 40);
    else if (f.model_type == "gpt_oss") window = 128;  // GptOssConfig's default
    if (c.has("layer_types")) {
      const auto& lt = config["layer_types"];
      if (!lt.is_array() || int64_t(lt.size()) != a.num_layers)
        fail("{}: 'layer_types' must be a list of {} strings", label, a.num_layers);
      for (size_t i = 0; i < lt.size(); ++i) {
        if (!lt[i].is_string() || (lt[i] != "full_attention" && lt[i] != "sliding_attention"))
          fail("{}: 'layer_types'[{}] is {}, not 'full_attention' or 'sliding_attention'", label, i,
               lt[i].dump());
        layer_types[i] = lt[i].get<std::string>();
      }
    } else if (f.model_type == "qwen2_moe") {
      // Qwen2MoeConfig: every other layer (even indices) below max_window_layers.
      const int64_t last = c.positive_or("max_window_layers", 28, 1 << 20);
      for (int64_t i = 0; i < a.num_layers; ++i)
        if (window > 0 && (i + 1) % 2 == 1 && i < last) layer_types[size_t(i)] = "sliding_attention";
    } else if (f.model_type == "gpt_oss") {
      // GptOssConfig: sliding iff (i + 1) % 2 != 0 (even layers slide).
      for (int64_t i = 0; i < a.num_layers; ++i)
        if ((i + 1) % 2 != 0) layer_types[size_t(i)] = "sliding_attention";
    } else if (qwen) {
      const int64_t first = c.positive_or("max_window_layers", 28, 1 << 20);
      for (int64_t i = 0; i < a.num_layers; ++i)
        if (window > 0 && i >= first) layer_types[size_t(i)] = "sliding_attention";
    } else {
      const int64_t pattern = c.positive_or("sliding_window_pattern", 6, 1 << 20);
      for (int64_t i = 0; i < a.num_layers; ++i)
        if ((i + 1) % pattern != 0) layer_types[size_t(i)] = "sliding_attention";
    }
    const bool any_sliding =
        std::count(layer_types.begin(), layer_types.end(), "sliding_attention") > 0;
    if (any_sliding && window == 0)
      fail("{}: 'layer_types' has sliding layers but 'sliding_window' is not set", label);
    if (qwen && window == 0) std::fill(layer_types.begin(), layer_types.end(), "full_attention");
  }

  // One RoPE per distinct layer type (a family with local and global RoPE nests them).
  const std::vector<std::string> rope_types = {"full_attention", "sliding_attention"};
  const double prf = f.partial_rotary ? c.number_or("partial_rotary_factor", 1.0) : 1.0;
  const auto params = rope_params(c, rope_types, f);
  // MLA rotates the rope part of each head only: its dimension is the RoPE's head_dim.
  const int64_t rope_head_dim = f.mla ? a.mla.qk_rope_head_dim : a.head_dim;
  for (size_t i = 0; i < rope_types.size(); ++i)
    a.ropes.push_back(parse_rope(params[i], f.default_theta, rope_head_dim, prf,
                                 a.max_position_embeddings,
                                 fmt::format("{} ({})", label, rope_types[i])));
  if (f.mla) {
    // transformers rotates all of q_rot / k_rot with the cos/sin it computes; fewer rotary
    // dims would not broadcast there.
    if (a.ropes[0].rotary_dim != rope_head_dim)
      fail("{}: rope field 'partial_rotary_factor' rotates {} of the {} qk_rope_head_dim dims; "
           "DeepSeek-V3 rotates all of them", label, a.ropes[0].rotary_dim, rope_head_dim);
    a.attention_scale = float(mla_softmax_scale(params[0], a.head_dim, label));
  }

  // Biases.
  const bool attn_bias =
      f.reads_attention_bias && c.flag_or("attention_bias", f.default_attention_bias);
  // Qwen2-MoE names its q/k/v bias switch qkv_bias (default true).
  const bool qkv_bias_field = f.model_type == "qwen2_moe" && c.flag_or("qkv_bias", true);
  const bool mlp_bias = f.reads_mlp_bias && c.flag_or("mlp_bias", false);

  const int64_t q_out = a.num_heads * a.head_dim, kv_out = a.num_kv_heads * a.head_dim;
  for (int layer = 0; layer < a.num_layers; ++layer) {
    LayerSpec spec;
    spec.slot.fill(-1);
    const std::string p = fmt::format("model.layers.{}.", layer);
    const bool sliding = layer_types[size_t(layer)] == "sliding_attention";
    spec.sliding_window = sliding ? window : 0;
    spec.rope = sliding ? 1 : 0;
    switch (f.norms) {
      case NormPlacement::pre:
        spec.norms[size_t(NormSlot::attn_in)] = p + "input_layernorm.weight";
        spec.norms[size_t(NormSlot::mlp_in)] = p + "post_attention_layernorm.weight";
        break;
      case NormPlacement::sandwich:
        spec.norms[size_t(NormSlot::attn_in)] = p + "input_layernorm.weight";
        spec.norms[size_t(NormSlot::attn_out)] = p + "post_attention_layernorm.weight";
        spec.norms[size_t(NormSlot::mlp_in)] = p + "pre_feedforward_layernorm.weight";
        spec.norms[size_t(NormSlot::mlp_out)] = p + "post_feedforward_layernorm.weight";
        break;
      case NormPlacement::post:
        spec.norms[size_t(NormSlot::attn_out)] = p + "post_attention_layernorm.weight";
        spec.norms[size_t(NormSlot::mlp_out)] = p + "post_feedforward_layernorm.weight";
        break;
    }
    if (f.qk_norm != QkNorm::none) {
      spec.norms[size_t(NormSlot::q)] = p + "self_attn.q_norm.weight";
      spec.norms[size_t(NormSlot::k)] = p + "self_attn.k_norm.weight";
    }
    if (f.mla) {
      if (a.mla.q_lora_rank > 0) spec.norms[size_t(NormSlot::q_a)] = p + "self_attn.q_a_layernorm.weight";
      spec.norms[size_t(NormSlot::kv_a)] = p + "self_attn.kv_a_layernorm.weight";
    }
    if (f.mlp == MlpKind::gpt_oss) spec.sinks = p + "self_attn.sinks";
    // AWQ / SmoothQuant fold their scales into the pre-norm, when it is a plain x * w.
    const int attn_fold = spec.has(NormSlot::attn_in) && f.norm_style == NormStyle::plain
                              ? int(NormSlot::attn_in) : -1;
    const int mlp_fold = spec.has(NormSlot::mlp_in) && f.norm_style == NormStyle::plain
                             ? int(NormSlot::mlp_in) : -1;
    auto add = [&](const char* block, LinearRole role, LayerInput input, int64_t in, int64_t out,
                   bool bias, int fold) {
      LinearModule m;
      m.name = p + block + std::string(linear_role_name(role));
      m.layer = layer;
      m.role = role;
      m.input = input;
      m.in_features = in;
      m.out_features = out;
      m.bias = bias;
      m.fold_norm = fold;
      m.slot = int(spec.linears.size());
      spec.slot[size_t(role)] = m.slot;
      spec.linears.push_back(a.linears.size());
      a.linears.push_back(std::move(m));
      return a.linears.size() - 1;
    };
    auto fuse = [&](std::vector<size_t> members) {
      for (size_t m : members) a.linears[m].group = int(a.fused_groups.size());
      a.fused_groups.push_back(std::move(members));
    };
    // An MoE block: the routed experts' gate/up/down (gate and up of one expert fused: engines
    // run them as one product with one NVFP4 tensor scale), then the shared expert's.
    auto add_moe = [&](const std::string& prefix, const MoeSpec& base, LayerSpec& ls, int fold) {
      ls.is_moe = true;
      ls.moe = base;
      const bool mixtral = f.mlp == MlpKind::mixtral;
      const bool deepseek = f.mlp == MlpKind::deepseek_v3;
      const std::string block = prefix + (mixtral ? "block_sparse_moe." : "mlp.");
      ls.moe.router = block + "gate";
      if (deepseek) ls.moe.score_bias = block + "gate.e_score_correction_bias";
      auto expert = [&](const std::string& where, int index, int64_t inter,
                        const std::array<std::string_view, 3>& leaf) {
        std::array<int, 3> slots{};
        const LinearRole roles[3] = {LinearRole::gate_proj, LinearRole::up_proj, LinearRole::down_proj};
        size_t members[3];
        for (int r = 0; r < 3; ++r) {
          LinearModule m;
          m.name = where + std::string(leaf[size_t(r)]);
          m.layer = layer;
          m.role = roles[r];
          m.input = r < 2 ? LayerInput::ffn_norm : LayerInput::mlp_act;
          m.expert = index;
          m.in_features = r < 2 ? a.hidden_size : inter;
          m.out_features = r < 2 ? inter : a.hidden_size;
          m.fold_norm = r < 2 ? fold : -1;
          m.slot = int(ls.linears.size());
          slots[size_t(r)] = m.slot;
          ls.linears.push_back(a.linears.size());
          members[r] = a.linears.size();
          a.linears.push_back(std::move(m));
        }
        fuse({members[0], members[1]});
        return slots;
      };
      const std::array<std::string_view, 3> qwen_leaf = {"gate_proj", "up_proj", "down_proj"};
      const std::array<std::string_view, 3> mixtral_leaf = {"w1", "w3", "w2"};
      for (int64_t e = 0; e < base.num_experts; ++e)
        ls.moe.experts.push_back(expert(fmt::format("{}experts.{}.", block, e), int(e),
                                        base.expert_intermediate,
                                        mixtral ? mixtral_leaf : qwen_leaf));
      if (base.shared_intermediate > 0) {
        ls.moe.shared = expert(block + (deepseek ? "shared_experts." : "shared_expert."),
                               kSharedExpert, base.shared_intermediate, qwen_leaf);
        if (f.mlp == MlpKind::qwen2_moe) ls.moe.shared_gate = block + "shared_expert_gate";
      }
    };
    // gpt-oss experts: gate_up_proj [2I, H] (output rows interleaved gate, up) and down_proj
    // [H, I], both with biases; gate and up are one Linear, so they share their scales and
    // their fate in a plan without a fused group. The hub stores them as fused, transposed
    // 3-D tensors (model/expert_tensors.cpp presents them per expert).
    auto add_gpt_oss_moe = [&](const MoeSpec& base, LayerSpec& ls) {
      ls.is_moe = true;
      ls.moe = base;
      const std::string block = p + "mlp.";
      ls.moe.router = block + "router";
      // Linearised (llm-compressor): gate_proj and up_proj [I, H] of their own, one fused group.
      const bool split = options.gpt_oss_split_gate_up;
      ls.moe.gate_up_interleaved = !split;
      const LinearRole roles[3] = {LinearRole::gate_proj,
                                   split ? LinearRole::up_proj : LinearRole::gate_up_proj,
                                   LinearRole::down_proj};
      for (int64_t e = 0; e < base.num_experts; ++e) {
        std::array<int, 3> slots{-1, -1, -1};
        for (int r = split ? 0 : 1; r < 3; ++r) {
          LinearModule m;
          m.role = roles[r];
          m.name = fmt::format("{}experts.{}.{}", block, e, linear_role_name(m.role));
          m.layer = layer;
          m.input = r < 2 ? LayerInput::ffn_norm : LayerInput::mlp_act;
          m.expert = int(e);
          m.in_features = r < 2 ? a.hidden_size : base.expert_intermediate;
          m.out_features = r == 2 ? a.hidden_size
                           : split ? base.expert_intermediate : 2 * base.expert_intermediate;
          m.bias = true;
          m.fold_norm = -1;  // the router reads the same normed input
          m.slot = int(ls.linears.size());
          slots[size_t(r)] = m.slot;
          ls.linears.push_back(a.linears.size());
          a.linears.push_back(std::move(m));
        }
        if (split) fuse({ls.linears[size_t(slots[0])], ls.linears[size_t(slots[1])]});
        ls.moe.experts.push_back(slots);
      }
    };
    if (f.fused_on_disk) {
      add("self_attn.", LinearRole::qkv_proj, LayerInput::attn_norm, a.hidden_size,
          q_out + 2 * kv_out, false, attn_fold);
      add("self_attn.", LinearRole::o_proj, LayerInput::attn_out, q_out, a.hidden_size, false, -1);
      add("mlp.", LinearRole::gate_up_proj, LayerInput::ffn_norm, a.hidden_size,
          2 * a.intermediate_size, false, mlp_fold);
      add("mlp.", LinearRole::down_proj, LayerInput::mlp_act, a.intermediate_size, a.hidden_size,
          false, -1);
    } else {
      if (f.mla) {
        // The latent norms are plain x * w and feed only q_b_proj / kv_b_proj, so scales fold
        // into them (llm-compressor's DeepSeek mappings do the same).
        const MlaSpec& m = a.mla;
        const int64_t kv_a_out = m.kv_lora_rank + m.qk_rope_head_dim;
        const int64_t kv_b_out = a.num_heads * (m.qk_nope_head_dim + a.v_head_dim);
        const bool plain = f.norm_style == NormStyle::plain;
        if (m.q_lora_rank > 0) {
          const size_t qa = add("self_attn.", LinearRole::q_a_proj, LayerInput::attn_norm,
                                a.hidden_size, m.q_lora_rank, attn_bias, attn_fold);
          add("self_attn.", LinearRole::q_b_proj, LayerInput::q_latent, m.q_lora_rank, q_out,
              false, plain ? int(NormSlot::q_a) : -1);
          const size_t kva = add("self_attn.", LinearRole::kv_a_proj_with_mqa, LayerInput::attn_norm,
                                 a.hidden_size, kv_a_out, attn_bias, attn_fold);
          // Both read the normed hidden state and vLLM runs them as one product
          // (fused_qkv_a_proj), which takes one NVFP4 tensor scale.
          fuse({qa, kva});
        } else {
          add("self_attn.", LinearRole::q_proj, LayerInput::attn_norm, a.hidden_size, q_out, false,
              attn_fold);
          add("self_attn.", LinearRole::kv_a_proj_with_mqa, LayerInput::attn_norm, a.hidden_size,
              kv_a_out, attn_bias, attn_fold);
        }
        add("self_attn.", LinearRole::kv_b_proj, LayerInput::kv_latent, m.kv_lora_rank, kv_b_out,
            false, plain ? int(NormSlot::kv_a) : -1);
        add("self_attn.", LinearRole::o_proj, LayerInput::attn_out, a.num_heads * a.v_head_dim,
            a.hidden_size, attn_bias, -1);
      } else {
        const bool qkv_bias = f.qkv_bias_always || attn_bias || qkv_bias_field;
        const size_t q = add("self_attn.", LinearRole::q_proj, LayerInput::attn_norm,
                             a.hidden_size, q_out, qkv_bias, attn_fold);
        const size_t k = add("self_attn.", LinearRole::k_proj, LayerInput::attn_norm,
                             a.hidden_size, kv_out, qkv_bias, attn_fold);
        const size_t v = add("self_attn.", LinearRole::v_proj, LayerInput::attn_norm,
                             a.hidden_size, kv_out, qkv_bias, attn_fold);
        add("self_attn.", LinearRole::o_proj, LayerInput::attn_out, q_out, a.hidden_size,
            attn_bias, -1);
        fuse({q, k, v});
      }
      if (f.mlp == MlpKind::gpt_oss) {
        add_gpt_oss_moe(moe.base, spec);
      } else if (moe_family && moe.sparse[size_t(layer)]) {
        // The router reads the same normed input, so a scale folded into the norm would change
        // the routing: AWQ / SmoothQuant keep their scales beside the experts instead.
        add_moe(p, moe.base, spec, -1);
      } else {
        const size_t g = add("mlp.", LinearRole::gate_proj, LayerInput::ffn_norm, a.hidden_size,
                             a.intermediate_size, mlp_bias, mlp_fold);
        const size_t u = add("mlp.", LinearRole::up_proj, LayerInput::ffn_norm, a.hidden_size,
                             a.intermediate_size, mlp_bias, mlp_fold);
        add("mlp.", LinearRole::down_proj, LayerInput::mlp_act, a.intermediate_size,
            a.hidden_size, mlp_bias, -1);
        fuse({g, u});
      }
    }
    a.layers.push_back(std::move(spec));
  }
  // The engine computes cos/sin for every RoPE each forward call: keep only those in use.
  if (std::none_of(a.layers.begin(), a.layers.end(), [](const LayerSpec& l) { return l.rope == 1; }))
    a.ropes.resize(1);
  return a;
}

std::vector<std::string> Architecture::never_quantized_modules() const {
  std::vector<std::string> out = {head_module, embed_module()};
  for (const auto& l : layers) {
    if (!l.is_moe) continue;
    out.push_back(l.moe.router);
    if (!l.moe.shared_gate.empty()) out.push_back(l.moe.shared_gate);
  }
  return out;
}

int64_t Architecture::norm_size(NormSlot slot) const {
  switch (slot) {
    case NormSlot::q:
      return qk_norm == QkNorm::per_head ? head_dim : num_heads * head_dim;
    case NormSlot::k:
      return qk_norm == QkNorm::per_head ? head_dim : num_kv_heads * head_dim;
    case NormSlot::q_a: return mla.q_lora_rank;
    case NormSlot::kv_a: return mla.kv_lora_rank;
    default: return hidden_size;
  }
}

double Architecture::norm_eps(NormSlot slot) const {
  return slot == NormSlot::q_a || slot == NormSlot::kv_a ? mla.latent_norm_eps : rms_norm_eps;
}

std::string Architecture::embed_module() const {
  constexpr std::string_view suffix = ".weight";
  return embed_name.ends_with(suffix) ? embed_name.substr(0, embed_name.size() - suffix.size())
                                      : embed_name;
}

bool Architecture::has_attention() const {
  return std::any_of(layers.begin(), layers.end(), [](const LayerSpec& l) { return l.has_attention; });
}

bool Architecture::has_moe() const {
  return std::any_of(layers.begin(), layers.end(), [](const LayerSpec& l) { return l.is_moe; });
}

std::string Architecture::describe() const {
  std::string s = fmt::format("{}: {} layers, hidden {}, ", model_type, num_layers, hidden_size);
  if (is_mla())
    s += fmt::format("{} heads of multi-head latent attention (MLA: q LoRA {}, KV LoRA {}, qk "
                     "{} + {} rope, v {})", num_heads,
                     mla.q_lora_rank > 0 ? std::to_string(mla.q_lora_rank) : std::string("none"),
                     mla.kv_lora_rank, mla.qk_nope_head_dim, mla.qk_rope_head_dim, v_head_dim);
  else if (has_attention())
    s += fmt::format("{} heads / {} KV heads of {}", num_heads, num_kv_heads, head_dim);
  if (has_mamba()) {
    const auto n = std::count_if(layers.begin(), layers.end(), [](const LayerSpec& l) { return l.is_mamba; });
    const auto attn = std::count_if(layers.begin(), layers.end(),
                                    [](const LayerSpec& l) { return l.has_attention; });
    s = fmt::format("{}: {} layers ({} Mamba2, {} attention), hidden {}, Mamba2 {} heads of {}, "
                    "state {}, {} groups, conv {}, chunk {}", model_type, num_layers, n, attn,
                    hidden_size, mamba.heads, mamba.head_dim, mamba.state, mamba.groups,
                    mamba.conv_kernel, mamba.chunk_size);
    if (attn > 0)
      s += fmt::format(", attention {} heads / {} KV heads of {}", num_heads, num_kv_heads, head_dim);
  }
  s += ropes.empty() ? std::string(", no RoPE") : fmt::format(", RoPE {}", ropes[0].describe());
  int64_t window = 0;
  for (const auto& l : layers) window = std::max(window, l.sliding_window);
  if (window > 0) s += fmt::format(", sliding window {}", window);
  const auto moe = std::find_if(layers.begin(), layers.end(), [](const LayerSpec& l) { return l.is_moe; });
  if (moe != layers.end()) {
    const auto sparse = std::count_if(layers.begin(), layers.end(), [](const LayerSpec& l) { return l.is_moe; });
    const MoeSpec& m = moe->moe;
    const std::string routing =
        m.routing == Routing::sigmoid_grouped
            ? fmt::format("sigmoid in {} groups, best {}, x{}, ", m.n_group, m.topk_group,
                          m.routed_scaling)
            : std::string();
    const char* weights = m.routing == Routing::topk_softmax ? "softmax of the top logits"
                          : m.norm_topk_prob                  ? "renormalised"
                                                              : "not renormalised";
    s += fmt::format(", {} MoE layers of {} experts (top {}, {}{}{})", sparse, m.num_experts,
                     m.top_k, routing, weights, m.shared_intermediate > 0 ? ", shared expert" : "");
  }
  return s;
}

}  // namespace qf

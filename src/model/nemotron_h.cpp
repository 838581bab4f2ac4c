// Nemotron-H layer specs from config.json. Field names and defaults are NemotronHConfig's
// (transformers 5.24), legacy aliases included; what the engine computes for each block kind is
// in engine/model.cpp (attention and MLPs) and engine/mamba_mixer.cpp.
#include "model/nemotron_h.h"

#include "core/error.h"
#include "io/json_file.h"
#include "model/config_reader.h"

#include <fmt/format.h>

#include <array>
#include <cmath>

namespace qf {
namespace {

// A key under its current name or its legacy alias (NemotronHConfig.__post_init__ renames
// mamba_n_groups -> n_groups and so on).
const char* key_of(const ConfigReader& c, const char* name, const char* legacy) {
  return !c.has(name) && c.has(legacy) ? legacy : name;
}

// One character per layer: M Mamba2, * attention, - MLP, E MoE.
std::string layer_pattern(const ConfigReader& c, const std::string& label) {
  std::string from_list;
  const bool has_list = c.has("layers_block_type") || c.has("layer_types");
  if (has_list) {
    const char* key = c.has("layers_block_type") ? "layers_block_type" : "layer_types";
    const auto& list = c[key];
    if (!list.is_array() || list.empty()) fail("{}: '{}' is not a non-empty list", label, key);
    for (size_t i = 0; i < list.size(); ++i) {
      const std::string t = list[i].is_string() ? list[i].get<std::string>() : list[i].dump();
      // The config class writes linear_attention / full_attention; older modeling files and
      // vLLM say mamba / attention.
      if (t == "mamba" || t == "linear_attention") from_list += 'M';
      else if (t == "attention" || t == "full_attention") from_list += '*';
      else if (t == "mlp") from_list += '-';
      else if (t == "moe") from_list += 'E';
      else
        fail("{}: '{}'[{}] is {}; qforge knows mamba (linear_attention), attention "
             "(full_attention), mlp and moe", label, key, i, list[i].dump());
    }
  }
  if (!c.has("hybrid_override_pattern")) {
    if (!has_list) fail("{}: neither 'hybrid_override_pattern' nor 'layers_block_type' is set", label);
    return from_list;
  }
  if (!c["hybrid_override_pattern"].is_string())
    fail("{}: 'hybrid_override_pattern' is not a string", label);
  const std::string pattern = c["hybrid_override_pattern"].get<std::string>();
  if (pattern.empty()) fail("{}: 'hybrid_override_pattern' is empty", label);
  for (size_t i = 0; i < pattern.size(); ++i)
    if (std::string_view("M*-E").find(pattern[i]) == std::string_view::npos)
      fail("{}: 'hybrid_override_pattern'[{}] is '{}'; qforge knows M (Mamba2), * (attention), "
           "- (MLP) and E (MoE)", label, i, pattern[i]);
  if (has_list && from_list != pattern)
    fail("{}: 'hybrid_override_pattern' {} disagrees with the layer types list ({})", label,
         pattern, from_list);
  return pattern;
}

MambaSpec read_mamba(const ConfigReader& c, const std::string& label) {
  MambaSpec m;
  m.heads = c.positive_or("mamba_num_heads", 128, 1 << 16);
  m.head_dim = c.positive_or("mamba_head_dim", 64, 1 << 16);
  m.state = c.positive_or("ssm_state_size", 128, 1 << 16);
  const char* groups_key = key_of(c, "n_groups", "mamba_n_groups");
  m.groups = c.positive_or(groups_key, 8, 1 << 16);
  m.conv_kernel = c.positive_or(key_of(c, "conv_kernel", "mamba_d_conv"), 4, 1024);
  const char* chunk_key = key_of(c, "chunk_size", "mamba_chunk_size");
  if (c.has(chunk_key) && c[chunk_key].is_number_integer() && c[chunk_key].get<int64_t>() <= 0)
    fail("{}: '{}' is {}; the chunked scan needs a positive chunk size", label, chunk_key,
         c[chunk_key].get<int64_t>());
  m.chunk_size = c.positive_or(chunk_key, 128, 1 << 20);
  m.conv_bias = c.flag_or(key_of(c, "use_conv_bias", "mamba_conv_bias"), true);
  if (m.heads % m.groups != 0)
    fail("{}: '{}' {} does not divide 'mamba_num_heads' {}", label, groups_key, m.groups, m.heads);
  if (const std::string act = c.string_or("mamba_hidden_act", "silu"); act != "silu")
    fail("{}: 'mamba_hidden_act' is '{}'; qforge computes the Mamba convolution with silu", label,
         act);
  // The recurrent state is float32 here; a narrower cache would round it every step.
  if (const std::string t = c.string_or("mamba_ssm_cache_dtype", "float32"); t != "float32")
    fail("{}: 'mamba_ssm_cache_dtype' is '{}'; qforge keeps the SSM state in float32", label, t);
  // time_step_limit clamps dt in the kernels (vLLM, mamba_ssm). time_step_min / max / floor
  // only initialise dt_bias, except that transformers' torch prefill clamps dt at
  // time_step_min where its decode does not; qforge follows the kernels.
  m.dt_min = 0;
  m.dt_max = std::numeric_limits<double>::infinity();
  const char* limit_key = key_of(c, "time_step_limit", "mamba_dt_limit");
  if (c.has(limit_key)) {
    const auto& v = c[limit_key];
    auto bound = [&](size_t i) {
      const std::optional<double> x = v.is_array() && v.size() == 2 ? json_number(v[i]) : std::nullopt;
      if (!x) fail("{}: '{}' is {}, not [low, high]", label, limit_key, v.dump());
      return *x;
    };
    m.dt_min = bound(0);
    m.dt_max = bound(1);
    if (!(m.dt_min >= 0) || !(m.dt_max >= m.dt_min))
      fail("{}: '{}' is {}, not [low, high] with 0 <= low <= high", label, limit_key, v.dump());
  }
  return m;
}

MoeSpec read_moe(const ConfigReader& c, const std::string& label) {
  MoeSpec s;
  s.routing = Routing::sigmoid_grouped;
  s.num_experts = c.positive_or("n_routed_experts", 8, 1 << 16);
  s.top_k = c.positive_or("num_experts_per_tok", 2, 1 << 16);
  s.expert_intermediate = c.positive_or("moe_intermediate_size", 7688);
  s.shared_intermediate = c.positive_or("moe_shared_expert_intermediate_size", 7688);
  // transformers builds one shared expert of moe_shared_expert_intermediate_size whatever
  // n_shared_experts says; vLLM multiplies the width by it. They agree at 1 only.
  if (c.has("n_shared_experts") && c.positive("n_shared_experts", 1 << 10) != 1)
    fail("{}: 'n_shared_experts' is {}; transformers ignores it and vLLM widens the shared "
         "expert by it: refusing to guess", label, c["n_shared_experts"].dump());
  s.n_group = c.positive_or("n_group", 1, 1 << 16);
  s.topk_group = c.positive_or("topk_group", 1, 1 << 16);
  s.norm_topk_prob = c.flag_or("norm_topk_prob", true);
  const double scaling = c.number_or("routed_scaling_factor", 1.0);
  if (!(scaling > 0)) fail("{}: 'routed_scaling_factor' {} is not positive", label, scaling);
  s.routed_scaling = float(scaling);
  if (s.top_k > s.num_experts)
    fail("{}: 'num_experts_per_tok' {} is larger than 'n_routed_experts' {}", label, s.top_k,
         s.num_experts);
  check_group_routing(s, label);
  s.latent = c.has("moe_latent_size") ? c.positive("moe_latent_size") : 0;
  return s;
}

}  // namespace

Architecture nemotron_h_architecture(const nlohmann::json& config, const std::string& label) {
  const ConfigReader c(config, label);
  const std::string pattern = layer_pattern(c, label);
  auto uses = [&](char kind) { return pattern.find(kind) != std::string::npos; };
  if (c.has("num_hidden_layers") && c.positive("num_hidden_layers", 4096) != int64_t(pattern.size()))
    fail("{}: 'num_hidden_layers' {} differs from the {} layers of the layer pattern", label,
         c["num_hidden_layers"].dump(), pattern.size());

  Architecture a;
  a.model_type = std::string(kNemotronHModelType);
  a.hidden_size = c.positive("hidden_size");
  a.vocab_size = c.positive("vocab_size", int64_t(1) << 26);
  a.num_layers = int64_t(pattern.size());
  a.max_position_embeddings = c.positive_or("max_position_embeddings", 4096, int64_t(1) << 40);
  a.rms_norm_eps = c.number_or("layer_norm_epsilon", 1e-5);
  if (!(a.rms_norm_eps >= 0)) fail("{}: 'layer_norm_epsilon' {} is negative", label, a.rms_norm_eps);
  a.tie_word_embeddings = c.flag_or("tie_word_embeddings", false);
  a.num_heads = c.positive_or("num_attention_heads", 32, 65536);
  a.num_kv_heads = c.positive_or("num_key_value_heads", a.num_heads, 65536);
  a.head_dim = c.positive_or("head_dim", 128, 65536);
  a.v_head_dim = a.head_dim;
  a.attention_scale = float(std::pow(double(a.head_dim), -0.5));
  if (a.num_heads % a.num_kv_heads != 0)
    fail("{}: num_attention_heads {} is not a multiple of num_key_value_heads {}", label,
         a.num_heads, a.num_kv_heads);
  a.activation = Activation::relu2;
  a.gated_mlp = false;
  a.embed_name = "backbone.embeddings.weight";
  a.final_norm_name = "backbone.norm_f.weight";
  // No RoPE: the attention layers see no positions (neither transformers nor vLLM rotates).

  if (uses('*')) {
    // NemotronHAttention builds q/k/v/o without bias and its causal mask ignores the window.
    if (c.flag_or("attention_bias", false))
      fail("{}: 'attention_bias' is true; transformers' Nemotron-H attention has no biases",
           label);
    if (c.has("sliding_window"))
      fail("{}: 'sliding_window' is {}; transformers' Nemotron-H ignores it, other engines may "
           "not: refusing to guess", label, c["sliding_window"].dump());
  }
  const bool mlp_bias = c.flag_or("mlp_bias", false);
  if (uses('-') || uses('E')) {
    if (const std::string act = c.string_or("mlp_hidden_act", "relu2"); act != "relu2")
      fail("{}: 'mlp_hidden_act' is '{}'; qforge computes Nemotron-H's MLPs with relu2", label,
           act);
  }
  if (uses('-')) {
    if (c.has("intermediate_size") && !c["intermediate_size"].is_number_integer())
      fail("{}: 'intermediate_size' is {}; per-layer MLP widths are not supported", label,
           c["intermediate_size"].dump());
    a.intermediate_size = c.positive_or("intermediate_size", 21504);
  }
  if (uses('M')) a.mamba = read_mamba(c, label);
  MoeSpec moe;
  if (uses('E')) moe = read_moe(c, label);
  const bool proj_bias = c.flag_or("use_bias", false);

  const int64_t q_out = a.num_heads * a.head_dim, kv_out = a.num_kv_heads * a.head_dim;
  for (int layer = 0; layer < a.num_layers; ++layer) {
    LayerSpec spec;
    spec.slot.fill(-1);
    spec.rope = -1;
    const std::string p = fmt::format("backbone.layers.{}.", layer);
    const std::string mixer = p + "mixer.";
    const char kind = pattern[size_t(layer)];
    spec.is_mamba = kind == 'M';
    spec.has_attention = kind == '*';
    spec.has_mlp = kind == '-' || kind == 'E';
    spec.norms[size_t(spec.has_mlp ? NormSlot::mlp_in : NormSlot::attn_in)] = p + "norm.weight";
    const int fold = spec.has_mlp ? int(NormSlot::mlp_in) : int(NormSlot::attn_in);

    auto add = [&](const std::string& name, LinearRole role, LayerInput input, int64_t in,
                   int64_t out, bool bias, int fold_norm, int expert = kNoExpert) {
      LinearModule m;
      m.name = name;
      m.layer = layer;
      m.role = role;
      m.input = input;
      m.expert = expert;
      m.in_features = in;
      m.out_features = out;
      m.bias = bias;
      m.fold_norm = fold_norm;
      m.slot = int(spec.linears.size());
      if (expert == kNoExpert) spec.slot[size_t(role)] = m.slot;
      spec.linears.push_back(a.linears.size());
      a.linears.push_back(std::move(m));
      return a.linears.back().slot;
    };
    switch (kind) {
      case 'M': {
        const MambaSpec& m = a.mamba;
        add(mixer + "in_proj", LinearRole::in_proj, LayerInput::attn_norm, a.hidden_size,
            m.in_proj_rows(), proj_bias, fold);
        add(mixer + "out_proj", LinearRole::out_proj, LayerInput::ssm_out, m.inner(),
            a.hidden_size, proj_bias, -1);
        spec.mamba = {mixer + "conv1d.weight", m.conv_bias ? mixer + "conv1d.bias" : "",
                      mixer + "dt_bias", mixer + "A_log", mixer + "D", mixer + "norm.weight"};
        break;
      }
      case '*': {
        std::vector<size_t> qkv;
        for (auto [role, out] : {std::pair{LinearRole::q_proj, q_out}, {LinearRole::k_proj, kv_out},
                                 {LinearRole::v_proj, kv_out}}) {
          add(mixer + std::string(linear_role_name(role)), role, LayerInput::attn_norm,
              a.hidden_size, out, false, fold);
          qkv.push_back(a.linears.size() - 1);
        }
        add(mixer + "o_proj", LinearRole::o_proj, LayerInput::attn_out, q_out, a.hidden_size,
            false, -1);
        for (size_t i : qkv) a.linears[i].group = int(a.fused_groups.size());
        a.fused_groups.push_back(std::move(qkv));
        break;
      }
      case '-':
        add(mixer + "up_proj", LinearRole::up_proj, LayerInput::ffn_norm, a.hidden_size,
            a.intermediate_size, mlp_bias, fold);
        add(mixer + "down_proj", LinearRole::down_proj, LayerInput::mlp_act, a.intermediate_size,
            a.hidden_size, mlp_bias, -1);
        break;
      case 'E': {
        spec.is_moe = true;
        spec.moe = moe;
        MoeSpec& s = spec.moe;
        s.router = mixer + "gate";
        s.score_bias = mixer + "gate.e_score_correction_bias";
        // The router reads the normed input too, so AWQ / SmoothQuant keep scales beside the
        // Linears instead of folding them into the norm.
        const int64_t width = s.latent > 0 ? s.latent : a.hidden_size;
        if (s.latent > 0)
          s.fc1_latent = add(mixer + "fc1_latent_proj", LinearRole::fc1_latent_proj,
                             LayerInput::ffn_norm, a.hidden_size, s.latent, mlp_bias, -1);
        for (int64_t e = 0; e < s.num_experts; ++e) {
          const std::string where = fmt::format("{}experts.{}.", mixer, e);
          const int up = add(where + "up_proj", LinearRole::up_proj, LayerInput::ffn_norm, width,
                             s.expert_intermediate, false, -1, int(e));
          const int down = add(where + "down_proj", LinearRole::down_proj, LayerInput::mlp_act,
                               s.expert_intermediate, width, false, -1, int(e));
          s.experts.push_back({-1, up, down});
        }
        const int up = add(mixer + "shared_experts.up_proj", LinearRole::up_proj,
                           LayerInput::ffn_norm, a.hidden_size, s.shared_intermediate, mlp_bias,
                           -1, kSharedExpert);
        const int down = add(mixer + "shared_experts.down_proj", LinearRole::down_proj,
                             LayerInput::mlp_act, s.shared_intermediate, a.hidden_size, mlp_bias,
                             -1, kSharedExpert);
        s.shared = {-1, up, down};
        if (s.latent > 0)
          s.fc2_latent = add(mixer + "fc2_latent_proj", LinearRole::fc2_latent_proj,
                             LayerInput::moe_latent, s.latent, a.hidden_size, mlp_bias, -1);
        break;
      }
    }
    a.layers.push_back(std::move(spec));
  }
  return a;
}

}  // namespace qf

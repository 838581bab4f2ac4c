// Decoder architectures described as data: from a Hugging Face config.json to per-layer specs
// (the Linear modules a layer holds, the input each one reads, the norms around the blocks, the
// attention settings) and the groups of modules that engines fuse (q/k/v, gate/up) and that
// must therefore share scales and decisions. Tensor-name templates live here only: the engine,
// calibration, the quantization pipeline, exporters and the inspector iterate these specs.
#pragma once

#include "model/rope.h"

#include <nlohmann/json.hpp>

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace qf {

// What a Linear computes in its block. qkv_proj and gate_up_proj are stored fused on disk
// (Phi-3): one module whose output rows are q, k, v (or gate, up) one after the other.
// Multi-head latent attention (DeepSeek-V3) has q_a_proj (hidden -> q latent) and q_b_proj
// (q latent -> queries) where q_lora_rank is set, else q_proj; kv_a_proj_with_mqa (hidden ->
// kv latent and the shared rope key) and kv_b_proj (kv latent -> per-head k_nope and v).
// A Mamba2 mixer (Nemotron-H) has in_proj (hidden -> [z | xBC | dt]) and out_proj (inner ->
// hidden); Nemotron-H's latent MoE has fc1_latent_proj (hidden -> latent, the experts' input)
// and fc2_latent_proj (latent -> hidden, on the experts' weighted sum).
enum class LinearRole : uint8_t {
  q_proj, k_proj, v_proj, qkv_proj, o_proj, gate_proj, up_proj, gate_up_proj, down_proj,
  q_a_proj, q_b_proj, kv_a_proj_with_mqa, kv_b_proj, in_proj, out_proj, fc1_latent_proj,
  fc2_latent_proj
};
inline constexpr int kLinearRoles = 17;
std::string_view linear_role_name(LinearRole role);

// The distinct Linear inputs of a decoder layer: four in every family, two more with
// multi-head latent attention, two more in Nemotron-H's Mamba and latent-MoE layers.
enum class LayerInput : uint8_t {
  // q/k/v: the attention block's input (after its pre-norm, where it has one); a Mamba
  // layer's in_proj reads it too (its mixer's normed input)
  attn_norm,
  attn_out,   // o_proj: the attention output
  ffn_norm,   // gate/up: the MLP block's input (after its pre-norm, where it has one)
  mlp_act,    // down_proj: act(gate) * up
  q_latent,   // q_b_proj: q_a_layernorm(q_a_proj(x)) [q_lora_rank]
  kv_latent,  // kv_b_proj: kv_a_layernorm(the latent part of kv_a_proj_with_mqa(x)) [kv_lora_rank]
  ssm_out,    // out_proj: the gated, group-normed SSM output [mamba inner]
  moe_latent, // fc2_latent_proj: the routed experts' weighted sum in the latent space
};
inline constexpr int kLayerInputs = 8;

// The norms a layer may hold, by position.
enum class NormSlot : uint8_t {
  attn_in,   // before attention (input_layernorm)
  attn_out,  // on the attention output, before the residual add (Gemma 3, OLMo 2)
  mlp_in,    // before the MLP (post_attention_layernorm in Llama)
  mlp_out,   // on the MLP output, before the residual add (Gemma 3, OLMo 2)
  q,         // on the queries (per head, or over the whole projection)
  k,         // on the keys
  q_a,       // MLA: q_a_layernorm on the q latent [q_lora_rank]
  kv_a,      // MLA: kv_a_layernorm on the kv latent [kv_lora_rank]
};
inline constexpr int kNormSlots = 8;

enum class NormStyle : uint8_t { plain, one_plus };  // x * w, or x * (1 + w) (Gemma)
enum class QkNorm : uint8_t { none, per_head, whole };
// The gated MLP's activation act(gate) * up. clamped_swiglu is gpt-oss's experts:
// g = min(gate, limit), u = clamp(up, -limit, limit), (u + 1) * g * sigmoid(alpha * g)
// (Architecture::swiglu_limit / swiglu_alpha); the config's hidden_act is not read for it.
// relu2 (relu(x)^2) is Nemotron-H's, whose MLPs are not gated: down(relu(up(x))^2).
enum class Activation : uint8_t { silu, gelu_tanh, gelu, clamped_swiglu, relu2 };

// Which expert of a mixture-of-experts block a Linear belongs to: a routed expert's index, or
// one of these.
inline constexpr int kNoExpert = -1;      // attention, a dense MLP
inline constexpr int kSharedExpert = -2;  // the always-active shared expert (Qwen2-MoE, DeepSeek)

struct LinearModule {
  std::string name;  // HF module prefix, e.g. "model.layers.3.self_attn.q_proj"
  int layer = 0;
  LinearRole role = LinearRole::q_proj;
  // For a routed expert (expert >= 0), gate/up read the rows of ffn_norm routed to it and down
  // reads its own mlp_act; a shared expert reads every row of ffn_norm.
  LayerInput input = LayerInput::attn_norm;
  int expert = kNoExpert;
  int64_t in_features = 0;
  int64_t out_features = 0;
  int group = -1;     // index into Architecture::fused_groups, -1 if not fused
  int slot = 0;       // position in its layer's LayerSpec::linears (and LayerWeights::linears)
  bool bias = false;  // the checkpoint holds `name.bias` [out_features]
  // The norm whose weight AWQ / SmoothQuant may divide by the input scales (the norm right
  // before this Linear, in the plain x * w style), or -1 when there is none.
  int fold_norm = -1;  // a NormSlot
  std::string weight_name() const { return name + ".weight"; }
};

// How a router turns its logits into the experts of a token and their weights.
enum class Routing : uint8_t {
  // p = softmax(logits) over all experts, the top k kept, divided by their sum when
  // norm_topk_prob (Mixtral always; Qwen2-MoE / Qwen3-MoE from config.json).
  softmax_topk,
  // DeepSeek-V3: s = sigmoid(logits), c = s + score bias; the experts fall in n_group groups
  // of consecutive indices, a group scores the sum of its two best c, the topk_group best
  // groups stay; the top k of c among them are chosen, weighted by their unbiased s (divided
  // by their sum + 1e-20 when norm_topk_prob), times routed_scaling.
  sigmoid_grouped,
  // The top k of the logits (router bias included), then softmax over those k only (gpt-oss).
  topk_softmax,
};

// The mixture-of-experts block that replaces a layer's MLP.
struct MoeSpec {
  int64_t num_experts = 0;
  int64_t top_k = 0;
  int64_t expert_intermediate = 0;  // rows of each expert's gate / up
  Routing routing = Routing::softmax_topk;
  bool norm_topk_prob = false;
  // sigmoid_grouped: the groups, the groups kept, the weights' multiplier and the tensor of
  // the score bias [num_experts] (float, never quantized: it only steers the choice).
  int64_t n_group = 1, topk_group = 1;
  float routed_scaling = 1.f;
  std::string score_bias;
  std::string router;  // module of the router Linear [num_experts, hidden], never quantized
  bool router_bias = false;  // the router has `router.bias` [num_experts] (gpt-oss)
  // Each expert's gate and up are one Linear (gate_up_proj, [2 x intermediate, hidden]) whose
  // output rows alternate gate, up, gate, up... (gpt-oss): slots {-1, gate_up, down}.
  bool gate_up_interleaved = false;
  // The shared expert (absent: shared_intermediate 0; DeepSeek's n_shared_experts are one MLP
  // of n times the width) and, when present, its gate, a [1, hidden] Linear whose sigmoid
  // scales the shared expert's output (Qwen2-MoE; none: added unweighted); never quantized.
  int64_t shared_intermediate = 0;
  std::string shared_gate;
  // Positions in LayerSpec::linears of gate, up, down: per routed expert, and of the shared
  // expert (-1 when absent). With gate_up_interleaved: {-1, gate_up_proj, down_proj}; not
  // gated (Architecture::gated_mlp false): {-1, up_proj, down_proj}.
  std::vector<std::array<int, 3>> experts;
  std::array<int, 3> shared{-1, -1, -1};
  // Nemotron-H's latent MoE: the routed experts run in a smaller space, entered through
  // fc1_latent_proj and left through fc2_latent_proj (their slots; -1: no latent, the experts
  // read and write the hidden state). The router and the shared expert read the hidden state.
  int64_t latent = 0;
  int fc1_latent = -1, fc2_latent = -1;
};

// A Mamba2 mixer's tensors other than its Linears (never quantized: conv1d [conv_dim, 1, K]
// and bias [conv_dim], dt_bias / A_log / D [heads], the gated norm's weight [inner]).
struct MambaTensors {
  std::string conv_weight, conv_bias, dt_bias, a_log, d, norm;
};

// Mamba2 (SSD) mixer settings shared by every Mamba layer (Nemotron-H). Per token:
// [z | xBC | dt] = in_proj(x); xBC = silu(causal depthwise conv1d(xBC)); x, B, C = split(xBC);
// dt = clamp(softplus(dt + dt_bias), dt_min, dt_max); the state of each head [head_dim, state]
// decays by exp(dt * -exp(A_log)) and takes dt * x ⊗ B; y = state · C + D * x; out_proj of the
// gated norm of y (y * silu(z), normalised per group of inner / groups channels).
struct MambaSpec {
  int64_t heads = 0, head_dim = 0, groups = 0, state = 0, conv_kernel = 0, chunk_size = 0;
  bool conv_bias = true;
  double dt_min = 0, dt_max = 0;  // time_step_limit
  int64_t inner() const { return heads * head_dim; }
  int64_t conv_dim() const { return inner() + 2 * groups * state; }
  // in_proj's output rows: z [inner], xBC [conv_dim], dt [heads].
  int64_t in_proj_rows() const { return inner() + conv_dim() + heads; }
};

// The blocks of a layer in order: attention (or a Mamba mixer), then the MLP or MoE. Every
// layer of the dense and MoE families holds attention and an MLP; a Nemotron-H layer holds one
// of the four (its one norm sits in attn_in before attention or Mamba, in mlp_in before an MLP).
struct LayerSpec {
  bool has_attention = true;
  bool has_mlp = true;          // a dense MLP, or the MoE block when is_moe
  bool is_mamba = false;        // a Mamba2 mixer in attention's place (Architecture::mamba)
  MambaTensors mamba;
  std::vector<size_t> linears;  // indices into Architecture::linears, in compute order
  // For each LinearRole, the position in `linears` of the layer's attention or dense MLP
  // Linear of that role, or -1 (an MoE layer's experts are in `moe`).
  std::array<int, kLinearRoles> slot{};
  // Tensor names of the norms present (empty: absent).
  std::array<std::string, kNormSlots> norms;
  int rope = 0;                // index into Architecture::ropes; -1: no positional encoding
  int64_t sliding_window = 0;  // tokens a query sees, itself included; 0: all earlier tokens
  bool is_moe = false;         // the MLP is `moe`
  // Tensor name of the per-head attention sinks [num_heads] (gpt-oss: one extra logit per
  // head in the attention softmax, whose probability is dropped); empty: none.
  std::string sinks;
  MoeSpec moe;

  int slot_of(LinearRole r) const { return slot[size_t(r)]; }
  bool has(NormSlot s) const { return !norms[size_t(s)].empty(); }
  const std::string& norm(NormSlot s) const { return norms[size_t(s)]; }
};

// Multi-head latent attention (DeepSeek-V3). Per token: q = q_b_proj(q_a_layernorm(q_a_proj(x)))
// (or q_proj(x)) as [heads, nope + rope]; kv_a_proj_with_mqa(x) = [latent | k_rot];
// kv_b_proj(kv_a_layernorm(latent)) as [heads, nope + v_head_dim] = [k_nope | v]; RoPE on the
// last `rope` dims of each query head and on k_rot, which every head shares.
struct MlaSpec {
  int64_t q_lora_rank = 0;   // 0: q_proj reads the hidden state directly
  int64_t kv_lora_rank = 0;
  int64_t qk_nope_head_dim = 0;
  int64_t qk_rope_head_dim = 0;
  // The pairs RoPE rotates: (2i, 2i + 1), written back de-interleaved (DeepSeek's layout,
  // rope_interleave), or NeoX halves.
  bool rope_interleave = true;
  // q_a_layernorm / kv_a_layernorm are built without eps in transformers: 1e-6 whatever
  // rms_norm_eps says.
  double latent_norm_eps = 1e-6;
};

// What config.json does not say but the stored tensors do.
struct ArchitectureOptions {
  // gpt-oss experts stored as separate gate_proj / up_proj per expert (llm-compressor's
  // linearised experts: gate = the even rows of gate_up_proj, up = the odd) instead of one
  // gate_up_proj whose rows alternate (model/expert_tensors: checkpoint_architecture).
  bool gpt_oss_split_gate_up = false;
};

struct Architecture {
  std::string model_type;  // the family's model_type, e.g. "llama", "gemma3_text"
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_layers = 0;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;
  // The size of each query and key head, and of each value head (the attention output is
  // num_heads * v_head_dim wide). Equal except with MLA, where head_dim is qk_nope_head_dim +
  // qk_rope_head_dim and v_head_dim is the config's (config.json's `head_dim` there is the
  // rope dimension, which the RoPE spec holds, not the head size).
  int64_t head_dim = 0;
  int64_t v_head_dim = 0;
  int64_t vocab_size = 0;
  int64_t max_position_embeddings = 0;
  double rms_norm_eps = 1e-6;
  bool tie_word_embeddings = false;

  // The math around the Linears.
  NormStyle norm_style = NormStyle::plain;
  QkNorm qk_norm = QkNorm::none;
  Activation activation = Activation::silu;
  float embedding_scale = 1.f;   // token embeddings are multiplied by it (Gemma: sqrt(hidden))
  float attention_scale = 0.f;   // q.k multiplier (head_dim^-0.5 unless the family sets it)
  float residual_scale = 1.f;    // block outputs are multiplied by it before the add (Granite)
  float logits_divisor = 1.f;    // logits are divided by it (Granite logits_scaling)
  float attn_softcap = 0.f;      // tanh soft-capping of attention scores; 0: none
  float final_softcap = 0.f;     // of the logits; 0: none
  float swiglu_limit = 0.f;      // Activation::clamped_swiglu (gpt-oss swiglu_limit)
  float swiglu_alpha = 0.f;      // Activation::clamped_swiglu (gpt-oss swiglu_alpha)

  // The MLP multiplies act(gate) by up; false: act(up) alone (Nemotron-H, MLPs and experts).
  bool gated_mlp = true;

  MlaSpec mla;                   // kv_lora_rank 0: not MLA
  MambaSpec mamba;               // heads 0: no Mamba layers
  std::vector<RopeSpec> ropes;   // one per distinct layer type (Gemma 3: local and global)
  std::vector<LayerSpec> layers;
  std::vector<LinearModule> linears;              // layer by layer, in compute order
  std::vector<std::vector<size_t>> fused_groups;  // indices into `linears`

  // Tensor names outside the layers.
  std::string embed_name = "model.embed_tokens.weight";
  std::string embed_module() const;  // embed_name without ".weight"
  std::string final_norm_name = "model.norm.weight";
  std::string head_module = "lm_head";
  std::string head_name = "lm_head.weight";

  // Modules that are never quantized by default and are always listed as excluded in an
  // exported quantization config: the output head, the embedding, and the MoE routers and
  // shared-expert gates (engines build them unquantized).
  std::vector<std::string> never_quantized_modules() const;
  bool has_moe() const;
  bool is_mla() const { return mla.kv_lora_rank > 0; }
  bool has_mamba() const { return mamba.heads > 0; }
  bool has_attention() const;  // any layer attends (needs a KV cache)
  // Elements of the weight of norm `slot` (hidden; per-head or whole q/k norms; MLA latents).
  int64_t norm_size(NormSlot slot) const;
  // The epsilon of norm `slot` (rms_norm_eps, except MLA's latent norms).
  double norm_eps(NormSlot slot) const;

  // Builds the description from a parsed config.json. Throws qf::Error starting with `label`
  // for an unsupported architecture, a missing or invalid field, or a field that changes the
  // math in a way this code does not compute (naming the field and its value).
  static Architecture from_config(const nlohmann::json& config, const std::string& label,
                                  const ArchitectureOptions& options = {});

  // A short description of the features a model uses, for summaries and errors.
  std::string describe() const;
};

// Names of the supported model types, for messages.
std::string supported_model_types();

}  // namespace qf

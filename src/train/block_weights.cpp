// Checks a layer is a plain Llama block and copies its weights out of the engine's views.
#include "train/block_weights.h"

#include "core/error.h"
#include "kernels/linear.h"

namespace qf {

template <typename T>
BlockWeights<T> BlockWeights<T>::zeros(const BlockShape& s) {
  BlockWeights<T> w;
  w.attn_norm.assign(size_t(s.hidden), T(0));
  w.mlp_norm.assign(size_t(s.hidden), T(0));
  w.q.assign(size_t(s.q_width() * s.hidden), T(0));
  w.k.assign(size_t(s.kv_width() * s.hidden), T(0));
  w.v.assign(size_t(s.kv_width() * s.hidden), T(0));
  w.o.assign(size_t(s.hidden * s.q_width()), T(0));
  w.gate.assign(size_t(s.intermediate * s.hidden), T(0));
  w.up.assign(size_t(s.intermediate * s.hidden), T(0));
  w.down.assign(size_t(s.hidden * s.intermediate), T(0));
  return w;
}

namespace {

constexpr LinearRole kRoles[] = {LinearRole::q_proj,    LinearRole::k_proj,  LinearRole::v_proj,
                                 LinearRole::o_proj,    LinearRole::gate_proj,
                                 LinearRole::up_proj,   LinearRole::down_proj};

}  // namespace

BlockShape block_shape(const Architecture& a, int64_t layer) {
  if (layer < 0 || layer >= int64_t(a.layers.size()))
    fail("{}: layer {} out of range [0, {})", a.model_type, layer, a.layers.size());
  const LayerSpec& spec = a.layers[size_t(layer)];
  auto refuse = [&](const char* what) {
    fail("{}: layer {}: {} is not differentiated by the training code (plain Llama blocks only)",
         a.model_type, layer, what);
  };
  if (!spec.has_attention || !spec.has_mlp) refuse("a layer without attention or MLP");
  if (spec.is_mamba) refuse("a Mamba mixer");
  if (spec.is_moe) refuse("a mixture of experts");
  if (a.is_mla()) refuse("multi-head latent attention");
  if (a.norm_style != NormStyle::plain) refuse("the x*(1+w) norm style");
  if (a.qk_norm != QkNorm::none) refuse("a q/k norm");
  if (spec.has(NormSlot::attn_out) || spec.has(NormSlot::mlp_out)) refuse("a post-norm");
  if (!spec.has(NormSlot::attn_in) || !spec.has(NormSlot::mlp_in)) refuse("a missing pre-norm");
  if (a.activation != Activation::silu || !a.gated_mlp) refuse("an MLP other than SiLU-gated");
  if (spec.sliding_window > 0) refuse("a sliding window");
  if (!spec.sinks.empty()) refuse("attention sinks");
  if (a.attn_softcap != 0.f) refuse("attention soft-capping");
  if (a.residual_scale != 1.f) refuse("residual scaling");
  if (spec.rope < 0) refuse("attention without RoPE");
  if (a.v_head_dim != a.head_dim) refuse("a value head narrower than the query head");
  for (LinearRole r : kRoles) {
    if (spec.slot_of(r) < 0) refuse("a fused or missing projection");
    if (a.linears[spec.linears[size_t(spec.slot_of(r))]].bias) refuse("a projection bias");
  }
  BlockShape s;
  s.hidden = a.hidden_size;
  s.heads = a.num_heads;
  s.kv_heads = a.num_kv_heads;
  s.head_dim = a.head_dim;
  s.intermediate = a.intermediate_size;
  s.eps = a.rms_norm_eps;
  s.attention_scale = a.attention_scale;
  return s;
}

template <typename T>
BlockWeights<T> block_weights(const ModelWeights& mw, int64_t layer) {
  const Architecture& a = mw.arch;
  block_shape(a, layer);
  const LayerSpec& spec = a.layers[size_t(layer)];
  const LayerWeights& L = mw.layers[size_t(layer)];
  auto matrix = [&](LinearRole r) {
    const EngineLinear& e = L.linear(spec, r);
    if (!e.pre_scale.empty() || e.act != ActQuant::none)
      fail("{}: its input is pre-scaled or quantized; the training code takes plain Linears",
           e.name);
    std::vector<float> f(size_t(e.w.rows * e.w.cols));
    dequantize_weight_rows(e.w, 0, e.w.rows, f.data());
    return std::vector<T>(f.begin(), f.end());
  };
  auto norm = [&](NormSlot s) {
    const std::vector<float>& w = L.norm(s);
    return std::vector<T>(w.begin(), w.end());
  };
  BlockWeights<T> w;
  w.attn_norm = norm(NormSlot::attn_in);
  w.mlp_norm = norm(NormSlot::mlp_in);
  w.q = matrix(LinearRole::q_proj);
  w.k = matrix(LinearRole::k_proj);
  w.v = matrix(LinearRole::v_proj);
  w.o = matrix(LinearRole::o_proj);
  w.gate = matrix(LinearRole::gate_proj);
  w.up = matrix(LinearRole::up_proj);
  w.down = matrix(LinearRole::down_proj);
  return w;
}

template struct BlockWeights<float>;
template struct BlockWeights<double>;
template BlockWeights<float> block_weights<float>(const ModelWeights&, int64_t);
template BlockWeights<double> block_weights<double>(const ModelWeights&, int64_t);

}  // namespace qf

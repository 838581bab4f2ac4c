// The decoder forward pass: embedding, then per layer RMSNorm -> q/k/v -> (Qwen3 q/k norm) ->
// RoPE -> causal grouped-query attention over the KV cache -> o_proj -> residual, RMSNorm ->
// SiLU-gated MLP -> residual; final RMSNorm and the output head.
#include "engine/model.h"

#include "core/error.h"
#include "core/thread_pool.h"

#include <algorithm>
#include <cmath>

namespace qf {

std::unique_ptr<Model> Model::load(const std::filesystem::path& dir, const ModelOptions& opt) {
  return std::make_unique<Model>(ModelWeights::load(dir), opt);
}

Model::Model(ModelWeights weights, const ModelOptions& opt)
    : w_(std::move(weights)),
      max_seq_(opt.max_seq > 0 ? std::min(opt.max_seq, w_.arch.max_position_embeddings)
                               : w_.arch.max_position_embeddings),
      pool_(std::make_unique<ThreadPool>(opt.threads > 0 ? opt.threads
                                                         : ThreadPool::hardware_threads())),
      rope_(w_.arch.head_dim, max_seq_, w_.arch.rope_theta) {
  const int64_t kv_dim = w_.arch.num_kv_heads * w_.arch.head_dim;
  key_cache_.assign(size_t(w_.arch.num_layers * max_seq_ * kv_dim), 0.f);
  value_cache_.assign(key_cache_.size(), 0.f);
}

Model::~Model() = default;

void Model::ensure_capacity(int64_t n) {
  if (n <= capacity_) return;
  const Architecture& a = w_.arch;
  const int64_t q_dim = a.num_heads * a.head_dim, kv_dim = a.num_kv_heads * a.head_dim;
  const auto sz = [n](int64_t d) { return size_t(n * d); };
  x_.resize(sz(a.hidden_size));
  xb_.resize(sz(std::max(a.hidden_size, q_dim)));
  q_.resize(sz(q_dim));
  k_.resize(sz(kv_dim));
  v_.resize(sz(kv_dim));
  att_.resize(sz(q_dim));
  hb_.resize(sz(a.intermediate_size));
  hb2_.resize(sz(a.intermediate_size));
  scaled_.resize(sz(std::max({a.hidden_size, q_dim, a.intermediate_size})));
  actq_.resize(scaled_.size());
  capacity_ = n;
}

void Model::linear(const EngineLinear& L, const float* x, int64_t n, float* y) {
  const int64_t in = L.w.cols;
  if (!L.pre_scale.empty()) {
    for (int64_t t = 0; t < n; ++t)
      for (int64_t c = 0; c < in; ++c) scaled_[size_t(t * in + c)] = x[t * in + c] * L.pre_scale[size_t(c)];
    x = scaled_.data();
  }
  if (L.act != ActQuant::none) {
    // Simulated W4A4 / W8A8: the input is quantized and dequantized, row by row (NVFP4 blocks
    // of 16 never straddle rows since in % 16 == 0 for NVFP4 weights).
    float* q = actq_.data();
    std::copy_n(x, n * in, q);
    pool_->parallel_for(n, [&](int64_t t) {
      fake_quantize_activations(L.act, L.input_scale, q + t * in, in);
    });
    x = q;
  }
  linear_forward(L.w, x, n, y, pool_.get());
  if (!L.bias.empty())
    for (int64_t t = 0; t < n; ++t)
      for (int64_t r = 0; r < L.w.rows; ++r) y[t * L.w.rows + r] += L.bias[size_t(r)];
}

void Model::forward(std::span<const int32_t> tokens, int64_t pos, float* logits, bool all_logits) {
  const Architecture& a = w_.arch;
  const int64_t n = int64_t(tokens.size());
  if (n == 0) return;
  if (pos < 0 || pos + n > max_seq_)
    fail("context of {} tokens exceeds the model's limit of {}", pos + n, max_seq_);
  ensure_capacity(n);
  const int64_t dim = a.hidden_size;
  const float eps = float(a.rms_norm_eps);

  for (int64_t t = 0; t < n; ++t) {
    if (tokens[size_t(t)] < 0 || tokens[size_t(t)] >= a.vocab_size)
      fail("token id {} out of range [0, {})", tokens[size_t(t)], a.vocab_size);
    w_.embed.row(tokens[size_t(t)], x_.data() + t * dim);
  }

  for (int64_t l = 0; l < a.num_layers; ++l) run_layer(l, w_.layers[size_t(l)], pos, n, nullptr);

  const int64_t first = all_logits ? 0 : n - 1;
  for (int64_t t = first; t < n; ++t)
    rmsnorm(x_.data() + t * dim, w_.final_norm.data(), dim, eps, xb_.data() + (t - first) * dim);
  linear(w_.lm_head, xb_.data(), n - first, logits);
}

void Model::run_layer(int64_t l, const LayerWeights& L, int64_t pos, int64_t n,
                      LayerObserver* obs) {
  const Architecture& a = w_.arch;
  const int64_t dim = a.hidden_size, hd = a.head_dim, nh = a.num_heads, nkv = a.num_kv_heads;
  const int64_t q_dim = nh * hd, kv_dim = nkv * hd, hidden = a.intermediate_size;
  const int64_t kv_mul = nh / nkv;
  const float eps = float(a.rms_norm_eps);
  const float att_scale = 1.0f / std::sqrt(float(hd));
  for (int64_t t = 0; t < n; ++t)
    rmsnorm(x_.data() + t * dim, L.attn_norm.data(), dim, eps, xb_.data() + t * dim);
  if (obs) obs->linear_input(LayerInput::attn_norm, xb_.data(), n, dim);
  linear(L.q, xb_.data(), n, q_.data());
  linear(L.k, xb_.data(), n, k_.data());
  linear(L.v, xb_.data(), n, v_.data());

  float* kc = key_cache_.data() + l * max_seq_ * kv_dim;
  float* vc = value_cache_.data() + l * max_seq_ * kv_dim;
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t h = 0; h < nh; ++h) {
      float* qh = q_.data() + t * q_dim + h * hd;
      if (a.qk_norm) rmsnorm(qh, L.q_norm.data(), hd, eps, qh);
      rope_.apply(qh, pos + t);
    }
    for (int64_t h = 0; h < nkv; ++h) {
      float* kh = k_.data() + t * kv_dim + h * hd;
      if (a.qk_norm) rmsnorm(kh, L.k_norm.data(), hd, eps, kh);
      rope_.apply(kh, pos + t);
    }
  }
  if (obs) obs->key_value(k_.data(), v_.data(), n, kv_dim);
  std::copy_n(k_.data(), n * kv_dim, kc + pos * kv_dim);
  std::copy_n(v_.data(), n * kv_dim, vc + pos * kv_dim);
  if (L.k_scale > 0) fake_quantize_fp8(L.k_scale, kc + pos * kv_dim, n * kv_dim);
  if (L.v_scale > 0) fake_quantize_fp8(L.v_scale, vc + pos * kv_dim, n * kv_dim);

  // Causal attention, one task per (token, head); each writes its own slice of att_.
  pool_->parallel_for(n * nh, [&](int64_t task) {
    const int64_t t = task / nh, h = task % nh;
    const int64_t len = pos + t + 1;
    const float* qh = q_.data() + t * q_dim + h * hd;
    const int64_t kvh = h / kv_mul;
    std::vector<float> scores(static_cast<size_t>(len));
    for (int64_t p = 0; p < len; ++p) {
      const float* kp = kc + p * kv_dim + kvh * hd;
      float s = 0.f;
      for (int64_t i = 0; i < hd; ++i) s += qh[i] * kp[i];
      scores[size_t(p)] = s * att_scale;
    }
    softmax(scores.data(), len);
    float* out = att_.data() + t * q_dim + h * hd;
    std::fill_n(out, hd, 0.f);
    for (int64_t p = 0; p < len; ++p) {
      const float* vp = vc + p * kv_dim + kvh * hd;
      const float s = scores[size_t(p)];
      for (int64_t i = 0; i < hd; ++i) out[i] += s * vp[i];
    }
  });

  if (obs) obs->linear_input(LayerInput::attn_out, att_.data(), n, q_dim);
  linear(L.o, att_.data(), n, xb_.data());
  for (int64_t i = 0; i < n * dim; ++i) x_[size_t(i)] += xb_[size_t(i)];

  for (int64_t t = 0; t < n; ++t)
    rmsnorm(x_.data() + t * dim, L.ffn_norm.data(), dim, eps, xb_.data() + t * dim);
  if (obs) obs->linear_input(LayerInput::ffn_norm, xb_.data(), n, dim);
  linear(L.gate, xb_.data(), n, hb_.data());
  linear(L.up, xb_.data(), n, hb2_.data());
  silu_mul(hb_.data(), hb2_.data(), n * hidden);
  if (obs) obs->linear_input(LayerInput::mlp_act, hb_.data(), n, hidden);
  linear(L.down, hb_.data(), n, xb_.data());
  for (int64_t i = 0; i < n * dim; ++i) x_[size_t(i)] += xb_[size_t(i)];
}

void Model::embed(std::span<const int32_t> tokens, float* x) const {
  const Architecture& a = w_.arch;
  for (size_t t = 0; t < tokens.size(); ++t) {
    if (tokens[t] < 0 || tokens[t] >= a.vocab_size)
      fail("token id {} out of range [0, {})", tokens[t], a.vocab_size);
    w_.embed.row(tokens[t], x + int64_t(t) * a.hidden_size);
  }
}

void Model::forward_layer(int64_t layer, float* x, int64_t n, LayerObserver* observer,
                          const LayerWeights* weights) {
  const Architecture& a = w_.arch;
  if (layer < 0 || layer >= a.num_layers) fail("layer {} out of range [0, {})", layer, a.num_layers);
  if (n <= 0) return;
  if (n > max_seq_) fail("window of {} tokens exceeds the model's limit of {}", n, max_seq_);
  ensure_capacity(n);
  std::copy_n(x, n * a.hidden_size, x_.data());
  run_layer(layer, weights ? *weights : w_.layers[size_t(layer)], 0, n, observer);
  std::copy_n(x_.data(), n * a.hidden_size, x);
}

void Model::head(const float* x, int64_t n, float* logits) {
  const Architecture& a = w_.arch;
  if (n <= 0) return;
  ensure_capacity(n);
  for (int64_t t = 0; t < n; ++t)
    rmsnorm(x + t * a.hidden_size, w_.final_norm.data(), a.hidden_size, float(a.rms_norm_eps),
            xb_.data() + t * a.hidden_size);
  linear(w_.lm_head, xb_.data(), n, logits);
}

}  // namespace qf

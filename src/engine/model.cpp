// The decoder forward pass, one layer spec at a time: embedding (times the family's scale),
// then per layer [pre-norm] -> q/k/v (fused or not; or multi-head latent attention's latents
// expanded per head) -> [q/k norm] -> RoPE (partial, scaled; interleaved for MLA) -> causal
// grouped-query attention over the KV cache (sliding window, soft-capping, gpt-oss sinks) ->
// o_proj -> [post-norm] -> residual; [pre-norm] -> gated MLP (SiLU, GELU, gpt-oss's clamped
// SwiGLU) or mixture of experts (routing, experts) -> [post-norm] -> residual; final norm,
// output head (divided or soft-capped where the family says).
#include "engine/model.h"

#include "core/error.h"
#include "core/numeric.h"
#include "core/thread_pool.h"
#include "engine/moe_topk_softmax.h"

#include <algorithm>
#include <cmath>
#include <functional>

namespace qf {
namespace {

// Whether a Linear reads its input as it is (no AWQ / SmoothQuant pre-scale, no simulated
// activation quantization).
bool plain_input(const EngineLinear& L) { return L.pre_scale.empty() && L.act == ActQuant::none; }

// Runs fn(t0, t1) over the token rows [0, n) of a per-token operation on `width` floats per
// token: in tasks of about 16K floats on the pool when there are several, inline otherwise.
// Every token is computed the same way whatever the split, so the results are those of one loop.
void for_token_rows(ThreadPool& pool, int64_t n, int64_t width,
                    const std::function<void(int64_t, int64_t)>& fn) {
  const int64_t per_task = std::max<int64_t>(1, (int64_t(1) << 14) / std::max<int64_t>(1, width));
  const int64_t tasks = (n + per_task - 1) / per_task;
  if (tasks <= 1 || pool.size() == 1) {
    fn(0, n);
    return;
  }
  pool.parallel_for(tasks, [&](int64_t i) { fn(i * per_task, std::min(n, (i + 1) * per_task)); });
}

// Dynamic NTK RoPE exists to run past max_position_embeddings and transformers sets no limit
// for it; the cache grows with the positions run, so only int32 token positions bound it.
int64_t default_max_seq(const Architecture& a) {
  if (!a.ropes.empty() && a.ropes[0].type == RopeType::dynamic) return int64_t(1) << 31;
  return a.max_position_embeddings;
}

// The widest MLP activation of any layer: dense, routed expert or shared expert.
int64_t max_intermediate(const Architecture& a) {
  int64_t m = a.intermediate_size;
  for (const auto& l : a.layers)
    if (l.is_moe) m = std::max({m, l.moe.expert_intermediate, l.moe.shared_intermediate});
  return m;
}

// A token's experts and their weights from its router logits [experts] (softmax_topk: the
// top k of softmax(logits), ties to the lower index, renormalised when norm_topk_prob).
void route_softmax_topk(const float* logits, const MoeSpec& moe, std::vector<float>& probs,
                        std::vector<int>& order, int* experts, float* weights) {
  const int64_t e = moe.num_experts;
  probs.assign(logits, logits + e);
  softmax(probs.data(), e);
  order.resize(size_t(e));
  for (int64_t i = 0; i < e; ++i) order[size_t(i)] = int(i);
  std::partial_sort(order.begin(), order.begin() + moe.top_k, order.end(), [&](int x, int y) {
    return probs[size_t(x)] > probs[size_t(y)] || (probs[size_t(x)] == probs[size_t(y)] && x < y);
  });
  float sum = 0.f;
  for (int64_t k = 0; k < moe.top_k; ++k) {
    experts[k] = order[size_t(k)];
    weights[k] = probs[size_t(order[size_t(k)])];
    sum += weights[k];
  }
  if (moe.norm_topk_prob)
    for (int64_t k = 0; k < moe.top_k; ++k) weights[k] /= sum;
}

// sigmoid_grouped (DeepseekV3TopkRouter, float32 throughout): see Routing. Ties go to the
// lower index, of groups and of experts.
void route_sigmoid_grouped(const float* logits, const MoeSpec& moe, const std::vector<float>& bias,
                           std::vector<float>& scores, std::vector<float>& choice,
                           std::vector<int>& order, int* experts, float* weights) {
  const int64_t e = moe.num_experts, groups = moe.n_group, per = e / groups;
  scores.resize(size_t(e));
  choice.resize(size_t(e));
  for (int64_t i = 0; i < e; ++i) {
    scores[size_t(i)] = 1.f / (1.f + std::exp(-logits[i]));
    choice[size_t(i)] = scores[size_t(i)] + bias[size_t(i)];
  }
  // A group's score: the sum of its two best biased scores.
  std::vector<float> group_score(static_cast<size_t>(groups));
  for (int64_t g = 0; g < groups; ++g) {
    float best = -INFINITY, second = -INFINITY;
    for (int64_t i = g * per; i < (g + 1) * per; ++i) {
      const float c = choice[size_t(i)];
      if (c > best) {
        second = best;
        best = c;
      } else if (c > second) {
        second = c;
      }
    }
    group_score[size_t(g)] = best + second;
  }
  order.resize(size_t(groups));
  for (int64_t g = 0; g < groups; ++g) order[size_t(g)] = int(g);
  auto by = [](const std::vector<float>& v) {
    return [&w = v](int x, int y) {
      return w[size_t(x)] > w[size_t(y)] || (w[size_t(x)] == w[size_t(y)] && x < y);
    };
  };
  std::partial_sort(order.begin(), order.begin() + moe.topk_group, order.end(), by(group_score));
  std::vector<bool> kept(size_t(groups), false);
  for (int64_t g = 0; g < moe.topk_group; ++g) kept[size_t(order[size_t(g)])] = true;
  // The experts of the kept groups compete on their biased scores.
  order.clear();
  for (int64_t i = 0; i < e; ++i)
    if (kept[size_t(i / per)]) order.push_back(int(i));
  std::partial_sort(order.begin(), order.begin() + moe.top_k, order.end(), by(choice));
  float sum = 0.f;
  for (int64_t k = 0; k < moe.top_k; ++k) {
    experts[k] = order[size_t(k)];
    weights[k] = scores[size_t(order[size_t(k)])];
    sum += weights[k];
  }
  if (moe.norm_topk_prob) {
    const float denominator = sum + 1e-20f;
    for (int64_t k = 0; k < moe.top_k; ++k) weights[k] /= denominator;
  }
  for (int64_t k = 0; k < moe.top_k; ++k) weights[k] *= moe.routed_scaling;
}

// The cache type ModelOptions asks for, with the checkpoint's FP8 scales (1 where it has none).
KvCache make_kv_cache(const ModelWeights& w, const ModelOptions& opt) {
  const Architecture& a = w.arch;
  bool scaled = a.has_attention();
  std::vector<float> ks, vs;
  std::vector<bool> attends;
  for (size_t l = 0; l < w.layers.size(); ++l) {
    const LayerWeights& L = w.layers[l];
    attends.push_back(a.layers[l].has_attention);
    if (attends.back()) scaled &= L.k_scale > 0 && L.v_scale > 0;
    ks.push_back(L.k_scale > 0 ? L.k_scale : 1.f);
    vs.push_back(L.v_scale > 0 ? L.v_scale : 1.f);
  }
  KvCacheType type = opt.kv_cache.value_or(
      scaled ? KvCacheType::fp8
             : opt.llama_cpp_attention ? KvCacheType::f16 : opt.kv_cache_default);
  return KvCache(type, a.num_kv_heads, a.head_dim, a.v_head_dim, std::move(ks), std::move(vs),
                 std::move(attends));
}

}  // namespace

std::unique_ptr<Model> Model::load(const std::filesystem::path& dir, const ModelOptions& opt) {
  ModelWeights w = ModelWeights::load(dir);
  if (opt.huge_page_weights) w.move_to_huge_pages(/*release_file_pages=*/true);
  return std::make_unique<Model>(std::move(w), opt);
}

std::unique_ptr<Model> Model::load(std::shared_ptr<const Checkpoint> checkpoint,
                                   const ModelOptions& opt) {
  return std::make_unique<Model>(ModelWeights::load(std::move(checkpoint)), opt);
}

Model::Model(ModelWeights weights, const ModelOptions& opt)
    : w_(std::move(weights)),
      max_seq_(opt.max_seq > 0 ? std::min(opt.max_seq, default_max_seq(w_.arch))
                               : default_max_seq(w_.arch)),
      kernels_(opt.kernels),
      llama_cpp_attention_(opt.llama_cpp_attention),
      prefill_attention_amx_(opt.prefill_attention_amx),
      pool_(std::make_unique<ThreadPool>(opt.threads > 0 ? opt.threads
                                                         : ThreadPool::hardware_threads())),
      kv_{make_kv_cache(w_, opt)},
      mamba_{MambaCache(w_.arch)},
      rope_(w_.arch.ropes.size()) {}

Model::~Model() = default;

uint64_t Model::kv_cache_bytes() const {
  uint64_t n = 0;
  for (const KvCache& c : kv_) n += c.bytes();
  return n;
}

uint64_t Model::mamba_state_bytes() const {
  uint64_t n = 0;
  for (const MambaCache& c : mamba_) n += c.bytes();
  return n;
}

KvCache& Model::sequence_cache(int64_t s) {
  if (s < 0) fail("sequence {} out of range", s);
  // Every sequence's cache is a copy of the first's empty shape (type and scales).
  while (int64_t(kv_.size()) <= s) {
    kv_.push_back(kv_[0].empty_copy());
    mamba_.emplace_back(w_.arch);
  }
  return kv_[size_t(s)];
}

void Model::reserve_context(int64_t sequences, int64_t positions) {
  if (sequences < 1) fail("reserve_context: {} sequences", sequences);
  for (int64_t s = 0; s < sequences; ++s)
    sequence_cache(s).reserve(std::min(positions, max_seq_));
}

void Model::check_mamba_position(int64_t sequence, int64_t pos) {
  MambaCache& m = mamba_[size_t(sequence)];
  if (m.empty()) return;
  if (pos == 0) m.reset();
  else if (pos != m.position())
    fail("sequence {} stopped at position {}; a model with Mamba layers cannot run from position "
         "{} (its state cannot be rewound: start again at 0)", sequence, m.position(), pos);
}

void Model::ensure_capacity(int64_t n) {
  if (n <= capacity_) return;
  const Architecture& a = w_.arch;
  const int64_t q_dim = a.num_heads * a.head_dim, kv_dim = a.num_kv_heads * a.head_dim;
  const int64_t v_dim = a.num_kv_heads * a.v_head_dim, att_dim = a.num_heads * a.v_head_dim;
  const auto sz = [n](int64_t d) { return size_t(n * d); };
  x_.resize(sz(a.hidden_size));
  xb_.resize(sz(std::max(a.hidden_size, q_dim)));
  q_.resize(sz(q_dim));
  k_.resize(sz(kv_dim));
  v_.resize(sz(v_dim));
  att_.resize(sz(att_dim));
  if (a.is_mla()) {
    const MlaSpec& m = a.mla;
    q_latent_.resize(sz(m.q_lora_rank));
    kv_a_.resize(sz(m.kv_lora_rank + m.qk_rope_head_dim));
    kv_latent_.resize(sz(m.kv_lora_rank));
    kv_b_.resize(sz(a.num_heads * (m.qk_nope_head_dim + a.v_head_dim)));
  }
  const int64_t inter = max_intermediate(a);
  hb_.resize(sz(inter));
  hb2_.resize(sz(inter));
  if (a.has_moe()) {
    int64_t experts = 0, latent = 0;
    for (const auto& l : a.layers) {
      experts = std::max(experts, l.moe.num_experts);
      latent = std::max(latent, l.moe.latent);
    }
    const int64_t width = std::max(a.hidden_size, latent);
    logits_.resize(sz(experts));
    gathered_.resize(sz(width));
    expert_out_.resize(sz(width));
    moe_sum_.resize(sz(width));
    if (latent > 0) {
      moe_latent_in_.resize(sz(latent));
      moe_routed_.resize(sz(a.hidden_size));
    }
  }
  if (a.has_mamba()) {
    zxbcdt_.resize(sz(a.mamba.in_proj_rows()));
    dt_.resize(sz(a.mamba.heads));
    ssm_y_.resize(sz(a.mamba.inner()));
  }
  // Fused q/k/v or gate/up outputs before they are split (Phi-3).
  bool fused = false;
  for (const auto& l : a.layers)
    fused |= l.slot_of(LinearRole::qkv_proj) >= 0 || l.slot_of(LinearRole::gate_up_proj) >= 0;
  // gpt-oss experts: one gate_up_proj per expert, its rows interleaved.
  int64_t fused_experts = 0;
  for (const auto& l : a.layers)
    if (l.is_moe && l.moe.gate_up_interleaved) fused_experts = std::max(fused_experts, l.moe.expert_intermediate);
  if (fused || fused_experts > 0)
    fused_.resize(sz(std::max({q_dim + 2 * kv_dim, 2 * a.intermediate_size, 2 * fused_experts})));
  int64_t widest_in = std::max({a.hidden_size, q_dim, inter});
  for (const LinearModule& m : a.linears) widest_in = std::max(widest_in, m.in_features);
  scaled_.resize(sz(widest_in));
  actq_.resize(scaled_.size());
  capacity_ = n;
}

void Model::prepare_rope(int64_t pos, int64_t n) {
  // transformers recomputes length-dependent frequencies (dynamic NTK, LongRoPE) from
  // max(position) + 1 of each forward call; keys already cached keep the rotation they got.
  const auto& ropes = w_.arch.ropes;
  for (size_t r = 0; r < ropes.size(); ++r)
    rope_[r].compute(ropes[r].inv_freq(pos + n), float(ropes[r].attention_factor), pos, n);
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
  linear_forward(L.w, x, n, y, pool_.get(), kernels_);
  if (!L.bias.empty())
    for (int64_t t = 0; t < n; ++t)
      for (int64_t r = 0; r < L.w.rows; ++r) y[t * L.w.rows + r] += L.bias[size_t(r)];
}

void Model::linear_shared_input(std::initializer_list<const EngineLinear*> Ls, const float* x,
                                int64_t n, std::initializer_list<float*> ys) {
  bool plain = true;
  for (const EngineLinear* L : Ls) plain = plain && plain_input(*L);
  if (!plain) {
    for (size_t i = 0; i < Ls.size(); ++i) linear(*Ls.begin()[i], x, n, ys.begin()[i]);
    return;
  }
  std::array<const LinearWeight*, 4> ws{};
  for (size_t i = 0; i < Ls.size(); ++i) ws[i] = &Ls.begin()[i]->w;
  linear_forward_shared_input(std::span(ws.data(), Ls.size()), x, n,
                              std::span<float* const>(ys.begin(), ys.size()),
                              pool_.get(), kernels_);
  for (size_t i = 0; i < Ls.size(); ++i) {
    const EngineLinear& L = *Ls.begin()[i];
    float* y = ys.begin()[i];
    if (!L.bias.empty())
      for (int64_t t = 0; t < n; ++t)
        for (int64_t r = 0; r < L.w.rows; ++r) y[t * L.w.rows + r] += L.bias[size_t(r)];
  }
}

void Model::norm_rows(const LayerWeights& L, NormSlot slot, const float* x, int64_t n, int64_t cols,
                      float* out) const {
  const std::vector<float>& w = L.norm(slot);
  if (w.empty()) {
    if (out != x) std::copy_n(x, n * cols, out);
    return;
  }
  const float eps = float(w_.arch.norm_eps(slot));
  const auto norm = kernels_ == KernelMode::fast ? rmsnorm_fast : rmsnorm;
  for_token_rows(*pool_, n, cols, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) norm(x + t * cols, w.data(), cols, eps, out + t * cols);
  });
}

void Model::add_residual(const float* y, int64_t n) {
  const int64_t dim = w_.arch.hidden_size;
  const float rs = w_.arch.residual_scale;
  for_token_rows(*pool_, n, dim, [&](int64_t t0, int64_t t1) {
    float* x = x_.data();
    for (int64_t i = t0 * dim; i < t1 * dim; ++i) x[i] += y[i] * rs;
  });
}

void Model::forward(std::span<const int32_t> tokens, int64_t pos, float* logits, bool all_logits,
                    int64_t sequence) {
  const Architecture& a = w_.arch;
  const int64_t n = int64_t(tokens.size());
  if (n == 0) return;
  if (pos < 0 || pos + n > max_seq_)
    fail("context of {} tokens exceeds the model's limit of {}", pos + n, max_seq_);
  KvCache& cache = sequence_cache(sequence);
  if (pos > cache.length())
    fail("sequence {} holds {} positions; cannot run from position {}", sequence, cache.length(),
         pos);
  check_mamba_position(sequence, pos);
  ensure_capacity(n);
  cache.ensure(pos + n, max_seq_);
  seq_ = sequence;
  batch_pos_ = nullptr;
  prepare_rope(pos, n);
  embed(tokens, x_.data());
  for (int64_t l = 0; l < a.num_layers; ++l) run_layer(l, w_.layers[size_t(l)], pos, n, nullptr);
  mamba_[size_t(sequence)].set_position(pos + n);
  const int64_t first = all_logits ? 0 : n - 1;
  head(x_.data() + first * a.hidden_size, n - first, logits);
}

void Model::decode_batch(std::span<const int32_t> tokens, std::span<const int64_t> positions,
                         float* logits) {
  const Architecture& a = w_.arch;
  const int64_t n = int64_t(tokens.size());
  if (int64_t(positions.size()) != n)
    fail("decode_batch: {} tokens but {} positions", n, positions.size());
  if (n == 0) return;
  const auto [lo, hi] = std::minmax_element(positions.begin(), positions.end());
  if (*lo < 0 || *hi + 1 > max_seq_)
    fail("context of {} tokens exceeds the model's limit of {}", *hi + 1, max_seq_);
  // Length-dependent RoPE computes its frequencies from the call's last position: one call
  // can only stand for sequences that all stand there.
  for (const RopeSpec& r : a.ropes)
    if ((r.type == RopeType::dynamic || r.type == RopeType::longrope) && *lo != *hi)
      fail("decode_batch: {} RoPE depends on the sequence length; the sequences must be at the "
           "same position (got {} to {})", rope_type_name(r.type), *lo, *hi);
  for (int64_t s = 0; s < n; ++s) {
    if (positions[size_t(s)] > sequence_cache(s).length())
      fail("sequence {} holds {} positions; cannot decode at position {}", s,
           sequence_cache(s).length(), positions[size_t(s)]);
    check_mamba_position(s, positions[size_t(s)]);
  }
  ensure_capacity(n);
  for (int64_t s = 0; s < n; ++s) kv_[size_t(s)].ensure(positions[size_t(s)] + 1, max_seq_);
  batch_pos_ = positions.data();
  prepare_rope(*lo, *hi + 1 - *lo);
  embed(tokens, x_.data());
  // (forward and forward_layer reset batch_pos_, so an exception here leaves nothing behind)
  for (int64_t l = 0; l < a.num_layers; ++l) run_layer(l, w_.layers[size_t(l)], 0, n, nullptr);
  batch_pos_ = nullptr;
  for (int64_t s = 0; s < n; ++s) mamba_[size_t(s)].set_position(positions[size_t(s)] + 1);
  head(x_.data(), n, logits);
}

bool Model::prefill_attention_on_amx(int64_t n) const {
  // Fast kernels only (queries and probabilities are rounded to BF16, see attention.h), one
  // sequence's consecutive positions, a BF16 cache, no soft-capping (its tanh per score is not
  // in the AMX kernel), not llama.cpp's F16 numerics, and enough tokens for whole row tiles to
  // pay (below 16 rows the tiles are mostly padding; decode keeps the flash-decoding split).
  const Architecture& a = w_.arch;
  return prefill_attention_amx_ && kernels_ == KernelMode::fast && batch_pos_ == nullptr &&
         n >= 16 && !llama_cpp_attention_ && a.attn_softcap <= 0.f && !a.is_mla() &&
         kv_[size_t(seq_)].type() == KvCacheType::bf16 &&
         kernels::prefill_attention_amx_fits(a.head_dim, a.v_head_dim);
}

void Model::attention(int64_t l, const LayerSpec& spec, const LayerWeights& L, int64_t pos,
                      int64_t n) {
  const Architecture& a = w_.arch;
  const int64_t hd = a.head_dim, vd = a.v_head_dim, nh = a.num_heads, nkv = a.num_kv_heads;
  const int64_t q_dim = nh * hd, att_dim = nh * vd;
  const int64_t kv_mul = nh / nkv;
  const int64_t window = spec.sliding_window;
  if (prefill_attention_on_amx(n)) {
    const KvCache& kv = row_cache(0);
    std::vector<const uint16_t*> keys(static_cast<size_t>(nkv)), values(keys.size());
    for (int64_t h = 0; h < nkv; ++h) {
      keys[size_t(h)] = static_cast<const uint16_t*>(kv.keys(l, h));
      values[size_t(h)] = static_cast<const uint16_t*>(kv.values(l, h));
    }
    kernels::PrefillAttention p;
    p.q = q_.data();
    p.q_stride = q_dim;
    p.tokens = n;
    p.kv_heads = nkv;
    p.heads = kv_mul;
    p.head_dim = hd;
    p.v_head_dim = vd;
    p.k = keys;
    p.v = values;
    p.k_stride = kv.key_tile_stride();
    p.v_stride = kv.value_stride();
    p.position = pos;
    p.window = window;
    p.scale = a.attention_scale;
    p.sinks = L.sinks.empty() ? nullptr : L.sinks.data();
    p.out = att_.data();
    p.out_stride = att_dim;
    kernels::attend_prefill_amx(p, pool_.get());
    return;
  }
  // Decode steps over long contexts split each row's positions into parts of kAttentionPart
  // (flash-decoding): more tasks than KV heads, for many cores. The split follows the lengths
  // alone, never the thread count, so results do not depend on it.
  constexpr int64_t kAttentionPart = 1024;
  const bool split = n <= 8 && !llama_cpp_attention_;
  auto range = [&](int64_t t) {
    const int64_t end = row_position(pos, t) + 1;  // keys [begin, end) are visible
    return std::pair<int64_t, int64_t>(window > 0 ? std::max<int64_t>(0, end - window) : 0, end);
  };
  // Tasks: per row, per KV head, per part; part_base_[t] = the row's first part's index.
  part_base_.assign(size_t(n + 1), 0);
  for (int64_t t = 0; t < n; ++t) {
    const auto [begin, end] = range(t);
    const int64_t parts = split ? (end - begin + kAttentionPart - 1) / kAttentionPart : 1;
    part_base_[size_t(t + 1)] = part_base_[size_t(t)] + parts;
  }
  const int64_t total_parts = part_base_[size_t(n)];
  const bool any_split = total_parts > n;
  if (any_split) {
    part_out_.resize(size_t(total_parts * att_dim));
    part_max_.resize(size_t(total_parts * nh));
    part_sum_.resize(size_t(total_parts * nh));
  }
  pool_->parallel_for(total_parts * nkv, [&](int64_t task) {
    const int64_t part = task / nkv, kvh = task % nkv, h0 = kvh * kv_mul;
    const int64_t t = std::upper_bound(part_base_.begin(), part_base_.end(), part) -
                      part_base_.begin() - 1;
    const int64_t parts = part_base_[size_t(t + 1)] - part_base_[size_t(t)];
    const int64_t c = part - part_base_[size_t(t)];
    const auto [begin, end] = range(t);
    kernels::AttentionGroup g;
    g.q = q_.data() + t * q_dim + h0 * hd;
    g.heads = kv_mul;
    g.head_dim = hd;
    g.v_head_dim = vd;
    const KvCache& kv = row_cache(t);
    g.type = kv.type();
    g.k = kv.keys(l, kvh);
    g.v = kv.values(l, kvh);
    g.k_stride = kv.key_tile_stride();
    g.v_stride = kv.value_stride();
    g.k_scale = kv.k_scale(l);
    g.v_scale = kv.v_scale(l);
    g.begin = begin + c * kAttentionPart;
    g.end = parts == 1 ? end : std::min(end, g.begin + kAttentionPart);
    g.scale = a.attention_scale;
    g.softcap = a.attn_softcap;
    g.sinks = L.sinks.empty() ? nullptr : L.sinks.data() + h0;
    g.f16_queries_and_probs = llama_cpp_attention_;
    if (parts == 1) {
      g.out = att_.data() + t * att_dim + h0 * vd;
    } else {
      g.out = part_out_.data() + part * att_dim + h0 * vd;
      g.part_max = part_max_.data() + part * nh + h0;
      g.part_sum = part_sum_.data() + part * nh + h0;
    }
    kernels::attend(g);
  });
  if (!any_split) return;
  for (int64_t t = 0; t < n; ++t) {
    const int64_t p0 = part_base_[size_t(t)], parts = part_base_[size_t(t + 1)] - p0;
    if (parts == 1) continue;
    kernels::combine_attention_parts(parts, nh, vd, part_out_.data() + p0 * att_dim,
                                     part_max_.data() + p0 * nh, part_sum_.data() + p0 * nh,
                                     L.sinks.empty() ? nullptr : L.sinks.data(),
                                     att_.data() + t * att_dim);
  }
}

void Model::run_layer(int64_t l, const LayerWeights& L, int64_t pos, int64_t n,
                      LayerObserver* obs) {
  const Architecture& a = w_.arch;
  const LayerSpec& spec = a.layers[size_t(l)];
  const int64_t dim = a.hidden_size;

  if (spec.is_mamba) {
    norm_rows(L, NormSlot::attn_in, x_.data(), n, dim, xb_.data());
    if (obs) obs->linear_input(LayerInput::attn_norm, kNoExpert, xb_.data(), n, dim);
    mamba_mixer(l, spec, L, n, obs);
    add_residual(xb_.data(), n);
  }
  if (spec.has_attention) attention_block(l, spec, L, pos, n, obs);
  if (!spec.has_mlp) return;

  // MLP block.
  norm_rows(L, NormSlot::mlp_in, x_.data(), n, dim, xb_.data());
  if (obs) obs->linear_input(LayerInput::ffn_norm, kNoExpert, xb_.data(), n, dim);
  if (spec.is_moe) {
    moe(spec, L, n, obs);
  } else {
    const bool fused = spec.slot_of(LinearRole::gate_up_proj) >= 0;
    const std::array<int, 3> slots = {
        fused ? -1 : spec.slot_of(LinearRole::gate_proj),
        fused ? spec.slot_of(LinearRole::gate_up_proj) : spec.slot_of(LinearRole::up_proj),
        spec.slot_of(LinearRole::down_proj)};
    gated_mlp(L, slots, a.intermediate_size, xb_.data(), n, xb_.data(), kNoExpert, obs);
  }
  norm_rows(L, NormSlot::mlp_out, xb_.data(), n, dim, xb_.data());
  add_residual(xb_.data(), n);
}

void Model::attention_block(int64_t l, const LayerSpec& spec, const LayerWeights& L, int64_t pos,
                            int64_t n, LayerObserver* obs) {
  const Architecture& a = w_.arch;
  const int64_t dim = a.hidden_size, hd = a.head_dim, nh = a.num_heads, nkv = a.num_kv_heads;
  const int64_t q_dim = nh * hd, kv_dim = nkv * hd;
  const int64_t v_dim = nkv * a.v_head_dim, att_dim = nh * a.v_head_dim;
  const float eps = float(a.rms_norm_eps);
  norm_rows(L, NormSlot::attn_in, x_.data(), n, dim, xb_.data());
  if (obs) obs->linear_input(LayerInput::attn_norm, kNoExpert, xb_.data(), n, dim);
  if (a.is_mla()) {
    mla_qkv(spec, L, pos, n, obs);
  } else if (spec.slot_of(LinearRole::qkv_proj) >= 0) {
    const int64_t width = q_dim + 2 * kv_dim;
    linear(L.linear(spec, LinearRole::qkv_proj), xb_.data(), n, fused_.data());
    for (int64_t t = 0; t < n; ++t) {
      const float* row = fused_.data() + t * width;
      std::copy_n(row, q_dim, q_.data() + t * q_dim);
      std::copy_n(row + q_dim, kv_dim, k_.data() + t * kv_dim);
      std::copy_n(row + q_dim + kv_dim, kv_dim, v_.data() + t * kv_dim);
    }
  } else {
    linear_shared_input({&L.linear(spec, LinearRole::q_proj), &L.linear(spec, LinearRole::k_proj),
                         &L.linear(spec, LinearRole::v_proj)},
                        xb_.data(), n, {q_.data(), k_.data(), v_.data()});
  }
  if (!a.is_mla()) {
    if (a.qk_norm == QkNorm::whole) {
      norm_rows(L, NormSlot::q, q_.data(), n, q_dim, q_.data());
      norm_rows(L, NormSlot::k, k_.data(), n, kv_dim, k_.data());
    }
    // No rotation where the layer has no positional encoding (Nemotron-H).
    const RopeRows* rope = spec.rope >= 0 ? &rope_[size_t(spec.rope)] : nullptr;
    if (rope || a.qk_norm == QkNorm::per_head)
      for_token_rows(*pool_, n, q_dim + kv_dim, [&](int64_t t0, int64_t t1) {
        for (int64_t t = t0; t < t1; ++t) {
          for (int64_t h = 0; h < nh; ++h) {
            float* qh = q_.data() + t * q_dim + h * hd;
            if (a.qk_norm == QkNorm::per_head) rmsnorm(qh, L.norm(NormSlot::q).data(), hd, eps, qh);
            if (rope) rope->apply(qh, row_position(pos, t));
          }
          for (int64_t h = 0; h < nkv; ++h) {
            float* kh = k_.data() + t * kv_dim + h * hd;
            if (a.qk_norm == QkNorm::per_head) rmsnorm(kh, L.norm(NormSlot::k).data(), hd, eps, kh);
            if (rope) rope->apply(kh, row_position(pos, t));
          }
        }
      });
  }
  if (obs) obs->key_value(k_.data(), v_.data(), n, kv_dim, v_dim);
  if (kv_[0].type() != KvCacheType::fp8) {
    // A wider cache keeps the checkpoint's own KV quantization.
    if (L.k_scale > 0) fake_quantize_fp8(L.k_scale, k_.data(), n * kv_dim);
    if (L.v_scale > 0) fake_quantize_fp8(L.v_scale, v_.data(), n * v_dim);
  }
  if (batch_pos_) {
    for (int64_t t = 0; t < n; ++t)
      kv_[size_t(t)].store(l, batch_pos_[t], 1, k_.data() + t * kv_dim, v_.data() + t * v_dim);
  } else {
    kv_[size_t(seq_)].store(l, pos, n, k_.data(), v_.data());
  }
  attention(l, spec, L, pos, n);

  if (obs) obs->linear_input(LayerInput::attn_out, kNoExpert, att_.data(), n, att_dim);
  linear(L.linear(spec, LinearRole::o_proj), att_.data(), n, xb_.data());
  norm_rows(L, NormSlot::attn_out, xb_.data(), n, dim, xb_.data());
  add_residual(xb_.data(), n);
}

void Model::mla_qkv(const LayerSpec& spec, const LayerWeights& L, int64_t pos, int64_t n,
                    LayerObserver* obs) {
  const Architecture& a = w_.arch;
  const MlaSpec& m = a.mla;
  const int64_t nh = a.num_heads, hd = a.head_dim, vd = a.v_head_dim;
  const int64_t dn = m.qk_nope_head_dim, dr = m.qk_rope_head_dim, lora = m.kv_lora_rank;
  const int64_t q_dim = nh * hd, v_dim = nh * vd, kv_a = lora + dr, kv_b = dn + vd;
  if (m.q_lora_rank > 0) {
    linear(L.linear(spec, LinearRole::q_a_proj), xb_.data(), n, q_latent_.data());
    norm_rows(L, NormSlot::q_a, q_latent_.data(), n, m.q_lora_rank, q_latent_.data());
    if (obs) obs->linear_input(LayerInput::q_latent, kNoExpert, q_latent_.data(), n, m.q_lora_rank);
    linear(L.linear(spec, LinearRole::q_b_proj), q_latent_.data(), n, q_.data());
  } else {
    linear(L.linear(spec, LinearRole::q_proj), xb_.data(), n, q_.data());
  }
  // [latent | k_rot] per token; the latent is normed, then expanded to [k_nope | v] per head.
  linear(L.linear(spec, LinearRole::kv_a_proj_with_mqa), xb_.data(), n, kv_a_.data());
  for (int64_t t = 0; t < n; ++t)
    std::copy_n(kv_a_.data() + t * kv_a, lora, kv_latent_.data() + t * lora);
  norm_rows(L, NormSlot::kv_a, kv_latent_.data(), n, lora, kv_latent_.data());
  if (obs) obs->linear_input(LayerInput::kv_latent, kNoExpert, kv_latent_.data(), n, lora);
  linear(L.linear(spec, LinearRole::kv_b_proj), kv_latent_.data(), n, kv_b_.data());
  const RopeRows& rope = rope_[size_t(spec.rope)];
  auto rotate = [&](float* x, int64_t p) {
    if (m.rope_interleave) rope.apply_interleaved(x, p);
    else rope.apply(x, p);
  };
  for (int64_t t = 0; t < n; ++t) {
    float* k_rot = kv_a_.data() + t * kv_a + lora;  // one rope key, shared by every head
    rotate(k_rot, row_position(pos, t));
    for (int64_t h = 0; h < nh; ++h) {
      rotate(q_.data() + t * q_dim + h * hd + dn, row_position(pos, t));
      const float* kv = kv_b_.data() + (t * nh + h) * kv_b;
      float* kh = k_.data() + t * q_dim + h * hd;
      std::copy_n(kv, dn, kh);
      std::copy_n(k_rot, dr, kh + dn);
      std::copy_n(kv + dn, vd, v_.data() + t * v_dim + h * vd);
    }
  }
}

void Model::gated_mlp(const LayerWeights& L, const std::array<int, 3>& slots, int64_t inter,
                      const float* x, int64_t n, float* y, int expert, LayerObserver* obs,
                      bool interleaved) {
  bool gated = false;  // hb_ already holds the activation: act(gate) * up, or act(up) ungated
  if (!w_.arch.gated_mlp) {
    // Nemotron-H: down(relu(up(x))^2), no gate (the only ungated family: its activation is
    // relu2, set by model/nemotron_h).
    linear(L.linears[size_t(slots[1])], x, n, hb_.data());
    for_token_rows(*pool_, n, inter, [&](int64_t t0, int64_t t1) {
      float* u = hb_.data() + t0 * inter;
      const int64_t m = (t1 - t0) * inter;
      for (int64_t i = 0; i < m; ++i) {
        const float r = std::max(u[i], 0.f);
        u[i] = r * r;
      }
    });
    gated = true;
  } else if (slots[0] < 0 && interleaved) {
    // gpt-oss experts: slots[1]'s output rows alternate gate, up.
    linear(L.linears[size_t(slots[1])], x, n, fused_.data());
    for (int64_t t = 0; t < n; ++t) {
      const float* row = fused_.data() + t * 2 * inter;
      for (int64_t j = 0; j < inter; ++j) {
        hb_[size_t(t * inter + j)] = row[2 * j];
        hb2_[size_t(t * inter + j)] = row[2 * j + 1];
      }
    }
  } else if (slots[0] < 0) {
    // Fused on disk (Phi-3): slots[1] holds the rows of gate, then of up.
    linear(L.linears[size_t(slots[1])], x, n, fused_.data());
    for (int64_t t = 0; t < n; ++t) {
      const float* row = fused_.data() + t * 2 * inter;
      std::copy_n(row, inter, hb_.data() + t * inter);
      std::copy_n(row + inter, inter, hb2_.data() + t * inter);
    }
  } else {
    const EngineLinear& gate = L.linears[size_t(slots[0])];
    const EngineLinear& up = L.linears[size_t(slots[1])];
    gated = w_.arch.activation == Activation::silu && plain_input(gate) && plain_input(up) &&
            gate.bias.empty() && up.bias.empty();
    if (gated)  // products and gating in one call (fused in the fast AMX kernel)
      linear_forward_gated_silu(gate.w, up.w, x, n, hb_.data(), hb2_.data(), pool_.get(), kernels_);
    else
      linear_shared_input({&gate, &up}, x, n, {hb_.data(), hb2_.data()});
  }
  if (!gated) for_token_rows(*pool_, n, inter, [&](int64_t t0, int64_t t1) {
    float* g = hb_.data() + t0 * inter;
    const float* u = hb2_.data() + t0 * inter;
    const int64_t m = (t1 - t0) * inter;
    switch (w_.arch.activation) {
      case Activation::silu:
        if (kernels_ == KernelMode::fast) silu_mul_fast(g, u, m);
        else silu_mul(g, u, m);
        break;
      case Activation::gelu_tanh: gelu_tanh_mul(g, u, m); break;
      case Activation::gelu: gelu_erf_mul(g, u, m); break;
      case Activation::clamped_swiglu:
        clamped_swiglu_mul(g, u, m, w_.arch.swiglu_limit, w_.arch.swiglu_alpha);
        break;
      case Activation::relu2:
        for (int64_t i = 0; i < m; ++i) {
          const float r = std::max(g[i], 0.f);
          g[i] = r * r * u[i];
        }
        break;
    }
  });
  if (obs) obs->linear_input(LayerInput::mlp_act, expert, hb_.data(), n, inter);
  linear(L.linears[size_t(slots[2])], hb_.data(), n, y);
}

void Model::moe(const LayerSpec& spec, const LayerWeights& L, int64_t n, LayerObserver* obs) {
  const MoeSpec& moe = spec.moe;
  const int64_t hidden = w_.arch.hidden_size, k = moe.top_k;
  // The routed experts read and write `dim` columns: the hidden state, or with a latent MoE
  // (Nemotron-H) fc1_latent_proj's output, which fc2_latent_proj brings back.
  const int64_t dim = moe.latent > 0 ? moe.latent : hidden;
  const float* in = xb_.data();
  if (moe.latent > 0) {
    linear(L.linears[size_t(moe.fc1_latent)], xb_.data(), n, moe_latent_in_.data());
    in = moe_latent_in_.data();
  }
  linear(L.router, xb_.data(), n, logits_.data());
  // Route every token, then list per expert its (token, weight) pairs in token order: a
  // counting sort into route_token_ / route_weight_, expert e's pairs at [start[e], start[e+1]).
  const int64_t experts = moe.num_experts;
  chosen_.resize(size_t(n * k));
  chosen_weight_.resize(size_t(n * k));
  for (int64_t t = 0; t < n; ++t) {
    const float* row = logits_.data() + t * experts;
    switch (moe.routing) {
      case Routing::softmax_topk:
        route_softmax_topk(row, moe, probs_, order_, chosen_.data() + t * k,
                           chosen_weight_.data() + t * k);
        break;
      case Routing::sigmoid_grouped:
        route_sigmoid_grouped(row, moe, L.score_bias, probs_, choice_, order_,
                              chosen_.data() + t * k, chosen_weight_.data() + t * k);
        break;
      case Routing::topk_softmax:
        route_topk_softmax(row, experts, k, chosen_.data() + t * k, chosen_weight_.data() + t * k);
        break;
    }
  }
  route_start_.assign(size_t(experts + 1), 0);
  for (int64_t i = 0; i < n * k; ++i) ++route_start_[size_t(chosen_[size_t(i)] + 1)];
  for (int64_t e = 0; e < experts; ++e) route_start_[size_t(e + 1)] += route_start_[size_t(e)];
  route_token_.resize(size_t(n * k));
  route_weight_.resize(size_t(n * k));
  {
    std::vector<int64_t>& next = route_next_;
    next.assign(route_start_.begin(), route_start_.end() - 1);
    for (int64_t i = 0; i < n * k; ++i) {
      const int64_t at = next[size_t(chosen_[size_t(i)])]++;
      route_token_[size_t(at)] = i / k;
      route_weight_[size_t(at)] = chosen_weight_[size_t(i)];
    }
  }

  // Experts in index order, each once over its rows (one matrix product per expert; decode
  // touches only the top-k experts' weights). The sum follows transformers' order.
  std::fill_n(moe_sum_.begin(), n * dim, 0.f);
  const bool all_rows = obs && obs->experts_see_all_rows();
  for (int64_t e = 0; e < experts; ++e) {
    const int64_t begin = route_start_[size_t(e)], m = route_start_[size_t(e + 1)] - begin;
    if (all_rows) {
      // Calibration of every expert on every row: computed over all rows, summed over its own.
      if (obs) obs->linear_input(LayerInput::ffn_norm, int(e), in, n, dim);
      gated_mlp(L, moe.experts[size_t(e)], moe.expert_intermediate, in, n,
                expert_out_.data(), int(e), obs, moe.gate_up_interleaved);
      for (int64_t r = 0; r < m; ++r) {
        const int64_t t = route_token_[size_t(begin + r)];
        const float w = route_weight_[size_t(begin + r)];
        float* dst = moe_sum_.data() + t * dim;
        const float* src = expert_out_.data() + t * dim;
        for (int64_t c = 0; c < dim; ++c) dst[c] += src[c] * w;
      }
      continue;
    }
    if (m == 0) continue;
    for (int64_t r = 0; r < m; ++r)
      std::copy_n(in + route_token_[size_t(begin + r)] * dim, dim, gathered_.data() + r * dim);
    if (obs) obs->linear_input(LayerInput::ffn_norm, int(e), gathered_.data(), m, dim);
    gated_mlp(L, moe.experts[size_t(e)], moe.expert_intermediate, gathered_.data(), m,
              expert_out_.data(), int(e), obs, moe.gate_up_interleaved);
    for (int64_t r = 0; r < m; ++r) {
      const float w = route_weight_[size_t(begin + r)];
      float* dst = moe_sum_.data() + route_token_[size_t(begin + r)] * dim;
      const float* src = expert_out_.data() + r * dim;
      for (int64_t c = 0; c < dim; ++c) dst[c] += src[c] * w;
    }
  }
  float* routed = moe_sum_.data();
  if (moe.latent > 0) {
    if (obs) obs->linear_input(LayerInput::moe_latent, kNoExpert, moe_sum_.data(), n, dim);
    linear(L.linears[size_t(moe.fc2_latent)], moe_sum_.data(), n, moe_routed_.data());
    routed = moe_routed_.data();
  }
  if (moe.shared[1] >= 0) {
    gated_mlp(L, moe.shared, moe.shared_intermediate, xb_.data(), n, expert_out_.data(),
              kNoExpert, obs);
    if (!moe.shared_gate.empty()) {
      linear(L.shared_gate, xb_.data(), n, logits_.data());
      for (int64_t t = 0; t < n; ++t) {
        const float g = 1.f / (1.f + std::exp(-logits_[size_t(t)]));
        for (int64_t c = 0; c < hidden; ++c) expert_out_[size_t(t * hidden + c)] *= g;
      }
    }
    for (int64_t i = 0; i < n * hidden; ++i) routed[i] += expert_out_[size_t(i)];
  }
  std::copy_n(routed, n * hidden, xb_.begin());
}

void Model::embed(std::span<const int32_t> tokens, float* x) const {
  const Architecture& a = w_.arch;
  for (size_t t = 0; t < tokens.size(); ++t) {
    if (tokens[t] < 0 || tokens[t] >= a.vocab_size)
      fail("token id {} out of range [0, {})", tokens[t], a.vocab_size);
    float* row = x + int64_t(t) * a.hidden_size;
    w_.embed.row(tokens[t], row);
    if (a.embedding_scale != 1.f)
      for (int64_t c = 0; c < a.hidden_size; ++c) row[c] *= a.embedding_scale;
  }
}

void Model::forward_layer(int64_t layer, float* x, int64_t n, LayerObserver* observer,
                          const LayerWeights* weights) {
  const Architecture& a = w_.arch;
  if (layer < 0 || layer >= a.num_layers) fail("layer {} out of range [0, {})", layer, a.num_layers);
  if (n <= 0) return;
  if (n > max_seq_) fail("window of {} tokens exceeds the model's limit of {}", n, max_seq_);
  ensure_capacity(n);
  kv_[0].ensure(n, max_seq_);
  seq_ = 0;
  batch_pos_ = nullptr;
  if (!rope_.empty() && (rope_[0].first != 0 || rope_[0].count != n)) prepare_rope(0, n);
  // One layer over a window from position 0: its Mamba state starts at zero.
  if (a.layers[size_t(layer)].is_mamba) mamba_[0].reset_layer(layer);
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
  const int64_t total = n * a.vocab_size;
  if (a.logits_divisor != 1.f)
    for (int64_t i = 0; i < total; ++i) logits[i] /= a.logits_divisor;
  if (a.final_softcap > 0)
    for (int64_t i = 0; i < total; ++i)
      logits[i] = std::tanh(logits[i] / a.final_softcap) * a.final_softcap;
}

}  // namespace qf

// The forward pass of a dense decoder (the families of model/architecture.h), in the spirit of
// llama2.c's run.c: weights (as stored), a run state of float32 activations, a KV cache (F32,
// BF16, F16 or FP8) that grows with the positions run (never beyond max_seq()).
// A call processes a window of tokens at once (matrix-matrix products: prefill) or a single
// token (matrix-vector products: decode).
#pragma once

#include "engine/kv_cache.h"
#include "engine/mamba_cache.h"
#include "engine/weights.h"
#include "kernels/ops.h"

#include <array>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <span>
#include <vector>

namespace qf {

class ThreadPool;

// Receives what flows through one layer during forward_layer (calibration). Called on the
// calling thread, in layer order, with float32 row-major data valid only during the call.
class LayerObserver {
 public:
  virtual ~LayerObserver() = default;
  // x: [n, cols], the input as the Linear sees it before any pre_scale or activation
  // quantization. `expert` is a routed expert's index (x: the rows routed to it, in token
  // order; ffn_norm or its own mlp_act), else kNoExpert (attention, the dense MLP, and in an
  // MoE layer ffn_norm = every row and mlp_act = the shared expert's activation).
  virtual void linear_input(LayerInput which, int expert, const float* x, int64_t n,
                            int64_t cols) = 0;
  // Post-RoPE keys [n, k_dim] and values [n, v_dim] about to enter the KV cache (k_dim =
  // v_dim except with multi-head latent attention, whose keys and values are per head).
  virtual void key_value(const float* k, const float* v, int64_t n, int64_t k_dim,
                         int64_t v_dim) = 0;
  // True to run every routed expert over every row of its MoE layer (ModelOpt calibrates
  // experts this way), each seeing all rows; the layer's output still uses only the routed
  // rows. False: each expert sees the rows routed to it.
  virtual bool experts_see_all_rows() const { return false; }
};

struct ModelOptions {
  int threads = 0;        // 0: all hardware threads
  // The longest context allowed; 0: the model's (max_position_embeddings; none for dynamic NTK
  // RoPE, whose point is running past it). Memory follows the positions actually run, not
  // this limit.
  int64_t max_seq = 0;
  // Products of the Linears (kernels/linear.h): exact for evaluation and calibration, fast
  // for bench and generate.
  KernelMode kernels = KernelMode::exact;
  // llama.cpp's CPU attention without flash attention (`-fa off`) and its default F16 cache:
  // keys and values are rounded to F16 (nearest even) as they enter the cache (the cache type
  // is f16 unless kv_cache says otherwise), queries before their dot products with the keys,
  // and the softmax probabilities before they weigh the values (ggml converts the second
  // operand of each F16 product to F16). `eval ppl --protocol llama.cpp` sets it: on tiny
  // models whose activations are rounded to Q8_0 these roundings move the perplexity by about
  // 1e-3, the size of the agreement it is checked to.
  bool llama_cpp_attention = false;
  // Fast kernels with a BF16 cache on a CPU with AMX: prefill attention on AMX tiles
  // (kernels::attend_prefill_amx, queries and probabilities rounded to BF16). False: attend()
  // per token, as without AMX (tests and benchmarks compare the two in one process).
  bool prefill_attention_amx = true;
  // How the KV cache stores keys and values. Unset: fp8 when every attention layer carries the
  // checkpoint's k_scale and v_scale (its own KV quantization, read back exactly as
  // fake-quantizing with those scales gives), else kv_cache_default. A cache wider than fp8 on
  // a checkpoint with KV scales stores the fake-quantized values.
  std::optional<KvCacheType> kv_cache;
  KvCacheType kv_cache_default = KvCacheType::f32;
  // Weights moved into 2 MB pages at load (ModelWeights::move_to_huge_pages): for commands that
  // stream them every token (bench, generate); calibration and evaluation read them in place.
  bool huge_page_weights = false;
};

class Model {
 public:
  // Loads the checkpoint (see ModelWeights::load for errors).
  static std::unique_ptr<Model> load(const std::filesystem::path& dir, const ModelOptions& opt);
  static std::unique_ptr<Model> load(std::shared_ptr<const Checkpoint> checkpoint,
                                     const ModelOptions& opt);
  explicit Model(ModelWeights weights, const ModelOptions& opt);
  ~Model();

  const Architecture& arch() const { return w_.arch; }
  const ModelWeights& weights() const { return w_; }
  int64_t max_seq() const { return max_seq_; }
  KernelMode kernels() const { return kernels_; }
  void set_kernels(KernelMode mode) { kernels_ = mode; }
  // Bytes the KV caches of every sequence hold now (they grow with the positions run).
  uint64_t kv_cache_bytes() const;
  // Bytes of the Mamba layers' recurrent state of every sequence (fixed per sequence).
  uint64_t mamba_state_bytes() const;
  KvCacheType kv_cache_type() const { return kv_[0].type(); }
  int64_t vocab_size() const { return w_.arch.vocab_size; }
  ThreadPool& pool() { return *pool_; }

  // Runs `tokens` of sequence `sequence` (its own KV cache; 0 unless several sequences are
  // decoded together) at positions [pos, pos + n): the cache must hold positions [0, pos) from
  // earlier calls (pos == 0 starts the sequence anew). Writes logits [n, vocab] when
  // `all_logits`, else the last token's [vocab], to `logits`. Throws qf::Error if pos + n
  // exceeds max_seq(), a token id is out of range or sequence < 0, and, for a model with Mamba
  // layers, when pos is neither 0 nor where the sequence stopped (its state cannot be rewound).
  void forward(std::span<const int32_t> tokens, int64_t pos, float* logits, bool all_logits,
               int64_t sequence = 0);
  // One decode step of several sequences at once: token s of `tokens` is sequence s's next token
  // at positions[s] (its cache holding [0, positions[s]) from earlier calls). Every weight is
  // read once for all of them (matrix-matrix products); logits [tokens.size(), vocab]. The
  // results equal running each sequence alone up to the products' rounding. Throws qf::Error
  // as forward does, and when the model's RoPE depends on the sequence length (dynamic NTK,
  // LongRoPE) and the positions differ.
  void decode_batch(std::span<const int32_t> tokens, std::span<const int64_t> positions,
                    float* logits);
  // Room in the KV caches of sequences [0, sequences) for `positions` positions each (at most
  // max_seq()), so the calls that run them never grow a cache: an engine's context allocated up
  // front. Changes no result. Throws qf::Error if sequences < 1.
  void reserve_context(int64_t sequences, int64_t positions);

  // ---- One layer at a time (layer-by-layer calibration) ------------------------------------
  // x [n, hidden] = the token embeddings of `tokens`. Throws qf::Error for an id out of range.
  void embed(std::span<const int32_t> tokens, float* x) const;
  // Runs decoder layer `layer` in place on the hidden states x [n, hidden] of one sequence at
  // positions [0, n), using that layer's slot of the KV cache as scratch (n <= max_seq()).
  // `weights` replaces the layer's own weights when given (e.g. fake-quantized copies);
  // `observer` (optional) sees each Linear input and the keys/values.
  void forward_layer(int64_t layer, float* x, int64_t n, LayerObserver* observer = nullptr,
                     const LayerWeights* weights = nullptr);
  // logits [n, vocab] from the hidden states x [n, hidden] (final RMSNorm, output head).
  void head(const float* x, int64_t n, float* logits);

 private:
  void ensure_capacity(int64_t n);
  // cos/sin of every RoPE for the positions [pos, pos + n) of this call.
  void prepare_rope(int64_t pos, int64_t n);
  void linear(const EngineLinear& L, const float* x, int64_t n, float* y);
  // Linears over the same input x [n, in] (q/k/v, gate/up): ys[i] = Ls[i](x). One shared-input
  // product (kernels' linear_forward_shared_input) when none transforms its input (AWQ /
  // SmoothQuant pre-scale, simulated activation quantization), else linear() one by one.
  void linear_shared_input(std::initializer_list<const EngineLinear*> Ls, const float* x, int64_t n,
                           std::initializer_list<float*> ys);
  // Applies norm `slot` of the layer to rows of `cols` (x and out may alias); copies x to out when
  // the layer has no such norm.
  void norm_rows(const LayerWeights& L, NormSlot slot, const float* x, int64_t n, int64_t cols,
                 float* out) const;
  // x_ += y * residual_scale over n tokens (in parallel over tokens).
  void add_residual(const float* y, int64_t n);
  // One layer over x_ [n, hidden] at positions [pos, pos + n).
  void run_layer(int64_t l, const LayerWeights& L, int64_t pos, int64_t n, LayerObserver* obs);
  // The attention block of layer l over x_ (pre-norm, q/k/v, RoPE, cache, attention, o_proj,
  // residual).
  void attention_block(int64_t l, const LayerSpec& spec, const LayerWeights& L, int64_t pos,
                       int64_t n, LayerObserver* obs);
  void attention(int64_t l, const LayerSpec& spec, const LayerWeights& L, int64_t pos, int64_t n);
  // Multi-head latent attention's queries, keys and values (RoPE applied) into q_, k_, v_
  // from xb_ [n, hidden] (normed).
  void mla_qkv(const LayerSpec& spec, const LayerWeights& L, int64_t pos, int64_t n,
               LayerObserver* obs);
  // The gated MLP act(gate(x)) * up(x) -> down of slots {gate, up, down} (or {-1, gate_up,
  // down} when fused on disk: gate rows then up rows, or alternating when `interleaved`, as
  // gpt-oss experts) over x [n, hidden] into y [n, hidden] (y may be x).
  // `expert` is passed to the observer with the activation.
  void gated_mlp(const LayerWeights& L, const std::array<int, 3>& slots, int64_t inter,
                 const float* x, int64_t n, float* y, int expert, LayerObserver* obs,
                 bool interleaved = false);
  // The MoE block over xb_ [n, hidden] (normed) into xb_: routing, each routed expert once
  // over the rows routed to it, the shared expert.
  void moe(const LayerSpec& spec, const LayerWeights& L, int64_t n, LayerObserver* obs);
  // The Mamba2 mixer of layer l over xb_ [n, hidden] (normed) into xb_ (engine/mamba_mixer.cpp):
  // rows of one sequence from its state, or during decode_batch row t of sequence t.
  void mamba_mixer(int64_t l, const LayerSpec& spec, const LayerWeights& L, int64_t n,
                   LayerObserver* obs);
  // A Mamba model's sequence starts anew at 0 or continues where it stopped.
  void check_mamba_position(int64_t sequence, int64_t pos);

  ModelWeights w_;
  int64_t max_seq_ = 0;
  KernelMode kernels_ = KernelMode::exact;
  bool llama_cpp_attention_ = false;
  bool prefill_attention_amx_ = true;
  std::unique_ptr<ThreadPool> pool_;
  std::vector<KvCache> kv_;  // per sequence (forward's `sequence`, decode_batch's rows)
  std::vector<MambaCache> mamba_;  // per sequence, beside kv_ (empty states without Mamba)
  // Where the rows of the current call go: rows t = 0..n-1 are positions pos + t of sequence
  // seq_, or, during decode_batch, row t is sequence t at batch_pos_[t].
  int64_t seq_ = 0;
  const int64_t* batch_pos_ = nullptr;
  // Whether attention(..., n) runs on kernels::attend_prefill_amx.
  bool prefill_attention_on_amx(int64_t n) const;
  int64_t row_position(int64_t pos, int64_t t) const { return batch_pos_ ? batch_pos_[t] : pos + t; }
  KvCache& row_cache(int64_t t) { return kv_[size_t(batch_pos_ ? t : seq_)]; }
  KvCache& sequence_cache(int64_t s);
  std::vector<RopeRows> rope_;  // per Architecture::ropes, for the current call
  // Run state, [capacity, ...] rows per token.
  int64_t capacity_ = 0;
  std::vector<float> x_, xb_, q_, k_, v_, att_, hb_, hb2_, fused_, scaled_, actq_;
  // Attention split into parts (attention()): each row's first part, the parts' unnormalised
  // outputs [parts, heads * v_head_dim], maxima and sums [parts, heads].
  std::vector<int64_t> part_base_;
  std::vector<float> part_out_, part_max_, part_sum_;
  // MoE: router logits [n, experts], rows gathered for one expert and its output, the sum.
  std::vector<float> logits_, gathered_, expert_out_, moe_sum_;
  // Routing scratch (kept across calls: decode routes one token per layer per step).
  std::vector<float> probs_, choice_, chosen_weight_, route_weight_;
  std::vector<int> order_, chosen_;
  std::vector<int64_t> route_start_, route_next_, route_token_;
  // MLA: the q latent, kv_a_proj_with_mqa's output, the kv latent, kv_b_proj's output.
  std::vector<float> q_latent_, kv_a_, kv_latent_, kv_b_;
  // Mamba: in_proj's output [n, z | xBC | dt], dt after softplus [n, heads], the SSM output
  // [n, inner]. Latent MoE: the experts' input [n, latent] and the routed part [n, hidden].
  std::vector<float> zxbcdt_, dt_, ssm_y_, moe_latent_in_, moe_routed_;
};

}  // namespace qf

// The forward pass of a Llama-family decoder (Llama, Mistral, Qwen2, Qwen3), in the spirit of
// llama2.c's run.c: weights (as stored), a run state of float32 activations, a float32 KV cache.
// A call processes a window of tokens at once (matrix-matrix products: prefill) or a single
// token (matrix-vector products: decode).
#pragma once

#include "engine/weights.h"
#include "kernels/ops.h"

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

namespace qf {

class ThreadPool;

struct ModelOptions {
  int threads = 0;        // 0: all hardware threads
  int64_t max_seq = 0;    // KV cache length; 0: max_position_embeddings
};

class Model {
 public:
  // Loads the checkpoint (see ModelWeights::load for errors).
  static std::unique_ptr<Model> load(const std::filesystem::path& dir, const ModelOptions& opt);
  explicit Model(ModelWeights weights, const ModelOptions& opt);
  ~Model();

  const Architecture& arch() const { return w_.arch; }
  const ModelWeights& weights() const { return w_; }
  int64_t max_seq() const { return max_seq_; }
  int64_t vocab_size() const { return w_.arch.vocab_size; }
  ThreadPool& pool() { return *pool_; }

  // Runs `tokens` at positions [pos, pos + n): the KV cache must hold positions [0, pos) from
  // earlier calls (pos == 0 starts a new sequence). Writes logits [n, vocab] when `all_logits`,
  // else the last token's [vocab], to `logits`. Throws qf::Error if pos + n exceeds max_seq()
  // or a token id is out of range.
  void forward(std::span<const int32_t> tokens, int64_t pos, float* logits, bool all_logits);

 private:
  void ensure_capacity(int64_t n);
  void linear(const EngineLinear& L, const float* x, int64_t n, float* y);

  ModelWeights w_;
  int64_t max_seq_ = 0;
  std::unique_ptr<ThreadPool> pool_;
  RopeTable rope_;
  // Run state, [capacity, ...] rows per token.
  int64_t capacity_ = 0;
  std::vector<float> x_, xb_, q_, k_, v_, att_, hb_, hb2_, scaled_;
  std::vector<float> key_cache_, value_cache_;  // [layers, max_seq, kv_dim]
};

}  // namespace qf

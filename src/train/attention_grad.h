// Grouped-query causal self-attention over one sequence and its gradients with respect to the
// queries, keys and values. Templated on the scalar (float, double).
#pragma once

#include <cstdint>

namespace qf {

class ThreadPool;

// tokens T, query heads H, key/value heads Hkv (H a multiple of Hkv: query head h reads
// key/value head h / (H / Hkv)), head size d, softmax scale (Llama: d^-0.5).
struct AttentionShape {
  int64_t tokens = 0, heads = 0, kv_heads = 0, head_dim = 0;
  double scale = 0;
  int64_t q_width() const { return heads * head_dim; }
  int64_t kv_width() const { return kv_heads * head_dim; }
  // Elements of the saved probabilities: [heads, tokens, tokens] (causal: the upper triangle
  // is zero), the one activation that grows with tokens².
  int64_t probs_size() const { return heads * tokens * tokens; }
};

// q [T, H, d], k, v [T, Hkv, d] (row t = position t). For query i of head h:
//   p_ij = softmax_j≤i(scale · q_i·k_j),  out_i = Σ_j p_ij v_j,
// out [T, H, d]; probs [H, T, T] receives p (what the backward needs).
template <typename T>
void attention_forward(const AttentionShape& s, const T* q, const T* k, const T* v, T* out,
                       T* probs, ThreadPool* pool = nullptr);

// Given dout [T, H, d] and the forward's q, k, v, probs:
//   dv_j = Σ_i p_ij dout_i,  dp_ij = dout_i·v_j,  ds_ij = p_ij (dp_ij − Σ_j' p_ij' dp_ij'),
//   dq_i = scale Σ_j ds_ij k_j,  dk_j = scale Σ_i ds_ij q_i,
// summed over the query heads that share a key/value head. dq [T, H, d], dk, dv [T, Hkv, d]
// are written.
template <typename T>
void attention_backward(const AttentionShape& s, const T* q, const T* k, const T* v,
                        const T* probs, const T* dout, T* dq, T* dk, T* dv,
                        ThreadPool* pool = nullptr);

}  // namespace qf

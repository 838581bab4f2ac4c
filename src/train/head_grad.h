// The output head of a Llama model as a loss: final RMSNorm, lm_head, log-softmax over the
// vocabulary, then cross-entropy against token ids or KL(teacher ‖ student) against a
// teacher's logits, with the gradients of the loss with respect to the hidden states, the norm
// weight and the head weight. Templated on the scalar (float, double). Plain Llama head only:
// no logit soft-capping or scaling (Gemma 3, Granite).
#pragma once

#include <cstdint>

namespace qf {

struct HeadShape {
  int64_t tokens = 0, hidden = 0, vocab = 0;
  double eps = 1e-6;  // the final norm's
};

// The gradients a head loss returns: dx [tokens, hidden] is written; dnorm_w [hidden] and
// dhead_w [vocab, hidden] are accumulated (either may be null: not wanted).
template <typename T>
struct HeadGrads {
  T* dx = nullptr;
  T* dnorm_w = nullptr;
  T* dhead_w = nullptr;
};

// Mean over the tokens of −log softmax(logits_t)[target_t], logits = rmsnorm(x, norm_w) ·
// head_wᵀ; x [tokens, hidden], norm_w [hidden], head_w [vocab, hidden], targets [tokens] in
// [0, vocab). Returns the loss (nats per token) and fills `grads` with its gradients. Throws
// qf::Error for a target out of range.
template <typename T>
T head_cross_entropy(const HeadShape& s, const T* x, const T* norm_w, const T* head_w,
                     const int32_t* targets, const HeadGrads<T>& grads);

// Mean over the tokens of KL(p ‖ q) = Σ_v p_v (log p_v − log q_v), p = softmax(teacher_logits_t)
// [tokens, vocab], q = the student's softmax as above. Returns the loss (nats per token); the
// gradient wrt the student's logits is (q − p) / tokens.
template <typename T>
T head_kl(const HeadShape& s, const T* x, const T* norm_w, const T* head_w,
          const T* teacher_logits, const HeadGrads<T>& grads);

}  // namespace qf

// Causal grouped-query attention: the forward keeps the probabilities, the backward is the
// softmax Jacobian applied row by row.
#include "train/attention_grad.h"

#include "core/thread_pool.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace qf {

template <typename T>
void attention_forward(const AttentionShape& s, const T* q, const T* k, const T* v, T* out,
                       T* probs, ThreadPool* pool) {
  const int64_t n = s.tokens, d = s.head_dim, group = s.heads / s.kv_heads;
  const int64_t qw = s.q_width(), kw = s.kv_width();
  const T scale = T(s.scale);
  std::fill(probs, probs + s.probs_size(), T(0));
  // Heads write disjoint rows of out and probs: one task per head.
  auto head = [&](int64_t h) {
    const int64_t kvh = h / group;
    for (int64_t i = 0; i < n; ++i) {
      const T* qi = q + i * qw + h * d;
      T* p = probs + (h * n + i) * n;
      T mx = -INFINITY;
      for (int64_t j = 0; j <= i; ++j) {
        const T* kj = k + j * kw + kvh * d;
        T dot = 0;
        for (int64_t c = 0; c < d; ++c) dot += qi[c] * kj[c];
        p[j] = dot * scale;
        mx = std::max(mx, p[j]);
      }
      T sum = 0;
      for (int64_t j = 0; j <= i; ++j) {
        p[j] = std::exp(p[j] - mx);
        sum += p[j];
      }
      for (int64_t j = 0; j <= i; ++j) p[j] /= sum;
      T* oi = out + i * qw + h * d;
      std::fill(oi, oi + d, T(0));
      for (int64_t j = 0; j <= i; ++j) {
        const T* vj = v + j * kw + kvh * d;
        for (int64_t c = 0; c < d; ++c) oi[c] += p[j] * vj[c];
      }
    }
  };
  if (pool) pool->parallel_for(s.heads, head);
  else
    for (int64_t h = 0; h < s.heads; ++h) head(h);
}

template <typename T>
void attention_backward(const AttentionShape& s, const T* q, const T* k, const T* v,
                        const T* probs, const T* dout, T* dq, T* dk, T* dv, ThreadPool* pool) {
  const int64_t n = s.tokens, d = s.head_dim, group = s.heads / s.kv_heads;
  const int64_t qw = s.q_width(), kw = s.kv_width();
  const T scale = T(s.scale);
  std::fill(dq, dq + n * qw, T(0));
  std::fill(dk, dk + n * kw, T(0));
  std::fill(dv, dv + n * kw, T(0));
  // dk and dv sum over the heads of a key/value head's group: one task per key/value head
  // runs its group's heads in order, so every sum runs in the serial order.
  // dp_ij = dout_i·v_j once per row (the same values in the same order as computing it twice).
  auto head = [&](int64_t h, std::vector<T>& dps) {
    const int64_t kvh = h / group;
    for (int64_t i = 0; i < n; ++i) {
      const T* p = probs + (h * n + i) * n;
      const T* go = dout + i * qw + h * d;
      // dp_ij = dout_i·v_j, and the probability-weighted mean of dp the softmax subtracts.
      T mean = 0;
      for (int64_t j = 0; j <= i; ++j) {
        const T* vj = v + j * kw + kvh * d;
        T dp = 0;
        for (int64_t c = 0; c < d; ++c) dp += go[c] * vj[c];
        dps[size_t(j)] = dp;
        mean += p[j] * dp;
      }
      const T* qi = q + i * qw + h * d;
      T* dqi = dq + i * qw + h * d;
      for (int64_t j = 0; j <= i; ++j) {
        const T* kj = k + j * kw + kvh * d;
        T* dkj = dk + j * kw + kvh * d;
        T* dvj = dv + j * kw + kvh * d;
        const T ds = p[j] * (dps[size_t(j)] - mean) * scale;
        for (int64_t c = 0; c < d; ++c) {
          dvj[c] += p[j] * go[c];
          dqi[c] += ds * kj[c];
          dkj[c] += ds * qi[c];
        }
      }
    }
  };
  auto kv_head = [&](int64_t kvh) {
    std::vector<T> dps(static_cast<size_t>(n));
    for (int64_t h = kvh * group; h < (kvh + 1) * group; ++h) head(h, dps);
  };
  if (pool) pool->parallel_for(s.kv_heads, kv_head);
  else
    for (int64_t kvh = 0; kvh < s.kv_heads; ++kvh) kv_head(kvh);
}

#define QF_INSTANTIATE(T)                                                                   \
  template void attention_forward<T>(const AttentionShape&, const T*, const T*, const T*, T*, \
                                     T*, ThreadPool*);                                        \
  template void attention_backward<T>(const AttentionShape&, const T*, const T*, const T*,    \
                                      const T*, const T*, T*, T*, T*, ThreadPool*);
QF_INSTANTIATE(float)
QF_INSTANTIATE(double)
#undef QF_INSTANTIATE

}  // namespace qf

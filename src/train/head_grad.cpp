// Both head losses share the forward (norm, product, log-softmax) and the backward from
// dL/dlogits; they differ only in the target distribution (one-hot, or the teacher's).
#include "train/head_grad.h"

#include "core/error.h"
#include "train/linear_grad.h"
#include "train/rmsnorm_grad.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace qf {

namespace {

// log softmax of row[0, n) into out.
template <typename T>
void log_softmax(const T* row, int64_t n, T* out) {
  const T mx = *std::max_element(row, row + n);
  T sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += std::exp(row[i] - mx);
  const T lse = mx + std::log(sum);
  for (int64_t i = 0; i < n; ++i) out[i] = row[i] - lse;
}

// Runs the head on x, calls target(t, logq_t, dlogits_t) per token, which returns the token's
// loss and writes dL_t/dlogits_t (before the 1/tokens mean), then back-propagates.
template <typename T, typename Target>
T head_loss(const HeadShape& s, const T* x, const T* norm_w, const T* head_w,
            const HeadGrads<T>& g, Target target) {
  const int64_t n = s.tokens, H = s.hidden, V = s.vocab;
  std::vector<T> xn(size_t(n * H)), inv(static_cast<size_t>(n)), logits(size_t(n * V)),
      logq(static_cast<size_t>(V));
  rmsnorm_forward<T>(x, norm_w, n, H, s.eps, xn.data(), inv.data());
  linear_forward<T>(xn.data(), head_w, nullptr, n, H, V, logits.data());
  T loss = 0;
  const T mean = T(1) / T(n);
  for (int64_t t = 0; t < n; ++t) {
    T* row = logits.data() + t * V;
    log_softmax(row, V, logq.data());
    loss += target(t, logq.data(), row);  // row now holds dL_t/dlogits
    for (int64_t v = 0; v < V; ++v) row[v] *= mean;
  }
  std::vector<T> dxn(size_t(n * H));
  std::vector<T> scratch_dw;
  T* dhead = g.dhead_w;
  if (!dhead) {  // linear_backward always accumulates dW
    scratch_dw.assign(size_t(V * H), T(0));
    dhead = scratch_dw.data();
  }
  linear_backward<T>(xn.data(), head_w, logits.data(), n, H, V, dxn.data(), dhead, nullptr);
  std::vector<T> scratch_dn;
  T* dnorm = g.dnorm_w;
  if (!dnorm) {
    scratch_dn.assign(size_t(H), T(0));
    dnorm = scratch_dn.data();
  }
  std::vector<T> scratch_dx;
  T* dx = g.dx;
  if (!dx) {
    scratch_dx.resize(size_t(n * H));
    dx = scratch_dx.data();
  }
  rmsnorm_backward<T>(x, norm_w, inv.data(), dxn.data(), n, H, dx, dnorm);
  return loss * mean;
}

}  // namespace

template <typename T>
T head_cross_entropy(const HeadShape& s, const T* x, const T* norm_w, const T* head_w,
                     const int32_t* targets, const HeadGrads<T>& grads) {
  for (int64_t t = 0; t < s.tokens; ++t)
    if (targets[t] < 0 || targets[t] >= s.vocab)
      fail("head_cross_entropy: target {} of token {} is outside the vocabulary [0, {})",
           targets[t], t, s.vocab);
  return head_loss<T>(s, x, norm_w, head_w, grads, [&](int64_t t, const T* logq, T* d) {
    for (int64_t v = 0; v < s.vocab; ++v) d[v] = std::exp(logq[v]);
    d[targets[t]] -= T(1);
    return -logq[targets[t]];
  });
}

template <typename T>
T head_kl(const HeadShape& s, const T* x, const T* norm_w, const T* head_w,
          const T* teacher_logits, const HeadGrads<T>& grads) {
  std::vector<T> logp(size_t(s.vocab));
  return head_loss<T>(s, x, norm_w, head_w, grads, [&](int64_t t, const T* logq, T* d) {
    log_softmax(teacher_logits + t * s.vocab, s.vocab, logp.data());
    T kl = 0;
    for (int64_t v = 0; v < s.vocab; ++v) {
      const T p = std::exp(logp[size_t(v)]);
      kl += p * (logp[size_t(v)] - logq[v]);
      d[v] = std::exp(logq[v]) - p;
    }
    return kl;
  });
}

#define QF_INSTANTIATE(T)                                                                    \
  template T head_cross_entropy<T>(const HeadShape&, const T*, const T*, const T*,           \
                                   const int32_t*, const HeadGrads<T>&);                     \
  template T head_kl<T>(const HeadShape&, const T*, const T*, const T*, const T*,            \
                        const HeadGrads<T>&);
QF_INSTANTIATE(float)
QF_INSTANTIATE(double)
#undef QF_INSTANTIATE

}  // namespace qf

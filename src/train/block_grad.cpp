// The Llama block as a sequence of the folder's ops; the backward visits them in reverse and
// adds the residual paths' gradients where the forward added the residuals.
#include "train/block_grad.h"

#include "train/attention_grad.h"
#include "train/linear_grad.h"
#include "train/rmsnorm_grad.h"

#include <algorithm>

namespace qf {

namespace {

AttentionShape attention_shape(const BlockShape& s, int64_t tokens) {
  return {tokens, s.heads, s.kv_heads, s.head_dim, s.attention_scale};
}

}  // namespace

template <typename T>
void block_forward(const BlockShape& s, const BlockWeights<T>& w, const RopeTable<T>& rope,
                   const T* x, int64_t tokens, T* y, BlockSaved<T>& sv) {
  const int64_t n = tokens, H = s.hidden, qw = s.q_width(), kw = s.kv_width();
  const AttentionShape as = attention_shape(s, n);
  sv.tokens = n;
  sv.x.assign(x, x + n * H);
  sv.n1.resize(size_t(n * H));
  sv.inv_rms1.resize(size_t(n));
  sv.q.resize(size_t(n * qw));
  sv.k.resize(size_t(n * kw));
  sv.v.resize(size_t(n * kw));
  sv.probs.resize(size_t(as.probs_size()));
  sv.att.resize(size_t(n * qw));
  sv.h.resize(size_t(n * H));
  sv.n2.resize(size_t(n * H));
  sv.inv_rms2.resize(size_t(n));

  // Attention half.
  rmsnorm_forward<T>(sv.x.data(), w.attn_norm.data(), n, H, s.eps, sv.n1.data(),
                     sv.inv_rms1.data());
  linear_forward<T>(sv.n1.data(), w.q.data(), nullptr, n, H, qw, sv.q.data());
  linear_forward<T>(sv.n1.data(), w.k.data(), nullptr, n, H, kw, sv.k.data());
  linear_forward<T>(sv.n1.data(), w.v.data(), nullptr, n, H, kw, sv.v.data());
  rope_forward<T>(rope, sv.q.data(), n, s.heads, s.head_dim);
  rope_forward<T>(rope, sv.k.data(), n, s.kv_heads, s.head_dim);
  attention_forward<T>(as, sv.q.data(), sv.k.data(), sv.v.data(), sv.att.data(),
                       sv.probs.data());
  linear_forward<T>(sv.att.data(), w.o.data(), nullptr, n, qw, H, sv.h.data());
  for (int64_t i = 0; i < n * H; ++i) sv.h[size_t(i)] += sv.x[size_t(i)];

  // MLP half.
  rmsnorm_forward<T>(sv.h.data(), w.mlp_norm.data(), n, H, s.eps, sv.n2.data(),
                     sv.inv_rms2.data());
  const MlpShape ms{n, H, s.intermediate};
  mlp_forward<T>(ms, sv.n2.data(), w.gate.data(), w.up.data(), w.down.data(), y, sv.mlp);
  for (int64_t i = 0; i < n * H; ++i) y[i] += sv.h[size_t(i)];
}

template <typename T>
void block_backward(const BlockShape& s, const BlockWeights<T>& w, const RopeTable<T>& rope,
                    const BlockSaved<T>& sv, const T* dy, T* dx, BlockWeights<T>& g) {
  const int64_t n = sv.tokens, H = s.hidden, qw = s.q_width(), kw = s.kv_width();
  const AttentionShape as = attention_shape(s, n);
  std::vector<T> tmp(size_t(n * H));

  // y = h + mlp(n2): dh = dy + rmsnorm'(dmlp input).
  std::vector<T> dh(dy, dy + n * H);
  const MlpShape ms{n, H, s.intermediate};
  mlp_backward<T>(ms, sv.n2.data(), w.gate.data(), w.up.data(), w.down.data(), sv.mlp, dy,
                  tmp.data(), g.gate.data(), g.up.data(), g.down.data());
  rmsnorm_backward<T>(sv.h.data(), w.mlp_norm.data(), sv.inv_rms2.data(), tmp.data(), n, H,
                      tmp.data(), g.mlp_norm.data());
  for (size_t i = 0; i < dh.size(); ++i) dh[i] += tmp[i];

  // h = x + o_proj(att): dx = dh + rmsnorm'(d attention input).
  std::vector<T> datt(size_t(n * qw)), dq(size_t(n * qw)), dk(size_t(n * kw)), dv(size_t(n * kw));
  linear_backward<T>(sv.att.data(), w.o.data(), dh.data(), n, qw, H, datt.data(), g.o.data(),
                     nullptr);
  attention_backward<T>(as, sv.q.data(), sv.k.data(), sv.v.data(), sv.probs.data(), datt.data(),
                        dq.data(), dk.data(), dv.data());
  rope_backward<T>(rope, dq.data(), n, s.heads, s.head_dim);
  rope_backward<T>(rope, dk.data(), n, s.kv_heads, s.head_dim);
  // n1 feeds q, k and v: its gradient is the sum of the three.
  std::vector<T> dn1(size_t(n * H)), part(size_t(n * H));
  linear_backward<T>(sv.n1.data(), w.q.data(), dq.data(), n, H, qw, dn1.data(), g.q.data(),
                     nullptr);
  linear_backward<T>(sv.n1.data(), w.k.data(), dk.data(), n, H, kw, part.data(), g.k.data(),
                     nullptr);
  for (size_t i = 0; i < dn1.size(); ++i) dn1[i] += part[i];
  linear_backward<T>(sv.n1.data(), w.v.data(), dv.data(), n, H, kw, part.data(), g.v.data(),
                     nullptr);
  for (size_t i = 0; i < dn1.size(); ++i) dn1[i] += part[i];
  rmsnorm_backward<T>(sv.x.data(), w.attn_norm.data(), sv.inv_rms1.data(), dn1.data(), n, H,
                      tmp.data(), g.attn_norm.data());
  for (int64_t i = 0; i < n * H; ++i) dx[i] = dh[size_t(i)] + tmp[size_t(i)];
}

#define QF_INSTANTIATE(T)                                                                    \
  template struct BlockSaved<T>;                                                             \
  template void block_forward<T>(const BlockShape&, const BlockWeights<T>&,                  \
                                 const RopeTable<T>&, const T*, int64_t, T*, BlockSaved<T>&); \
  template void block_backward<T>(const BlockShape&, const BlockWeights<T>&,                 \
                                  const RopeTable<T>&, const BlockSaved<T>&, const T*, T*,   \
                                  BlockWeights<T>&);
QF_INSTANTIATE(float)
QF_INSTANTIATE(double)
#undef QF_INSTANTIATE

}  // namespace qf

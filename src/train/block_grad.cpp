// The Llama block as a sequence of the folder's ops; the backward visits them in reverse and
// adds the residual paths' gradients where the forward added the residuals. The MLP is spelled
// out here (as mlp_grad computes it) so that its down_proj input can be fake-quantized.
#include "train/block_grad.h"

#include "core/thread_pool.h"
#include "engine/activation_quant.h"
#include "train/attention_grad.h"
#include "train/linear_fast.h"
#include "train/linear_grad.h"
#include "train/rmsnorm_grad.h"

#include <algorithm>
#include <cmath>
#include <type_traits>

namespace qf {

namespace {

AttentionShape attention_shape(const BlockShape& s, int64_t tokens) {
  return {tokens, s.heads, s.kv_heads, s.head_dim, s.attention_scale};
}

// The float fast path where a pool is given, linear_grad's loops otherwise.
template <typename T>
void lin_fwd(const T* x, const T* w, int64_t n, int64_t in, int64_t out, T* y, ThreadPool* pool) {
  if constexpr (std::is_same_v<T, float>)
    if (pool) return linear_forward_fast(x, w, n, in, out, y, pool);
  linear_forward<T>(x, w, nullptr, n, in, out, y);
}

template <typename T>
void lin_bwd(const T* x, const T* w, const T* dy, int64_t n, int64_t in, int64_t out, T* dx,
             T* dw, ThreadPool* pool) {
  if constexpr (std::is_same_v<T, float>)
    if (pool) return linear_backward_fast(x, w, dy, n, in, out, dx, dw, pool);
  linear_backward<T>(x, w, dy, n, in, out, dx, dw, nullptr);
}

template <typename T>
ThreadPool* pool_for(ThreadPool* pool) {
  return std::is_same_v<T, float> ? pool : nullptr;
}

float act_bound(ActQuant mode) {
  switch (mode) {
    case ActQuant::nvfp4: return 6.f * 448.f;
    case ActQuant::fp8: return 448.f;
    case ActQuant::int8: return 127.f;
    default: return INFINITY;
  }
}

// x [n] quantized in place by the engine's simulation (in float, as the engine computes it);
// pass[i] = 1 where |x| lies within the calibrated range.
template <typename T>
void quantize_input(ActQuant mode, float scale, std::vector<T>& x, std::vector<uint8_t>& pass) {
  if (!(scale > 0.f)) {  // an input the export leaves unquantized (its Linear is kept)
    pass.assign(x.size(), 1);
    return;
  }
  const float bound = act_bound(mode) * scale;
  pass.resize(x.size());
  for (size_t i = 0; i < x.size(); ++i) pass[i] = std::fabs(float(x[i])) <= bound ? 1 : 0;
  if constexpr (std::is_same_v<T, float>) {
    fake_quantize_activations(mode, scale, x.data(), int64_t(x.size()));
  } else {
    std::vector<float> f(x.begin(), x.end());
    fake_quantize_activations(mode, scale, f.data(), int64_t(f.size()));
    std::copy(f.begin(), f.end(), x.begin());
  }
}

template <typename T>
void mask(std::vector<T>& g, const std::vector<uint8_t>& pass) {
  for (size_t i = 0; i < g.size(); ++i)
    if (!pass[i]) g[i] = T(0);
}

}  // namespace

template <typename T>
void block_forward(const BlockShape& s, const BlockWeights<T>& w, const RopeTable<T>& rope,
                   const T* x, int64_t tokens, T* y, BlockSaved<T>& sv, const BlockActQuant* act,
                   ThreadPool* pool_in) {
  ThreadPool* pool = pool_for<T>(pool_in);
  const bool aq = act && act->mode != ActQuant::none;
  const int64_t n = tokens, H = s.hidden, qw = s.q_width(), kw = s.kv_width();
  const int64_t I = s.intermediate;
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
  if (aq) quantize_input(act->mode, act->attn_in, sv.n1, sv.pass_n1);
  lin_fwd<T>(sv.n1.data(), w.q.data(), n, H, qw, sv.q.data(), pool);
  lin_fwd<T>(sv.n1.data(), w.k.data(), n, H, kw, sv.k.data(), pool);
  lin_fwd<T>(sv.n1.data(), w.v.data(), n, H, kw, sv.v.data(), pool);
  rope_forward<T>(rope, sv.q.data(), n, s.heads, s.head_dim);
  rope_forward<T>(rope, sv.k.data(), n, s.kv_heads, s.head_dim);
  attention_forward<T>(as, sv.q.data(), sv.k.data(), sv.v.data(), sv.att.data(),
                       sv.probs.data(), pool);
  if (aq) quantize_input(act->mode, act->o_in, sv.att, sv.pass_att);
  lin_fwd<T>(sv.att.data(), w.o.data(), n, qw, H, sv.h.data(), pool);
  for (int64_t i = 0; i < n * H; ++i) sv.h[size_t(i)] += sv.x[size_t(i)];

  // MLP half: y = h + down(silu(gate(n2)) · up(n2)), as mlp_forward computes it.
  rmsnorm_forward<T>(sv.h.data(), w.mlp_norm.data(), n, H, s.eps, sv.n2.data(),
                     sv.inv_rms2.data());
  if (aq) quantize_input(act->mode, act->mlp_in, sv.n2, sv.pass_n2);
  MlpSaved<T>& m = sv.mlp;
  m.gate.resize(size_t(n * I));
  m.up.resize(size_t(n * I));
  m.act.resize(size_t(n * I));
  lin_fwd<T>(sv.n2.data(), w.gate.data(), n, H, I, m.gate.data(), pool);
  lin_fwd<T>(sv.n2.data(), w.up.data(), n, H, I, m.up.data(), pool);
  for (size_t i = 0; i < m.act.size(); ++i) {
    const T g = m.gate[i];
    m.act[i] = g / (T(1) + std::exp(-g)) * m.up[i];
  }
  if (aq) quantize_input(act->mode, act->down_in, m.act, sv.pass_act);
  lin_fwd<T>(m.act.data(), w.down.data(), n, I, H, y, pool);
  for (int64_t i = 0; i < n * H; ++i) y[i] += sv.h[size_t(i)];
}

template <typename T>
void block_backward(const BlockShape& s, const BlockWeights<T>& w, const RopeTable<T>& rope,
                    const BlockSaved<T>& sv, const T* dy, T* dx, BlockWeights<T>& g,
                    const BlockActQuant* act, ThreadPool* pool_in) {
  ThreadPool* pool = pool_for<T>(pool_in);
  const bool aq = act && act->mode != ActQuant::none;
  const int64_t n = sv.tokens, H = s.hidden, qw = s.q_width(), kw = s.kv_width();
  const int64_t I = s.intermediate;
  const AttentionShape as = attention_shape(s, n);
  std::vector<T> tmp(size_t(n * H));

  // y = h + mlp(n2): dh = dy + rmsnorm'(dmlp input). The MLP as mlp_backward computes it.
  std::vector<T> dh(dy, dy + n * H);
  {
    const MlpSaved<T>& m = sv.mlp;
    std::vector<T> dact(size_t(n * I)), dgate(size_t(n * I)), dup(size_t(n * I));
    lin_bwd<T>(m.act.data(), w.down.data(), dy, n, I, H, dact.data(), g.down.data(), pool);
    if (aq) mask(dact, sv.pass_act);
    for (size_t i = 0; i < dact.size(); ++i) {
      const T gi = m.gate[i];
      const T sig = T(1) / (T(1) + std::exp(-gi));
      dup[i] = dact[i] * gi * sig;
      dgate[i] = dact[i] * m.up[i] * sig * (T(1) + gi * (T(1) - sig));
    }
    std::vector<T> dx_up(size_t(n * H));
    lin_bwd<T>(sv.n2.data(), w.gate.data(), dgate.data(), n, H, I, tmp.data(), g.gate.data(),
               pool);
    lin_bwd<T>(sv.n2.data(), w.up.data(), dup.data(), n, H, I, dx_up.data(), g.up.data(), pool);
    for (size_t i = 0; i < dx_up.size(); ++i) tmp[i] += dx_up[i];
    if (aq) mask(tmp, sv.pass_n2);
  }
  rmsnorm_backward<T>(sv.h.data(), w.mlp_norm.data(), sv.inv_rms2.data(), tmp.data(), n, H,
                      tmp.data(), g.mlp_norm.data());
  for (size_t i = 0; i < dh.size(); ++i) dh[i] += tmp[i];

  // h = x + o_proj(att): dx = dh + rmsnorm'(d attention input).
  std::vector<T> datt(size_t(n * qw)), dq(size_t(n * qw)), dk(size_t(n * kw)), dv(size_t(n * kw));
  lin_bwd<T>(sv.att.data(), w.o.data(), dh.data(), n, qw, H, datt.data(), g.o.data(), pool);
  if (aq) mask(datt, sv.pass_att);
  attention_backward<T>(as, sv.q.data(), sv.k.data(), sv.v.data(), sv.probs.data(), datt.data(),
                        dq.data(), dk.data(), dv.data(), pool);
  rope_backward<T>(rope, dq.data(), n, s.heads, s.head_dim);
  rope_backward<T>(rope, dk.data(), n, s.kv_heads, s.head_dim);
  // n1 feeds q, k and v: its gradient is the sum of the three.
  std::vector<T> dn1(size_t(n * H)), part(size_t(n * H));
  lin_bwd<T>(sv.n1.data(), w.q.data(), dq.data(), n, H, qw, dn1.data(), g.q.data(), pool);
  lin_bwd<T>(sv.n1.data(), w.k.data(), dk.data(), n, H, kw, part.data(), g.k.data(), pool);
  for (size_t i = 0; i < dn1.size(); ++i) dn1[i] += part[i];
  lin_bwd<T>(sv.n1.data(), w.v.data(), dv.data(), n, H, kw, part.data(), g.v.data(), pool);
  for (size_t i = 0; i < dn1.size(); ++i) dn1[i] += part[i];
  if (aq) mask(dn1, sv.pass_n1);
  rmsnorm_backward<T>(sv.x.data(), w.attn_norm.data(), sv.inv_rms1.data(), dn1.data(), n, H,
                      tmp.data(), g.attn_norm.data());
  for (int64_t i = 0; i < n * H; ++i) dx[i] = dh[size_t(i)] + tmp[size_t(i)];
}

#define QF_INSTANTIATE(T)                                                                    \
  template struct BlockSaved<T>;                                                             \
  template void block_forward<T>(const BlockShape&, const BlockWeights<T>&,                  \
                                 const RopeTable<T>&, const T*, int64_t, T*, BlockSaved<T>&,  \
                                 const BlockActQuant*, ThreadPool*);                          \
  template void block_backward<T>(const BlockShape&, const BlockWeights<T>&,                 \
                                  const RopeTable<T>&, const BlockSaved<T>&, const T*, T*,   \
                                  BlockWeights<T>&, const BlockActQuant*, ThreadPool*);
QF_INSTANTIATE(float)
QF_INSTANTIATE(double)
#undef QF_INSTANTIATE

}  // namespace qf

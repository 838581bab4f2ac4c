// The small per-token operations of a decoder around its Linear layers: RMSNorm, rotary
// position embedding, softmax, SiLU / GELU gating. Float32 in and out; plain loops the compiler
// vectorizes (they are a small share of the time next to the weight products).
#pragma once

#include <cstdint>
#include <vector>

namespace qf {

// out[i] = x[i] / sqrt(mean(x^2) + eps) * weight[i], i < n. out may alias x.
void rmsnorm(const float* x, const float* weight, int64_t n, float eps, float* out);
// The same with the sum of squares in vector order (ops_fast.cpp; the fast kernel mode's norm):
// equal to rmsnorm up to that sum's rounding (a few ulps).
void rmsnorm_fast(const float* x, const float* weight, int64_t n, float eps, float* out);

// Rotary embedding cos/sin for the positions [first, first + count) of one forward call:
// angle = float(pos) * inv_freq[i] in float32, cos and sin times `scaling` (YaRN / LongRoPE
// attention factor), as transformers computes them. Only the first rotary_dim = 2 *
// inv_freq.size() elements of a head rotate (rotate-half layout within them); the rest pass.
struct RopeRows {
  int64_t first = 0, count = 0, rotary_dim = 0;
  std::vector<float> cos, sin;  // [count, rotary_dim / 2]
  void compute(const std::vector<float>& inv_freq, float scaling, int64_t first, int64_t count);
  // Rotates one head in place at absolute position pos (first <= pos < first + count).
  void apply(float* head, int64_t pos) const;
  // DeepSeek's interleaved layout over x[0, rotary_dim): pair i = (x[2i], x[2i + 1]) rotates by
  // angle i, and the result is written de-interleaved: the first elements of the pairs, then
  // the second ones (transformers' apply_rotary_pos_emb_interleave).
  void apply_interleaved(float* x, int64_t pos) const;
};

// In place softmax over x[0, n).
void softmax(float* x, int64_t n);
// In place softmax over [x[0, n), sink], the sink's probability then dropped (gpt-oss attention
// sinks): x sums to less than 1. A sink of -inf gives softmax(x, n) exactly.
void softmax_with_sink(float* x, int64_t n, float sink);

// gate[i] = silu(gate[i]) * up[i], i < n.
void silu_mul(float* gate, const float* up, int64_t n);
// The same with a vectorized exp (Highway's, within 1 ulp of expf; ops_fast.cpp): the fast
// kernel mode's SiLU (KernelMode::fast), several times faster; within a few ulps of silu_mul.
void silu_mul_fast(float* gate, const float* up, int64_t n);
// gate[i] = gelu(gate[i]) * up[i]: the tanh approximation (gelu_pytorch_tanh), or erf.
void gelu_tanh_mul(float* gate, const float* up, int64_t n);
void gelu_erf_mul(float* gate, const float* up, int64_t n);
// gpt-oss experts: g = min(gate[i], limit), u = clamp(up[i], -limit, limit),
// gate[i] = (u + 1) * g * sigmoid(alpha * g).
void clamped_swiglu_mul(float* gate, const float* up, int64_t n, float limit, float alpha);

}  // namespace qf

// Norms, rotary embedding, softmax and SiLU gating as plain float loops.
#include "kernels/ops.h"

#include <algorithm>
#include <cmath>

namespace qf {

void rmsnorm(const float* x, const float* weight, int64_t n, float eps, float* out) {
  float ss = 0.f;
  for (int64_t i = 0; i < n; ++i) ss += x[i] * x[i];
  const float inv = 1.0f / std::sqrt(ss / float(n) + eps);
  for (int64_t i = 0; i < n; ++i) out[i] = weight[i] * (x[i] * inv);
}

void RopeRows::compute(const std::vector<float>& inv_freq, float scaling, int64_t first_pos,
                       int64_t n) {
  const int64_t half = int64_t(inv_freq.size());
  first = first_pos;
  count = n;
  rotary_dim = 2 * half;
  cos.resize(size_t(n * half));
  sin.resize(size_t(n * half));
  for (int64_t t = 0; t < n; ++t)
    for (int64_t i = 0; i < half; ++i) {
      const float angle = float(first_pos + t) * inv_freq[size_t(i)];
      cos[size_t(t * half + i)] = std::cos(angle) * scaling;
      sin[size_t(t * half + i)] = std::sin(angle) * scaling;
    }
}

void RopeRows::apply(float* head, int64_t pos) const {
  const int64_t half = rotary_dim / 2;
  const float* c = cos.data() + (pos - first) * half;
  const float* s = sin.data() + (pos - first) * half;
  for (int64_t i = 0; i < half; ++i) {
    const float a = head[i], b = head[i + half];
    head[i] = a * c[i] - b * s[i];
    head[i + half] = b * c[i] + a * s[i];
  }
}

void RopeRows::apply_interleaved(float* x, int64_t pos) const {
  const int64_t half = rotary_dim / 2;
  const float* c = cos.data() + (pos - first) * half;
  const float* s = sin.data() + (pos - first) * half;
  // The output order differs from the input's: rotate a copy.
  thread_local std::vector<float> in;
  in.assign(x, x + rotary_dim);
  for (int64_t i = 0; i < half; ++i) {
    const float a = in[size_t(2 * i)], b = in[size_t(2 * i + 1)];
    x[i] = a * c[i] - b * s[i];
    x[i + half] = b * c[i] + a * s[i];
  }
}

void softmax(float* x, int64_t n) {
  const float m = *std::max_element(x, x + n);
  float sum = 0.f;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - m);
    sum += x[i];
  }
  const float inv = 1.0f / sum;
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

void softmax_with_sink(float* x, int64_t n, float sink) {
  // The same steps as softmax, with one more term in the max and the sum.
  const float m = std::max(*std::max_element(x, x + n), sink);
  float sum = 0.f;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - m);
    sum += x[i];
  }
  sum += std::exp(sink - m);
  const float inv = 1.0f / sum;
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

void clamped_swiglu_mul(float* gate, const float* up, int64_t n, float limit, float alpha) {
  // GptOssExperts._apply_gate: gate.clamp(max=limit), up.clamp(-limit, limit),
  // (up + 1) * (gate * sigmoid(gate * alpha)).
  for (int64_t i = 0; i < n; ++i) {
    const float g = std::min(gate[i], limit);
    const float u = std::clamp(up[i], -limit, limit);
    const float glu = g * (1.0f / (1.0f + std::exp(-(g * alpha))));
    gate[i] = (u + 1.0f) * glu;
  }
}

void silu_mul(float* gate, const float* up, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    gate[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}


void gelu_tanh_mul(float* gate, const float* up, int64_t n) {
  // PyTorch's tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
  constexpr float kBeta = 0.7978845608028654f, kKappa = 0.044715f;
  for (int64_t i = 0; i < n; ++i) {
    const float x = gate[i];
    const float inner = kBeta * (x + kKappa * x * x * x);
    gate[i] = 0.5f * x * (1.0f + std::tanh(inner)) * up[i];
  }
}

void gelu_erf_mul(float* gate, const float* up, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float x = gate[i];
    gate[i] = x * 0.5f * (1.0f + std::erf(x * 0.7071067811865476f)) * up[i];
  }
}
}  // namespace qf

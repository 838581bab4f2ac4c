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

RopeTable::RopeTable(int64_t hd, int64_t mp, double theta) : head_dim(hd), max_pos(mp) {
  const int64_t half = hd / 2;
  cos.resize(size_t(mp * half));
  sin.resize(size_t(mp * half));
  for (int64_t i = 0; i < half; ++i) {
    const float inv_freq = float(1.0 / std::pow(theta, double(2 * i) / double(hd)));
    for (int64_t p = 0; p < mp; ++p) {
      const float angle = float(p) * inv_freq;
      cos[size_t(p * half + i)] = std::cos(angle);
      sin[size_t(p * half + i)] = std::sin(angle);
    }
  }
}

void RopeTable::apply(float* head, int64_t pos) const {
  const int64_t half = head_dim / 2;
  const float* c = cos.data() + pos * half;
  const float* s = sin.data() + pos * half;
  for (int64_t i = 0; i < half; ++i) {
    const float a = head[i], b = head[i + half];
    head[i] = a * c[i] - b * s[i];
    head[i + half] = b * c[i] + a * s[i];
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

void silu_mul(float* gate, const float* up, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    gate[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

}  // namespace qf

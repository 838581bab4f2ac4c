// The small per-token operations of a decoder around its Linear layers: RMSNorm, rotary
// position embedding, softmax, SiLU gating. Float32 in and out; plain loops the compiler
// vectorizes (they are a small share of the time next to the weight products).
#pragma once

#include <cstdint>
#include <vector>

namespace qf {

// out[i] = x[i] / sqrt(mean(x^2) + eps) * weight[i], i < n. out may alias x.
void rmsnorm(const float* x, const float* weight, int64_t n, float eps, float* out);

// Rotary embedding tables for positions [0, max_pos) and `head_dim` (even): cos/sin of
// pos * theta^(-2i/head_dim), i < head_dim/2, computed as Hugging Face does (float32 inverse
// frequencies, float32 product).
struct RopeTable {
  int64_t head_dim = 0;
  int64_t max_pos = 0;
  std::vector<float> cos, sin;  // [max_pos, head_dim/2]
  RopeTable(int64_t head_dim, int64_t max_pos, double theta);
  // Rotates one head in place at position pos, rotate-half layout (HF): element i pairs with
  // i + head_dim/2.
  void apply(float* head, int64_t pos) const;
};

// In place softmax over x[0, n).
void softmax(float* x, int64_t n);

// gate[i] = silu(gate[i]) * up[i], i < n.
void silu_mul(float* gate, const float* up, int64_t n);

}  // namespace qf

// Llama's SiLU-gated MLP, y = down(silu(gate(x)) · up(x)), and its gradients with respect to
// the input and the three weights. Templated on the scalar (float, double).
#pragma once

#include <cstdint>
#include <vector>

namespace qf {

struct MlpShape {
  int64_t tokens = 0, hidden = 0, intermediate = 0;
};

// What the backward needs besides x and the weights: gate(x), up(x) and the product
// silu(gate)·up that down_proj reads, [tokens, intermediate] each.
template <typename T>
struct MlpSaved {
  std::vector<T> gate, up, act;
};

// x [tokens, hidden]; gate_w, up_w [intermediate, hidden]; down_w [hidden, intermediate];
// y [tokens, hidden] (y must not alias x). silu(g) = g / (1 + e^-g), the engine's formula.
template <typename T>
void mlp_forward(const MlpShape& s, const T* x, const T* gate_w, const T* up_w, const T* down_w,
                 T* y, MlpSaved<T>& saved);

// Given dy [tokens, hidden]: dx [tokens, hidden] is written; dgate_w, dup_w, ddown_w (shapes of
// the weights) are accumulated. silu'(g) = σ(g)·(1 + g·(1 − σ(g))).
template <typename T>
void mlp_backward(const MlpShape& s, const T* x, const T* gate_w, const T* up_w, const T* down_w,
                  const MlpSaved<T>& saved, const T* dy, T* dx, T* dgate_w, T* dup_w,
                  T* ddown_w);

}  // namespace qf

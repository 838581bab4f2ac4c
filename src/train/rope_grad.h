// Rotary position embedding in the rotate-half ("NeoX") layout Llama uses, and its gradient:
// the rotation is orthogonal, so the gradient is the inverse rotation of dL/dy. Templated on
// the scalar (float, double).
#pragma once

#include "model/rope.h"

#include <cstdint>
#include <vector>

namespace qf {

// cos and sin per position and frequency: [positions, half] each, row t for position t. The
// first 2·half elements of a head rotate (pair i = (x_i, x_{i+half})); the rest pass.
template <typename T>
struct RopeTable {
  int64_t positions = 0, half = 0;
  std::vector<T> cos, sin;
};

// The table the engine uses for positions [0, n) of `spec` (kernels' RopeRows: angles and
// cos/sin in float32, times the attention factor), widened to T.
template <typename T>
RopeTable<T> rope_table(const RopeSpec& spec, int64_t n);

// Rotates x [rows, heads, head_dim] in place; row t is at position t (rows <= table.positions,
// 2·table.half <= head_dim):
//   y_i = x_i·cos_i − x_{i+half}·sin_i,  y_{i+half} = x_{i+half}·cos_i + x_i·sin_i.
template <typename T>
void rope_forward(const RopeTable<T>& table, T* x, int64_t rows, int64_t heads, int64_t head_dim);

// dL/dx from dL/dy in place (same shapes): the transposed rotation,
//   dx_i = dy_i·cos_i + dy_{i+half}·sin_i,  dx_{i+half} = dy_{i+half}·cos_i − dy_i·sin_i.
template <typename T>
void rope_backward(const RopeTable<T>& table, T* d, int64_t rows, int64_t heads,
                   int64_t head_dim);

}  // namespace qf

// RMSNorm over rows, y = x · rsqrt(mean(x²) + eps) · w (Llama's plain style), and its
// gradients with respect to x and w. Templated on the scalar (float, double).
#pragma once

#include <cstdint>

namespace qf {

// y [rows, cols] = norm of x [rows, cols] times w [cols]; inv_rms [rows] receives
// rsqrt(mean(x²) + eps) per row, which the backward needs. In float it computes what the
// engine's exact rmsnorm (kernels/ops.h) computes, in the same order. y may alias x.
template <typename T>
void rmsnorm_forward(const T* x, const T* w, int64_t rows, int64_t cols, double eps, T* y,
                     T* inv_rms);

// Given dy [rows, cols] and the forward's x, w and inv_rms (r), per row:
//   dx_j  = r·w_j·dy_j − x_j · r³/cols · Σ_i dy_i·w_i·x_i   (written),
//   dw_j += dy_j·x_j·r                                     (accumulated).
// dx may alias dy.
template <typename T>
void rmsnorm_backward(const T* x, const T* w, const T* inv_rms, const T* dy, int64_t rows,
                      int64_t cols, T* dx, T* dw);

}  // namespace qf

// Each product is one kernels::linear_forward call on an f32 LinearWeight: y = x Wᵀ directly,
// dx = dy W through the weight read as its transpose, dW = dyᵀ x with x read as a transposed
// weight and dy transposed once.
#include "train/linear_fast.h"

#include "kernels/linear.h"

#include <vector>

namespace qf {

namespace {

LinearWeight f32_weight(const float* data, int64_t rows, int64_t cols, bool transposed) {
  LinearWeight w;
  w.format = WeightFormat::f32;
  w.rows = rows;
  w.cols = cols;
  w.data = data;
  w.transposed = transposed;
  return w;
}

}  // namespace

void linear_forward_fast(const float* x, const float* w, int64_t n, int64_t in, int64_t out,
                         float* y, ThreadPool* pool) {
  linear_forward(f32_weight(w, out, in, false), x, n, y, pool, KernelMode::exact);
}

void linear_backward_fast(const float* x, const float* w, const float* dy, int64_t n, int64_t in,
                          int64_t out, float* dx, float* dw, ThreadPool* pool) {
  // dx[t, i] = Σ_o dy[t, o] W[o, i]: W [out, in] is the transpose of an [in, out] weight.
  if (dx) linear_forward(f32_weight(w, in, out, true), dy, n, dx, pool, KernelMode::exact);
  if (!dw) return;
  // dW[o, i] = Σ_t dyᵀ[o, t] x[t, i]: tokens = out rows of dyᵀ, weight = x [n, in] read as the
  // transpose of an [in, n] weight.
  std::vector<float> dyt(size_t(n * out)), prod(size_t(out * in));
  for (int64_t t = 0; t < n; ++t)
    for (int64_t o = 0; o < out; ++o) dyt[size_t(o * n + t)] = dy[t * out + o];
  linear_forward(f32_weight(x, in, n, true), dyt.data(), out, prod.data(), pool,
                 KernelMode::exact);
  for (size_t i = 0; i < prod.size(); ++i) dw[i] += prod[i];
}

}  // namespace qf

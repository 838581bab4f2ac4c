// Each product is one kernels::linear_forward call on an f32 LinearWeight: y = x Wᵀ directly,
// dx = dy W through the weight read as its transpose, dW = dyᵀ x with x read as a transposed
// weight and dy transposed once.
#include "train/linear_fast.h"

#include "core/thread_pool.h"
#include "kernels/linear.h"

#include <algorithm>
#include <vector>

namespace qf {

namespace {

// Rows of dW computed per product (a multiple of the kernels' token tiles).
constexpr int64_t kGradientSliceRows = 1024;

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
  // transpose of an [in, n] weight. In slices of dW's rows, so the scratch stays a few MB where a
  // whole [out, in] product per call would be a second head-sized buffer (an output head's
  // gradient: 128256 x 4096 floats), zeroed and written once more each time.
  const int64_t slice = std::min<int64_t>(out, kGradientSliceRows);
  std::vector<float> dyt(size_t(slice * n)), prod(size_t(slice * in));
  for (int64_t o0 = 0; o0 < out; o0 += slice) {
    const int64_t rows = std::min(slice, out - o0);
    for (int64_t t = 0; t < n; ++t)
      for (int64_t o = 0; o < rows; ++o) dyt[size_t(o * n + t)] = dy[t * out + o0 + o];
    linear_forward(f32_weight(x, in, n, true), dyt.data(), rows, prod.data(), pool,
                   KernelMode::exact);
    auto add = [&](int64_t r) {
      float* d = dw + (o0 + r) * in;
      const float* p = prod.data() + r * in;
      for (int64_t i = 0; i < in; ++i) d[i] += p[i];
    };
    if (pool) pool->parallel_for(rows, add);
    else
      for (int64_t r = 0; r < rows; ++r) add(r);
  }
}

}  // namespace qf

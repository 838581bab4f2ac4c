// The Linear forward and backward of train/linear_grad in float on the engine's exact f32
// matrix-matrix kernels (kernels/linear.h): SIMD, split into tasks of output rows on a thread
// pool, so the result does not depend on the pool's size. Sums run in the kernel's order, not
// linear_grad's input order (a few ulps apart); the block tuning's hot path.
#pragma once

#include <cstdint>

namespace qf {

class ThreadPool;

// y [n, out] = x [n, in] · Wᵀ, W [out, in] row-major. `pool` may be null.
void linear_forward_fast(const float* x, const float* w, int64_t n, int64_t in, int64_t out,
                         float* y, ThreadPool* pool);

// dx [n, in] = dy · W (written; skipped when null); dw [out, in] += dyᵀ · x (accumulated;
// skipped when null).
void linear_backward_fast(const float* x, const float* w, const float* dy, int64_t n, int64_t in,
                          int64_t out, float* dx, float* dw, ThreadPool* pool);

}  // namespace qf

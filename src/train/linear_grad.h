// A Linear layer y = x Wᵀ + b and its gradients, written for clarity (plain loops, no
// threads): the reference the tuning code of issue 12 differentiates through. Templated on the
// scalar (float for real activations, double for the finite-difference checks), instantiated
// for both in linear_grad.cpp.
#pragma once

#include <cstdint>

namespace qf {

// y [n, out] = x [n, in] · Wᵀ (+ b), W [out, in] row-major (the checkpoint's layout), b [out]
// or null. Sums run in T in input order.
template <typename T>
void linear_forward(const T* x, const T* w, const T* b, int64_t n, int64_t in, int64_t out,
                    T* y);

// Given dy = dL/dy [n, out] and the forward's x and W:
//   dx [n, in]   = dy · W            (written; skipped when dx is null),
//   dw [out, in] += dyᵀ · x          (accumulated, so batches can be summed),
//   db [out]     += Σ_rows dy        (accumulated; skipped when db is null).
template <typename T>
void linear_backward(const T* x, const T* w, const T* dy, int64_t n, int64_t in, int64_t out,
                     T* dx, T* dw, T* db);

}  // namespace qf

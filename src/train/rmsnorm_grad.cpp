// RMSNorm forward (the engine's order of operations) and its closed-form backward.
#include "train/rmsnorm_grad.h"

#include <cmath>

namespace qf {

template <typename T>
void rmsnorm_forward(const T* x, const T* w, int64_t rows, int64_t cols, double eps, T* y,
                     T* inv_rms) {
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * cols;
    T ss = 0;
    for (int64_t i = 0; i < cols; ++i) ss += xr[i] * xr[i];
    const T inv = T(1) / std::sqrt(ss / T(cols) + T(eps));
    inv_rms[r] = inv;
    T* yr = y + r * cols;
    for (int64_t i = 0; i < cols; ++i) yr[i] = w[i] * (xr[i] * inv);
  }
}

template <typename T>
void rmsnorm_backward(const T* x, const T* w, const T* inv_rms, const T* dy, int64_t rows,
                      int64_t cols, T* dx, T* dw) {
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * cols;
    const T* gr = dy + r * cols;
    const T inv = inv_rms[r];
    // The part through r: d r / d x_j = −r³ x_j / cols.
    T dot = 0;
    for (int64_t i = 0; i < cols; ++i) dot += gr[i] * w[i] * xr[i];
    const T k = dot * inv * inv * inv / T(cols);
    for (int64_t i = 0; i < cols; ++i) dw[i] += gr[i] * xr[i] * inv;
    T* dr = dx + r * cols;
    for (int64_t i = 0; i < cols; ++i) dr[i] = inv * w[i] * gr[i] - xr[i] * k;
  }
}

#define QF_INSTANTIATE(T)                                                                   \
  template void rmsnorm_forward<T>(const T*, const T*, int64_t, int64_t, double, T*, T*);    \
  template void rmsnorm_backward<T>(const T*, const T*, const T*, const T*, int64_t, int64_t, \
                                    T*, T*);
QF_INSTANTIATE(float)
QF_INSTANTIATE(double)
#undef QF_INSTANTIATE

}  // namespace qf

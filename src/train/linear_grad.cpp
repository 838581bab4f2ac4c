// y = x Wᵀ + b forward and backward as three plain loop nests.
#include "train/linear_grad.h"

namespace qf {

template <typename T>
void linear_forward(const T* x, const T* w, const T* b, int64_t n, int64_t in, int64_t out,
                    T* y) {
  for (int64_t t = 0; t < n; ++t)
    for (int64_t o = 0; o < out; ++o) {
      T s = 0;
      for (int64_t i = 0; i < in; ++i) s += x[t * in + i] * w[o * in + i];
      y[t * out + o] = b ? s + b[o] : s;
    }
}

template <typename T>
void linear_backward(const T* x, const T* w, const T* dy, int64_t n, int64_t in, int64_t out,
                     T* dx, T* dw, T* db) {
  if (dx)
    for (int64_t t = 0; t < n; ++t)
      for (int64_t i = 0; i < in; ++i) {
        T s = 0;
        for (int64_t o = 0; o < out; ++o) s += dy[t * out + o] * w[o * in + i];
        dx[t * in + i] = s;
      }
  for (int64_t t = 0; t < n; ++t)
    for (int64_t o = 0; o < out; ++o) {
      const T g = dy[t * out + o];
      for (int64_t i = 0; i < in; ++i) dw[o * in + i] += g * x[t * in + i];
      if (db) db[o] += g;
    }
}

#define QF_INSTANTIATE(T)                                                                    \
  template void linear_forward<T>(const T*, const T*, const T*, int64_t, int64_t, int64_t, T*); \
  template void linear_backward<T>(const T*, const T*, const T*, int64_t, int64_t, int64_t, T*, \
                                   T*, T*);
QF_INSTANTIATE(float)
QF_INSTANTIATE(double)
#undef QF_INSTANTIATE

}  // namespace qf

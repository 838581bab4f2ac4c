// RoPE forward (the engine's RopeRows::apply arithmetic) and its transpose.
#include "train/rope_grad.h"

#include "kernels/ops.h"

namespace qf {

template <typename T>
RopeTable<T> rope_table(const RopeSpec& spec, int64_t n) {
  RopeRows rows;
  rows.compute(spec.inv_freq(n), float(spec.attention_factor), 0, n);
  RopeTable<T> t;
  t.positions = n;
  t.half = rows.rotary_dim / 2;
  t.cos.assign(rows.cos.begin(), rows.cos.end());
  t.sin.assign(rows.sin.begin(), rows.sin.end());
  return t;
}

template <typename T>
void rope_forward(const RopeTable<T>& table, T* x, int64_t rows, int64_t heads, int64_t head_dim) {
  const int64_t half = table.half;
  for (int64_t t = 0; t < rows; ++t) {
    const T* c = table.cos.data() + t * half;
    const T* s = table.sin.data() + t * half;
    for (int64_t h = 0; h < heads; ++h) {
      T* v = x + (t * heads + h) * head_dim;
      for (int64_t i = 0; i < half; ++i) {
        const T a = v[i], b = v[i + half];
        v[i] = a * c[i] - b * s[i];
        v[i + half] = b * c[i] + a * s[i];
      }
    }
  }
}

template <typename T>
void rope_backward(const RopeTable<T>& table, T* d, int64_t rows, int64_t heads,
                   int64_t head_dim) {
  const int64_t half = table.half;
  for (int64_t t = 0; t < rows; ++t) {
    const T* c = table.cos.data() + t * half;
    const T* s = table.sin.data() + t * half;
    for (int64_t h = 0; h < heads; ++h) {
      T* v = d + (t * heads + h) * head_dim;
      for (int64_t i = 0; i < half; ++i) {
        const T a = v[i], b = v[i + half];
        v[i] = a * c[i] + b * s[i];
        v[i + half] = b * c[i] - a * s[i];
      }
    }
  }
}

#define QF_INSTANTIATE(T)                                                           \
  template RopeTable<T> rope_table<T>(const RopeSpec&, int64_t);                    \
  template void rope_forward<T>(const RopeTable<T>&, T*, int64_t, int64_t, int64_t); \
  template void rope_backward<T>(const RopeTable<T>&, T*, int64_t, int64_t, int64_t);
QF_INSTANTIATE(float)
QF_INSTANTIATE(double)
#undef QF_INSTANTIATE

}  // namespace qf

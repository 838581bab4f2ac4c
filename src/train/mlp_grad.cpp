// The gated MLP as three Linears (train/linear_grad) around the SiLU gate.
#include "train/mlp_grad.h"

#include "train/linear_grad.h"

#include <cmath>

namespace qf {

template <typename T>
void mlp_forward(const MlpShape& s, const T* x, const T* gate_w, const T* up_w, const T* down_w,
                 T* y, MlpSaved<T>& saved) {
  const int64_t n = s.tokens, H = s.hidden, I = s.intermediate;
  saved.gate.resize(size_t(n * I));
  saved.up.resize(size_t(n * I));
  saved.act.resize(size_t(n * I));
  linear_forward<T>(x, gate_w, nullptr, n, H, I, saved.gate.data());
  linear_forward<T>(x, up_w, nullptr, n, H, I, saved.up.data());
  for (size_t i = 0; i < saved.act.size(); ++i) {
    const T g = saved.gate[i];
    saved.act[i] = g / (T(1) + std::exp(-g)) * saved.up[i];
  }
  linear_forward<T>(saved.act.data(), down_w, nullptr, n, I, H, y);
}

template <typename T>
void mlp_backward(const MlpShape& s, const T* x, const T* gate_w, const T* up_w, const T* down_w,
                  const MlpSaved<T>& saved, const T* dy, T* dx, T* dgate_w, T* dup_w,
                  T* ddown_w) {
  const int64_t n = s.tokens, H = s.hidden, I = s.intermediate;
  std::vector<T> dact(size_t(n * I)), dgate(size_t(n * I)), dup(size_t(n * I));
  linear_backward<T>(saved.act.data(), down_w, dy, n, I, H, dact.data(), ddown_w, nullptr);
  for (size_t i = 0; i < dact.size(); ++i) {
    const T g = saved.gate[i];
    const T sig = T(1) / (T(1) + std::exp(-g));
    dup[i] = dact[i] * g * sig;
    dgate[i] = dact[i] * saved.up[i] * sig * (T(1) + g * (T(1) - sig));
  }
  // x feeds both gate and up: dx is the sum of the two paths.
  std::vector<T> dx_up(size_t(n * H));
  linear_backward<T>(x, gate_w, dgate.data(), n, H, I, dx, dgate_w, nullptr);
  linear_backward<T>(x, up_w, dup.data(), n, H, I, dx_up.data(), dup_w, nullptr);
  for (size_t i = 0; i < dx_up.size(); ++i) dx[i] += dx_up[i];
}

#define QF_INSTANTIATE(T)                                                                      \
  template struct MlpSaved<T>;                                                                 \
  template void mlp_forward<T>(const MlpShape&, const T*, const T*, const T*, const T*, T*,    \
                               MlpSaved<T>&);                                                  \
  template void mlp_backward<T>(const MlpShape&, const T*, const T*, const T*, const T*,       \
                                const MlpSaved<T>&, const T*, T*, T*, T*, T*);
QF_INSTANTIATE(float)
QF_INSTANTIATE(double)
#undef QF_INSTANTIATE

}  // namespace qf

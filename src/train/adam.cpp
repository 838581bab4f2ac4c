#include "train/adam.h"

#include <cmath>

namespace qf {

void adam_step(const AdamOptions& o, AdamState& s, float* p, const float* g) {
  ++s.steps;
  // Bias corrections in double: b^t underflows float's precision long before t is large.
  const double c1 = 1.0 - std::pow(double(o.beta1), double(s.steps));
  const double c2 = 1.0 - std::pow(double(o.beta2), double(s.steps));
  const float step = float(double(o.lr) / c1);
  const float inv_c2 = float(1.0 / c2);
  const size_t n = s.m.size();
  for (size_t i = 0; i < n; ++i) {
    s.m[i] = o.beta1 * s.m[i] + (1.f - o.beta1) * g[i];
    s.v[i] = o.beta2 * s.v[i] + (1.f - o.beta2) * g[i] * g[i];
    p[i] -= step * s.m[i] / (std::sqrt(s.v[i] * inv_c2) + o.eps);
  }
}

}  // namespace qf

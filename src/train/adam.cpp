#include "train/adam.h"

#include "core/thread_pool.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace qf {

namespace {
constexpr int64_t kChunk = 1 << 16;  // parameters per task
}  // namespace

void adam_step(const AdamOptions& o, AdamState& s, float* p, const float* g, ThreadPool* pool) {
  ++s.steps;
  // Bias corrections in double: b^t underflows float's precision long before t is large.
  const double c1 = 1.0 - std::pow(double(o.beta1), double(s.steps));
  const double c2 = 1.0 - std::pow(double(o.beta2), double(s.steps));
  const float step = float(double(o.lr) / c1);
  const float inv_c2 = float(1.0 / c2);
  const int64_t n = int64_t(s.m.size());
  float* m = s.m.data();
  float* v = s.v.data();
  auto chunk = [&](int64_t c) {
    const int64_t end = std::min(n, (c + 1) * kChunk);
    for (int64_t i = c * kChunk; i < end; ++i) {
      m[i] = o.beta1 * m[i] + (1.f - o.beta1) * g[i];
      v[i] = o.beta2 * v[i] + (1.f - o.beta2) * g[i] * g[i];
      p[i] -= step * m[i] / (std::sqrt(v[i] * inv_c2) + o.eps);
    }
  };
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  if (pool) pool->parallel_for(chunks, chunk);
  else
    for (int64_t c = 0; c < chunks; ++c) chunk(c);
}

}  // namespace qf

// Adam (Kingma & Ba) over one flat array of float parameters: the optimiser both tuning modes
// use (block-wise rounding/scale tuning and end-to-end distillation). The state is plain data
// so a checkpoint can write it and a resumed run continue bit for bit.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace qf {

class ThreadPool;

struct AdamOptions {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
};

// First and second moment estimates [n] and the number of steps taken.
struct AdamState {
  std::vector<float> m, v;
  int64_t steps = 0;
  explicit AdamState(size_t n = 0) : m(n, 0.f), v(n, 0.f) {}
};

// One step on params [n] with gradient grad [n] (n = state.m.size()), bias-corrected:
//   m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g²;  p -= lr · (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps)
// with t the step count after the increment. Each element's update is its own, so the result
// depends only on the state and the inputs, not on `pool` (null: one thread; else chunks as
// tasks), and a run resumed from a saved state repeats the same bits.
void adam_step(const AdamOptions& options, AdamState& state, float* params, const float* grad,
               ThreadPool* pool = nullptr);

}  // namespace qf

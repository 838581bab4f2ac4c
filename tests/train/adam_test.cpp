// Adam: the first step moves every parameter by lr against its gradient's sign (the bias
// correction makes m̂/sqrt(v̂) = ±1), it minimises an ill-conditioned quadratic, and a run split
// in two with the state carried over equals the run in one piece, and a pool changes no bit.
#include "core/thread_pool.h"
#include "train/adam.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace qf {
namespace {

TEST(Adam, FirstStepIsLrTimesSign) {
  AdamOptions o;
  o.lr = 0.01f;
  AdamState s(3);
  float p[3] = {1.f, -2.f, 0.5f};
  const float g[3] = {3.f, -1e-3f, 0.f};
  adam_step(o, s, p, g);
  EXPECT_NEAR(p[0], 1.f - 0.01f, 1e-6f);
  EXPECT_NEAR(p[1], -2.f + 0.01f, 1e-5f);
  EXPECT_EQ(p[2], 0.5f);
  EXPECT_EQ(s.steps, 1);
}

// f(p) = sum_i a_i (p_i - c_i)^2 with curvatures 1e-2 .. 1e2.
TEST(Adam, MinimisesAnIllConditionedQuadratic) {
  const float a[4] = {1e-2f, 1.f, 10.f, 100.f}, c[4] = {1.f, -3.f, 0.25f, 2.f};
  AdamOptions o;
  o.lr = 0.05f;
  AdamState s(4);
  float p[4] = {0, 0, 0, 0}, g[4];
  for (int it = 0; it < 3000; ++it) {
    for (int i = 0; i < 4; ++i) g[i] = 2 * a[i] * (p[i] - c[i]);
    adam_step(o, s, p, g);
  }
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(p[i], c[i], 2e-2f) << i;
}

TEST(Adam, ResumedStateRepeatsTheSameBits) {
  AdamOptions o;
  o.lr = 0.1f;
  auto grad = [](const float* p, float* g) {
    for (int i = 0; i < 2; ++i) g[i] = std::sin(3.f * p[i]) + 0.5f * p[i];
  };
  AdamState whole(2);
  float pw[2] = {0.3f, -1.1f}, g[2];
  for (int it = 0; it < 20; ++it) grad(pw, g), adam_step(o, whole, pw, g);
  AdamState first(2);
  float pr[2] = {0.3f, -1.1f};
  for (int it = 0; it < 7; ++it) grad(pr, g), adam_step(o, first, pr, g);
  AdamState resumed = first;  // what a checkpoint holds
  for (int it = 7; it < 20; ++it) grad(pr, g), adam_step(o, resumed, pr, g);
  EXPECT_EQ(pw[0], pr[0]);
  EXPECT_EQ(pw[1], pr[1]);
  EXPECT_EQ(resumed.steps, 20);
}

// Chunks of parameters as tasks on a pool (distillation with a trained embedding: hundreds of
// millions of parameters): the same bits as one thread, over several chunks and a partial one.
TEST(Adam, PoolGivesTheSameBits) {
  const size_t n = (size_t(1) << 17) + 12345;
  std::vector<float> a(n), b(n), g(n);
  for (size_t i = 0; i < n; ++i) {
    a[i] = b[i] = std::sin(0.001f * float(i));
    g[i] = std::cos(0.003f * float(i)) * (1.f + float(i % 7));
  }
  AdamOptions o;
  o.lr = 0.01f;
  AdamState one(n), many(n);
  ThreadPool pool(3);
  for (int it = 0; it < 3; ++it) {
    adam_step(o, one, a.data(), g.data());
    adam_step(o, many, b.data(), g.data(), &pool);
  }
  EXPECT_EQ(a, b);
  EXPECT_EQ(one.v, many.v);
  EXPECT_NE(a[n - 1], std::sin(0.001f * float(n - 1)));  // the last, partial chunk moved
}

}  // namespace
}  // namespace qf

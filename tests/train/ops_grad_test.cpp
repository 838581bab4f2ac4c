// The backward of each op of src/train against central finite differences in double precision
// on small random shapes (T = 5, hidden 16, heads 4, kv heads 2, head_dim 4, intermediate 24).
#include "core/thread_pool.h"
#include "train/attention_grad.h"
#include "train/linear_fast.h"
#include "train/linear_grad.h"
#include "train/mlp_grad.h"
#include "train/rmsnorm_grad.h"
#include "train/rope_grad.h"
#include "train/finite_difference.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

namespace qf {
namespace {

using test::fd_relative_error;
using test::kFdTolerance;
using test::random_vector;
using test::report_fd;
using Vec = std::vector<double>;

constexpr int64_t kT = 5, kHidden = 16, kHeads = 4, kKvHeads = 2, kHeadDim = 4, kInter = 24;

TEST(TrainGrad, RmsNorm) {
  std::mt19937 rng(1);
  Vec x = random_vector(rng, kT * kHidden), w = random_vector(rng, kHidden);
  const Vec dy = random_vector(rng, kT * kHidden);
  const double eps = 1e-6;
  auto loss = [&] {
    Vec y(x.size()), inv(kT);
    rmsnorm_forward<double>(x.data(), w.data(), kT, kHidden, eps, y.data(), inv.data());
    return test::dot(dy, y);
  };
  Vec y(x.size()), inv(kT), dx(x.size()), dw(w.size(), 0.0);
  rmsnorm_forward<double>(x.data(), w.data(), kT, kHidden, eps, y.data(), inv.data());
  rmsnorm_backward<double>(x.data(), w.data(), inv.data(), dy.data(), kT, kHidden, dx.data(),
                           dw.data());
  EXPECT_LE(report_fd("rmsnorm", "x", fd_relative_error(x, dx, loss)), kFdTolerance);
  EXPECT_LE(report_fd("rmsnorm", "w", fd_relative_error(w, dw, loss)), kFdTolerance);
}

// A table of random angles (not the model's frequencies: every pair gets a generic rotation),
// over a head wider than the rotated part (partial rotary: the last 2 elements pass).
RopeTable<double> random_rope(std::mt19937& rng, int64_t positions, int64_t half) {
  RopeTable<double> t;
  t.positions = positions;
  t.half = half;
  for (int64_t i = 0; i < positions * half; ++i) {
    const double a = std::uniform_real_distribution<double>(-3.14, 3.14)(rng);
    t.cos.push_back(std::cos(a));
    t.sin.push_back(std::sin(a));
  }
  return t;
}

TEST(TrainGrad, Rope) {
  std::mt19937 rng(2);
  const int64_t head_dim = 6;
  const RopeTable<double> table = random_rope(rng, kT, 2);
  Vec x = random_vector(rng, kT * kHeads * head_dim);
  const Vec dy = random_vector(rng, x.size());
  auto loss = [&] {
    Vec y = x;
    rope_forward<double>(table, y.data(), kT, kHeads, head_dim);
    return test::dot(dy, y);
  };
  Vec dx = dy;
  rope_backward<double>(table, dx.data(), kT, kHeads, head_dim);
  EXPECT_LE(report_fd("rope", "x", fd_relative_error(x, dx, loss)), kFdTolerance);
  // The inverse rotation undoes the forward.
  Vec y = x;
  rope_forward<double>(table, y.data(), kT, kHeads, head_dim);
  rope_backward<double>(table, y.data(), kT, kHeads, head_dim);
  for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(y[i], x[i], 1e-12);
}

TEST(TrainGrad, Attention) {
  std::mt19937 rng(3);
  const AttentionShape s{kT, kHeads, kKvHeads, kHeadDim, 1.0 / std::sqrt(double(kHeadDim))};
  Vec q = random_vector(rng, size_t(kT * s.q_width()));
  Vec k = random_vector(rng, size_t(kT * s.kv_width()));
  Vec v = random_vector(rng, size_t(kT * s.kv_width()));
  const Vec dy = random_vector(rng, q.size());
  auto loss = [&] {
    Vec out(q.size()), probs(size_t(s.probs_size()));
    attention_forward<double>(s, q.data(), k.data(), v.data(), out.data(), probs.data());
    return test::dot(dy, out);
  };
  Vec out(q.size()), probs(size_t(s.probs_size()));
  attention_forward<double>(s, q.data(), k.data(), v.data(), out.data(), probs.data());
  Vec dq(q.size()), dk(k.size()), dv(v.size());
  attention_backward<double>(s, q.data(), k.data(), v.data(), probs.data(), dy.data(), dq.data(),
                             dk.data(), dv.data());
  EXPECT_LE(report_fd("attention", "q", fd_relative_error(q, dq, loss)), kFdTolerance);
  EXPECT_LE(report_fd("attention", "k", fd_relative_error(k, dk, loss)), kFdTolerance);
  EXPECT_LE(report_fd("attention", "v", fd_relative_error(v, dv, loss)), kFdTolerance);
  // Causality: the first token attends to itself only.
  for (int64_t h = 0; h < kHeads; ++h) EXPECT_EQ(probs[size_t(h * kT * kT)], 1.0);
}

TEST(TrainGrad, Linear) {
  std::mt19937 rng(4);
  const int64_t in = kHidden, out = kInter;
  Vec x = random_vector(rng, kT * in), w = random_vector(rng, out * in), b = random_vector(rng, out);
  const Vec dy = random_vector(rng, kT * out);
  auto loss = [&] {
    Vec y(size_t(kT * out));
    linear_forward<double>(x.data(), w.data(), b.data(), kT, in, out, y.data());
    return test::dot(dy, y);
  };
  Vec dx(x.size()), dw(w.size(), 0.0), db(b.size(), 0.0);
  linear_backward<double>(x.data(), w.data(), dy.data(), kT, in, out, dx.data(), dw.data(),
                          db.data());
  EXPECT_LE(report_fd("linear", "x", fd_relative_error(x, dx, loss)), kFdTolerance);
  EXPECT_LE(report_fd("linear", "W", fd_relative_error(w, dw, loss)), kFdTolerance);
  EXPECT_LE(report_fd("linear", "b", fd_relative_error(b, db, loss)), kFdTolerance);
}

// The float backward on the engine's kernels (train/linear_fast) against the double reference:
// dW accumulated into what is there, with more output rows than one product slice (1024) and a
// partial last slice; the same bits with and without a pool.
TEST(TrainGrad, LinearFastMatchesReference) {
  std::mt19937 rng(6);
  const int64_t n = 7, in = 48, out = 2500;
  const Vec x = random_vector(rng, n * in), w = random_vector(rng, out * in),
            dy = random_vector(rng, n * out), dw0 = random_vector(rng, out * in);
  Vec dx_ref(x.size()), dw_ref = dw0;
  linear_backward<double>(x.data(), w.data(), dy.data(), n, in, out, dx_ref.data(), dw_ref.data(),
                          nullptr);
  auto f = [](const Vec& v) { return std::vector<float>(v.begin(), v.end()); };
  const std::vector<float> xf = f(x), wf = f(w), dyf = f(dy);
  ThreadPool pool(3);
  std::vector<float> dx1(x.size()), dx3(x.size()), dw1 = f(dw0), dw3 = f(dw0);
  linear_backward_fast(xf.data(), wf.data(), dyf.data(), n, in, out, dx1.data(), dw1.data(),
                       nullptr);
  linear_backward_fast(xf.data(), wf.data(), dyf.data(), n, in, out, dx3.data(), dw3.data(),
                       &pool);
  EXPECT_EQ(dx1, dx3);
  EXPECT_EQ(dw1, dw3);
  double worst_dx = 0, worst_dw = 0;
  for (size_t i = 0; i < dx_ref.size(); ++i)
    worst_dx = std::max(worst_dx, std::fabs(dx1[i] - dx_ref[i]));
  for (size_t i = 0; i < dw_ref.size(); ++i)
    worst_dw = std::max(worst_dw, std::fabs(dw1[i] - dw_ref[i]));
  EXPECT_LT(worst_dx, 1e-3);  // sums of 2500 (dx) and 7 (dW) products of unit normals
  EXPECT_LT(worst_dw, 1e-4);
}

TEST(TrainGrad, GatedMlp) {
  std::mt19937 rng(5);
  const MlpShape s{kT, kHidden, kInter};
  Vec x = random_vector(rng, kT * kHidden);
  Vec gate = random_vector(rng, kInter * kHidden, 0.3), up = random_vector(rng, kInter * kHidden, 0.3);
  Vec down = random_vector(rng, kHidden * kInter, 0.3);
  const Vec dy = random_vector(rng, x.size());
  auto loss = [&] {
    Vec y(x.size());
    MlpSaved<double> sv;
    mlp_forward<double>(s, x.data(), gate.data(), up.data(), down.data(), y.data(), sv);
    return test::dot(dy, y);
  };
  Vec y(x.size());
  MlpSaved<double> sv;
  mlp_forward<double>(s, x.data(), gate.data(), up.data(), down.data(), y.data(), sv);
  Vec dx(x.size()), dg(gate.size(), 0.0), du(up.size(), 0.0), dd(down.size(), 0.0);
  mlp_backward<double>(s, x.data(), gate.data(), up.data(), down.data(), sv, dy.data(), dx.data(),
                       dg.data(), du.data(), dd.data());
  EXPECT_LE(report_fd("gated_mlp", "x", fd_relative_error(x, dx, loss)), kFdTolerance);
  EXPECT_LE(report_fd("gated_mlp", "gate", fd_relative_error(gate, dg, loss)), kFdTolerance);
  EXPECT_LE(report_fd("gated_mlp", "up", fd_relative_error(up, du, loss)), kFdTolerance);
  EXPECT_LE(report_fd("gated_mlp", "down", fd_relative_error(down, dd, loss)), kFdTolerance);
}

}  // namespace
}  // namespace qf

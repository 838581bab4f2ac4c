// The whole Llama block's backward (every weight and the input) and the output head's losses
// against central finite differences in double precision, on small random shapes.
#include "core/error.h"
#include "train/block_grad.h"
#include "train/head_grad.h"
#include "train/finite_difference.h"

#include <gtest/gtest.h>

#include <cmath>

namespace qf {
namespace {

using test::fd_relative_error;
using test::kFdTolerance;
using test::random_vector;
using test::report_fd;
using Vec = std::vector<double>;

BlockShape small_shape() {
  BlockShape s;
  s.hidden = 16;
  s.heads = 4;
  s.kv_heads = 2;
  s.head_dim = 4;
  s.intermediate = 24;
  s.eps = 1e-6;
  s.attention_scale = 0.5;  // head_dim^-0.5
  return s;
}

TEST(TrainGrad, LlamaBlock) {
  const BlockShape s = small_shape();
  const int64_t T = 5;
  std::mt19937 rng(11);
  BlockWeights<double> w = BlockWeights<double>::zeros(s);
  for (Vec* p : {&w.q, &w.k, &w.v, &w.o, &w.gate, &w.up, &w.down})
    *p = random_vector(rng, p->size(), 0.3);
  for (Vec* p : {&w.attn_norm, &w.mlp_norm}) {
    *p = random_vector(rng, p->size(), 0.2);
    for (double& x : *p) x += 1;
  }
  RopeSpec rs;
  rs.theta = 10000;
  rs.head_dim = rs.rotary_dim = s.head_dim;
  const RopeTable<double> rope = rope_table<double>(rs, T);
  Vec x = random_vector(rng, size_t(T * s.hidden));
  const Vec dy = random_vector(rng, x.size());

  auto loss = [&] {
    Vec y(x.size());
    BlockSaved<double> sv;
    block_forward<double>(s, w, rope, x.data(), T, y.data(), sv);
    return test::dot(dy, y);
  };
  Vec y(x.size()), dx(x.size());
  BlockSaved<double> sv;
  block_forward<double>(s, w, rope, x.data(), T, y.data(), sv);
  BlockWeights<double> g = BlockWeights<double>::zeros(s);
  block_backward<double>(s, w, rope, sv, dy.data(), dx.data(), g);

  EXPECT_LE(report_fd("llama_block", "x", fd_relative_error(x, dx, loss)), kFdTolerance);
  const std::pair<const char*, std::pair<Vec*, Vec*>> params[] = {
      {"attn_norm", {&w.attn_norm, &g.attn_norm}}, {"mlp_norm", {&w.mlp_norm, &g.mlp_norm}},
      {"q_proj", {&w.q, &g.q}},          {"k_proj", {&w.k, &g.k}},
      {"v_proj", {&w.v, &g.v}},          {"o_proj", {&w.o, &g.o}},
      {"gate_proj", {&w.gate, &g.gate}}, {"up_proj", {&w.up, &g.up}},
      {"down_proj", {&w.down, &g.down}}};
  for (const auto& [name, pg] : params)
    EXPECT_LE(report_fd("llama_block", name, fd_relative_error(*pg.first, *pg.second, loss)),
              kFdTolerance)
        << name;

  // The saved activations are this block's only: one per row, T² per head for the attention.
  EXPECT_EQ(sv.probs.size(), size_t(s.heads * T * T));
}

struct HeadCase {
  HeadShape s{5, 16, 11, 1e-6};
  Vec x, norm_w, head_w;
  explicit HeadCase(std::mt19937& rng) {
    x = random_vector(rng, size_t(s.tokens * s.hidden));
    norm_w = random_vector(rng, size_t(s.hidden), 0.2);
    for (double& v : norm_w) v += 1;
    head_w = random_vector(rng, size_t(s.vocab * s.hidden), 0.5);
  }
};

TEST(TrainGrad, HeadCrossEntropy) {
  std::mt19937 rng(12);
  HeadCase c(rng);
  const std::vector<int32_t> targets = {3, 0, 10, 7, 3};
  auto loss = [&] {
    return head_cross_entropy<double>(c.s, c.x.data(), c.norm_w.data(), c.head_w.data(),
                                      targets.data(), {});
  };
  Vec dx(c.x.size()), dn(c.norm_w.size(), 0.0), dh(c.head_w.size(), 0.0);
  const double l = head_cross_entropy<double>(c.s, c.x.data(), c.norm_w.data(), c.head_w.data(),
                                              targets.data(), {dx.data(), dn.data(), dh.data()});
  EXPECT_GT(l, 0);
  EXPECT_LE(report_fd("head_cross_entropy", "x", fd_relative_error(c.x, dx, loss)), kFdTolerance);
  EXPECT_LE(report_fd("head_cross_entropy", "norm_w", fd_relative_error(c.norm_w, dn, loss)),
            kFdTolerance);
  EXPECT_LE(report_fd("head_cross_entropy", "lm_head", fd_relative_error(c.head_w, dh, loss)),
            kFdTolerance);
  const std::vector<int32_t> bad = {3, 0, 11, 7, 3};
  EXPECT_THROW(head_cross_entropy<double>(c.s, c.x.data(), c.norm_w.data(), c.head_w.data(),
                                          bad.data(), {}),
               Error);
}

TEST(TrainGrad, HeadKl) {
  std::mt19937 rng(13);
  HeadCase c(rng);
  const Vec teacher = random_vector(rng, size_t(c.s.tokens * c.s.vocab), 2.0);
  auto loss = [&] {
    return head_kl<double>(c.s, c.x.data(), c.norm_w.data(), c.head_w.data(), teacher.data(), {});
  };
  Vec dx(c.x.size()), dn(c.norm_w.size(), 0.0), dh(c.head_w.size(), 0.0);
  const double l = head_kl<double>(c.s, c.x.data(), c.norm_w.data(), c.head_w.data(),
                                   teacher.data(), {dx.data(), dn.data(), dh.data()});
  EXPECT_GT(l, 0);
  EXPECT_LE(report_fd("head_kl", "x", fd_relative_error(c.x, dx, loss)), kFdTolerance);
  EXPECT_LE(report_fd("head_kl", "norm_w", fd_relative_error(c.norm_w, dn, loss)), kFdTolerance);
  EXPECT_LE(report_fd("head_kl", "lm_head", fd_relative_error(c.head_w, dh, loss)), kFdTolerance);
  // KL of a distribution with itself is zero: a student whose logits are the teacher's.
  HeadShape id{1, 2, 2, 0.0};
  const Vec xi = {1.0, 1.0}, ni = {1.0, 1.0}, hi = {0.5, 0.0, 0.0, -0.5}, ti = {0.5, -0.5};
  EXPECT_NEAR(head_kl<double>(id, xi.data(), ni.data(), hi.data(), ti.data(), {}), 0.0, 1e-15);
}

}  // namespace
}  // namespace qf

// The whole model's distillation loss (train/model_grad.h): its gradient against central finite
// differences in double precision on a small random two-layer model, the same gradient whatever
// the thread count, and its float forward against the engine's on a real tiny model.
#include "core/error.h"
#include "engine/model.h"
#include "train/finite_difference.h"
#include "train/model_grad.h"
#include "test_util.h"

#include <gtest/gtest.h>

#include <cmath>

namespace qf {
namespace {

using test::fd_relative_error;
using test::kFdTolerance;
using test::random_vector;
using test::report_fd;
using Vec = std::vector<double>;

DenseModel<double> small_model(std::mt19937& rng, int64_t layers, int64_t T) {
  DenseModel<double> m;
  m.block.hidden = 16;
  m.block.heads = 4;
  m.block.kv_heads = 2;
  m.block.head_dim = 4;
  m.block.intermediate = 24;
  m.block.attention_scale = 0.5;
  m.vocab = 11;
  for (int64_t l = 0; l < layers; ++l) {
    BlockWeights<double> w = BlockWeights<double>::zeros(m.block);
    for (Vec* p : {&w.q, &w.k, &w.v, &w.o, &w.gate, &w.up, &w.down})
      *p = random_vector(rng, p->size(), 0.3);
    for (Vec* p : {&w.attn_norm, &w.mlp_norm}) {
      *p = random_vector(rng, p->size(), 0.2);
      for (double& x : *p) x += 1;
    }
    m.blocks.push_back(w);
  }
  m.final_norm = random_vector(rng, size_t(m.block.hidden), 0.2);
  for (double& x : m.final_norm) x += 1;
  m.head = random_vector(rng, size_t(m.vocab * m.block.hidden), 0.5);
  RopeSpec rs;
  rs.theta = 10000;
  rs.head_dim = rs.rotary_dim = m.block.head_dim;
  m.rope = rope_table<double>(rs, T);
  return m;
}

// B windows of T random input hidden states and teacher logits, held in x0 and teacher.
DistillBatch<double> random_batch(std::mt19937& rng, const DenseModel<double>& m, int64_t T,
                                  int64_t B, std::vector<Vec>& x0, std::vector<Vec>& teacher) {
  DistillBatch<double> batch;
  batch.tokens = T;
  for (int64_t b = 0; b < B; ++b) {
    x0.push_back(random_vector(rng, size_t(T * m.block.hidden)));
    teacher.push_back(random_vector(rng, size_t(T * m.vocab), 2.0));
  }
  for (int64_t b = 0; b < B; ++b) {
    batch.x0.push_back(x0[size_t(b)].data());
    batch.teacher_logits.push_back(teacher[size_t(b)].data());
  }
  return batch;
}

TEST(TrainModel, KlGradientMatchesFiniteDifferences) {
  const int64_t T = 5, B = 2;
  std::mt19937 rng(5);
  DenseModel<double> m = small_model(rng, 2, T);
  std::vector<Vec> x0, teacher;
  const DistillBatch<double> batch = random_batch(rng, m, T, B, x0, teacher);
  auto loss = [&] { return model_kl<double>(m, batch, nullptr, nullptr); };
  std::vector<BlockWeights<double>> g;
  std::vector<double> per_window;
  const double l = model_kl<double>(m, batch, &g, nullptr, &per_window);
  EXPECT_NEAR(l, loss(), 1e-12);
  EXPECT_NEAR(l, (per_window[0] + per_window[1]) / 2, 1e-12);
  ASSERT_EQ(g.size(), 2u);
  for (size_t layer = 0; layer < 2; ++layer) {
    BlockWeights<double>& w = m.blocks[layer];
    BlockWeights<double>& d = g[layer];
    const std::pair<const char*, std::pair<Vec*, Vec*>> params[] = {
        {"attn_norm", {&w.attn_norm, &d.attn_norm}}, {"q_proj", {&w.q, &d.q}},
        {"k_proj", {&w.k, &d.k}},  {"v_proj", {&w.v, &d.v}},  {"o_proj", {&w.o, &d.o}},
        {"gate_proj", {&w.gate, &d.gate}}, {"up_proj", {&w.up, &d.up}},
        {"down_proj", {&w.down, &d.down}}, {"mlp_norm", {&w.mlp_norm, &d.mlp_norm}}};
    for (const auto& [name, pg] : params)
      EXPECT_LE(report_fd("model_kl layer " + std::to_string(layer), name,
                          fd_relative_error(*pg.first, *pg.second, loss)),
                kFdTolerance)
          << name;
  }
}

// The head's and the input hidden states' gradients (what `tune --embedding-lr` trains), with
// the windows one after another (no pool) and as parallel tasks (per-window head buffers).
TEST(TrainModel, HeadAndInputGradientsMatchFiniteDifferences) {
  const int64_t T = 4, B = 3;
  std::mt19937 rng(11);
  DenseModel<double> m = small_model(rng, 2, T);
  std::vector<Vec> x0, teacher;
  const DistillBatch<double> batch = random_batch(rng, m, T, B, x0, teacher);
  auto loss = [&] { return model_kl<double>(m, batch, nullptr, nullptr); };
  ThreadPool pool(2);
  for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
    std::vector<BlockWeights<double>> g;
    Vec dhead;
    std::vector<Vec> dx0;
    model_kl<double>(m, batch, &g, p, nullptr, EmbeddingGrads<double>{&dhead, &dx0});
    ASSERT_EQ(dhead.size(), m.head.size());
    ASSERT_EQ(dx0.size(), size_t(B));
    const std::string how = p ? "model_kl, pool" : "model_kl";
    EXPECT_LE(report_fd(how, "lm_head", fd_relative_error(m.head, dhead, loss)), kFdTolerance);
    for (int64_t b = 0; b < B; ++b)
      EXPECT_LE(report_fd(how, "x0 " + std::to_string(b),
                          fd_relative_error(x0[size_t(b)], dx0[size_t(b)], loss)),
                kFdTolerance);
  }
  std::vector<BlockWeights<double>> g;
  Vec dhead;
  EXPECT_THROW(model_kl<double>(m, batch, nullptr, nullptr, nullptr, {&dhead, nullptr}), Error);
}

TEST(TrainModel, GradientIndependentOfThreads) {
  const int64_t T = 6, B = 5;
  std::mt19937 rng(9);
  DenseModel<double> md = small_model(rng, 2, T);
  // The float model of the same weights.
  DenseModel<float> m;
  m.block = md.block;
  m.vocab = md.vocab;
  auto f = [](const Vec& v) { return std::vector<float>(v.begin(), v.end()); };
  for (const auto& b : md.blocks) {
    BlockWeights<float> w;
    w.attn_norm = f(b.attn_norm), w.mlp_norm = f(b.mlp_norm), w.q = f(b.q), w.k = f(b.k);
    w.v = f(b.v), w.o = f(b.o), w.gate = f(b.gate), w.up = f(b.up), w.down = f(b.down);
    m.blocks.push_back(w);
  }
  m.final_norm = f(md.final_norm);
  m.head = f(md.head);
  RopeSpec rs;
  rs.theta = 10000;
  rs.head_dim = rs.rotary_dim = m.block.head_dim;
  m.rope = rope_table<float>(rs, T);
  std::vector<std::vector<float>> x0, teacher;
  DistillBatch<float> batch;
  batch.tokens = T;
  for (int64_t b = 0; b < B; ++b) {
    x0.push_back(f(random_vector(rng, size_t(T * m.block.hidden))));
    teacher.push_back(f(random_vector(rng, size_t(T * m.vocab), 2.0)));
    batch.x0.push_back(x0.back().data());
    batch.teacher_logits.push_back(teacher.back().data());
  }
  // With a pool the products run on the engine's f32 kernels (another summation order than the
  // plain loops without one): the same bits at 1 and 3 threads, within float rounding of the
  // plain loops.
  std::vector<BlockWeights<float>> g0, g1, g3;
  std::vector<float> h1, h3;
  std::vector<std::vector<float>> x1, x3;
  ThreadPool p1(1), p3(3);
  const double l0 = model_kl<float>(m, batch, &g0, nullptr);
  const double l1 = model_kl<float>(m, batch, &g1, &p1, nullptr, {&h1, &x1});
  const double l3 = model_kl<float>(m, batch, &g3, &p3, nullptr, {&h3, &x3});
  EXPECT_EQ(l1, l3);
  EXPECT_EQ(h1, h3);
  EXPECT_EQ(x1, x3);
  EXPECT_NEAR(l1, l0, 1e-5 * std::fabs(l0));
  for (size_t l = 0; l < g1.size(); ++l) {
    EXPECT_EQ(g1[l].q, g3[l].q);
    EXPECT_EQ(g1[l].down, g3[l].down);
    EXPECT_EQ(g1[l].attn_norm, g3[l].attn_norm);
    for (const auto& [a, b] : {std::pair(&g0[l].q, &g1[l].q), std::pair(&g0[l].down, &g1[l].down),
                               std::pair(&g0[l].attn_norm, &g1[l].attn_norm)}) {
      double worst = 0, scale = 0;
      for (size_t i = 0; i < a->size(); ++i) {
        worst = std::max(worst, double(std::fabs((*a)[i] - (*b)[i])));
        scale = std::max(scale, double(std::fabs((*a)[i])));
      }
      EXPECT_LE(worst, 1e-4 * scale) << "layer " << l;
    }
  }
}

// The student's float forward (embeddings -> blocks -> head) against Model::forward on
// tests/data/conformance/llama_v5 widened to F32 with exact kernels.
TEST(TrainModel, LogitsMatchEngine) {
  namespace fs = std::filesystem;
  const fs::path src = fs::path(QFORGE_SOURCE_DIR) / "tests/data/conformance/llama_v5";
  test::ScratchDir scratch;
  test::write_f32_copy(src, scratch.path());
  ModelOptions mo;
  mo.threads = 2;
  mo.kernels = KernelMode::exact;
  auto model = Model::load(scratch.path(), mo);
  const int64_t T = 20, H = model->arch().hidden_size, V = model->vocab_size();
  const DenseModel<float> m = dense_model(model->weights(), T);
  EXPECT_EQ(int64_t(m.blocks.size()), model->arch().num_layers);
  std::mt19937 rng(3);
  std::vector<int32_t> tokens(static_cast<size_t>(T));
  for (int32_t& t : tokens) t = int32_t(rng() % uint32_t(V));
  std::vector<float> x(size_t(T * H)), ours(size_t(T * V)), engine(size_t(T * V));
  model->embed(tokens, x.data());
  model_logits<float>(m, x.data(), T, ours.data());
  model->forward(tokens, 0, engine.data(), /*all_logits=*/true);
  double worst = 0, scale = 0;
  for (size_t i = 0; i < engine.size(); ++i) {
    worst = std::max(worst, std::fabs(double(ours[i]) - double(engine[i])));
    scale = std::max(scale, std::fabs(double(engine[i])));
  }
  EXPECT_LE(worst / scale, 1e-4) << worst << " of " << scale;
  // The KL of the model against its own engine logits is ~0.
  DistillBatch<float> b;
  b.tokens = T;
  b.x0 = {x.data()};
  b.teacher_logits = {engine.data()};
  EXPECT_LT(model_kl<float>(m, b, nullptr, nullptr), 1e-6);
}

}  // namespace
}  // namespace qf

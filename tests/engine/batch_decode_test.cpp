// Model::decode_batch: several sequences at different positions decoded in one step give what
// each gives alone (exact kernels: float rounding of the matrix-matrix products; fast kernels on
// an NVFP4 model: the same int8-activation arithmetic per token, the float head summed in
// another order), and the steps' bad input.
#include "core/error.h"
#include "engine/model.h"
#include "test_util.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace qf {
namespace {

// Runs three prompts of different lengths as sequences 0..2 of one model, two batched decode
// steps, and compares each step's logits with a model running each sequence on its own.
void check(const std::filesystem::path& dir, KernelMode mode, double tol) {
  ModelOptions mo;
  mo.threads = 2;
  mo.kernels = mode;
  auto batched = Model::load(dir, mo);
  auto alone = Model::load(dir, mo);
  const int64_t V = batched->vocab_size();
  const std::vector<std::vector<int32_t>> prompts = {
      {1, 40, 17, 300, 120}, {1, 5, 66, 90, 31, 200, 12, 7, 8}, {1, 99}};
  const int64_t S = int64_t(prompts.size());
  std::vector<float> logits(size_t(S * V)), one(static_cast<size_t>(V));
  std::vector<int32_t> next(static_cast<size_t>(S));
  std::vector<int64_t> pos(static_cast<size_t>(S));
  for (int64_t s = 0; s < S; ++s) {
    batched->forward(prompts[size_t(s)], 0, one.data(), false, s);
    alone->forward(prompts[size_t(s)], 0, one.data(), false, s);
    next[size_t(s)] = int32_t(10 + 7 * s);
    pos[size_t(s)] = int64_t(prompts[size_t(s)].size());
  }
  for (int step = 0; step < 2; ++step) {
    batched->decode_batch(next, pos, logits.data());
    for (int64_t s = 0; s < S; ++s) {
      // The same sequence alone, on the same schedule: its prompt, then one token per step.
      alone->forward(std::span<const int32_t>(&next[size_t(s)], 1), pos[size_t(s)], one.data(),
                     false, s);
      double worst = 0;
      for (int64_t v = 0; v < V; ++v)
        worst = std::max(worst, std::fabs(double(logits[size_t(s * V + v)]) - one[size_t(v)]));
      EXPECT_LE(worst, tol) << "step " << step << " sequence " << s;
    }
    for (int64_t s = 0; s < S; ++s) {
      ++next[size_t(s)];
      ++pos[size_t(s)];
    }
  }
}

TEST(BatchDecode, SequencesAtDifferentPositionsMatchEachAlone) {
  QF_REQUIRE_FIXTURES();
  check(test::fixtures_dir() / "models" / "tinystories-656K-hf", KernelMode::exact, 1e-4);
}

// Fast kernels: the NVFP4 Linears take the same int8-activation arithmetic per token whether
// one or several are decoded; the float head sums in another order.
TEST(BatchDecode, FastNvfp4MatchesEachAlone) {
  QF_REQUIRE_FIXTURES();
  test::ScratchDir tmp;
  const auto q = test::run_qforge("quantize " + test::quote(test::model_dir("tinystories-656K-hf")) +
                                  " -o " + test::quote(tmp / "q") + " --format nvfp4");
  ASSERT_EQ(q.exit_code, 0) << q.err;
  check(tmp / "q", KernelMode::fast, 1e-4);
}

// Past 1024 positions a decode step splits each row's attention into parts (more tasks than
// KV heads); its logits match the prefill's for the same position.
TEST(BatchDecode, LongContextDecodeSplitsAttentionAndMatchesPrefill) {
  test::ScratchDir tmp;
  const auto r = test::run_qforge("synth --shape tiny --dtype f32 -o " + test::quote(tmp / "m"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ModelOptions mo;
  mo.threads = 2;
  mo.max_seq = 2600;
  auto m = Model::load(tmp / "m", mo);
  const int64_t V = m->vocab_size(), n = 2500;
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) ids[size_t(i)] = int32_t((i * 7919 + 3) % V);
  std::vector<float> pre(static_cast<size_t>(V)), dec(static_cast<size_t>(V));
  m->forward(ids, 0, pre.data(), false);  // the last position's logits, prefill
  m->forward(std::span<const int32_t>(ids.data(), size_t(n - 1)), 0, dec.data(), false);
  m->forward(std::span<const int32_t>(&ids.back(), 1), n - 1, dec.data(), false);
  double worst = 0, mag = 0;
  for (int64_t v = 0; v < V; ++v) {
    worst = std::max(worst, std::fabs(double(dec[size_t(v)]) - pre[size_t(v)]));
    mag = std::max(mag, std::fabs(double(pre[size_t(v)])));
  }
  EXPECT_LE(worst, 1e-4 * (1 + mag));
}

TEST(BatchDecode, BadStepsAreRefused) {
  QF_REQUIRE_FIXTURES();
  auto m = Model::load(test::fixtures_dir() / "models" / "tinystories-656K-hf", {});
  std::vector<float> logits(size_t(2 * m->vocab_size()));
  const std::vector<int32_t> ids = {1, 2};
  EXPECT_THROW(m->decode_batch(ids, std::vector<int64_t>{0}, logits.data()), Error);
  // Sequence 1 holds nothing: it cannot decode at position 3.
  m->forward(std::vector<int32_t>{1, 5, 6}, 0, logits.data(), false, 0);
  EXPECT_THROW(m->decode_batch(ids, std::vector<int64_t>{3, 3}, logits.data()), Error);
  EXPECT_NO_THROW(m->decode_batch(ids, std::vector<int64_t>{3, 0}, logits.data()));
  EXPECT_THROW(m->forward(ids, 7, logits.data(), false, 0), Error);
}

}  // namespace
}  // namespace qf

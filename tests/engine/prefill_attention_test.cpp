// Whole-model prefill with attention on AMX tiles (ModelOptions::prefill_attention_amx, fast
// kernels, BF16 cache) against the same model running attend() per token: logits of a prefill
// after a short prompt (the cache prefix), of every prefill row, and of decode steps after it,
// within twice what rounding the keys and values to BF16 moves them (the queries and
// probabilities are rounded to BF16 too, see attention_prefill_test.cpp); and
// the same bits at 1 and 2 threads. Skipped where the CPU has no AMX.
#include "engine/model.h"
#include "kernels/attention.h"
#include "test_util.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace qf {
namespace {

std::vector<float> run(const std::filesystem::path& dir, bool amx, int threads,
                       KvCacheType cache = KvCacheType::bf16) {
  ModelOptions mo;
  mo.threads = threads;
  mo.kernels = KernelMode::fast;
  mo.kv_cache = cache;
  mo.prefill_attention_amx = amx;
  auto m = Model::load(dir, mo);
  const int64_t V = m->vocab_size();
  std::vector<int32_t> prompt = {1, 17, 300, 42, 5, 99, 700};  // under 16 tokens: attend()
  std::vector<int32_t> block;
  for (int32_t i = 0; i < 53; ++i) block.push_back((i * 37 + 11) % 1000);
  std::vector<float> logits(size_t(V) * (prompt.size() + block.size() + 2));
  float* out = logits.data();
  m->forward(prompt, 0, out, false);
  out += V;
  m->forward(block, int64_t(prompt.size()), out, true);  // the AMX prefill, after a prefix
  out += V * int64_t(block.size());
  const int32_t next[] = {77, 78};
  for (int64_t i = 0; i < 2; ++i)
    m->forward(std::span<const int32_t>(next + i, 1), int64_t(prompt.size() + block.size()) + i,
               out + i * V, false);
  return logits;
}

TEST(PrefillAttentionAmx, LogitsMatchTheTokenByTokenAttention) {
  if (!kernels::prefill_attention_amx_fits(64, 64)) GTEST_SKIP() << "no AMX-BF16";
  test::ScratchDir tmp;
  // tiny: 4 heads of 64, 2 KV heads (GQA 2), 2 layers.
  const auto r = test::run_qforge("synth --shape tiny -o " + test::quote(tmp / "m"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto old = run(tmp / "m", false, 2), amx = run(tmp / "m", true, 2);
  ASSERT_EQ(old.size(), amx.size());
  // The yardstick: what rounding the keys and values to BF16 moves (the old path over an F32
  // cache against the same over the BF16 cache), a rounding of the same kind and size.
  const auto f32 = run(tmp / "m", false, 2, KvCacheType::f32);
  double worst = 0, yardstick = 0;
  for (size_t i = 0; i < old.size(); ++i) {
    worst = std::max(worst, std::fabs(double(old[i]) - amx[i]));
    yardstick = std::max(yardstick, std::fabs(double(old[i]) - f32[i]));
  }
  // The first row (the prompt, before any AMX attention) is the same computation.
  const size_t V = old.size() / (7 + 53 + 2);
  for (size_t i = 0; i < V; ++i) ASSERT_EQ(old[i], amx[i]);
  EXPECT_GT(worst, 0.0);  // the AMX path ran
  EXPECT_LE(worst, 2 * yardstick);
  EXPECT_EQ(run(tmp / "m", true, 1), amx);
}

}  // namespace
}  // namespace qf

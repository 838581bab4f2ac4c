// kernels::attend_prefill_amx (prefill attention on AMX tiles) against kernels::attend over the
// same BF16 cache: GQA ratios 1 / 4 / 8, head sizes 64 / 128, blocks that leave partial row
// tiles, a cache prefix before the block (prefill after some tokens, positions not on a key
// tile), sliding windows and sinks; and the same bits at 1 and 2 threads. Skipped where the CPU
// has no AMX.
//
// Tolerance: attend() multiplies the float32 queries by the cache's BF16 keys and float32
// probabilities by BF16 values; the AMX kernel rounds the queries and the probabilities to BF16
// (relative error <= 2^-9 each) before its float32-accumulated products. With unit-normal
// queries, keys and values, a score (q.k / sqrt(d), about unit size) moves by ~2^-9, a
// probability by ~2^-8 relative, and an output (a convex combination of values of size ~1)
// by well under 2^-6 = 0.016 absolute; the mean error is an order smaller.
#include "core/thread_pool.h"
#include "engine/kv_cache.h"
#include "kernels/attention.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

namespace qf {
namespace {

struct Case {
  int64_t kv_mul, hd, prefix, tokens;
  int64_t window = 0;
  bool sinks = false;
};

struct Inputs {
  KvCache cache;
  std::vector<float> q, sinks;
  int64_t nkv = 2;
};

Inputs make(const Case& c, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.f, 1.f);
  Inputs s{KvCache(KvCacheType::bf16, 2, c.hd, c.hd, {1.f}, {1.f}), {}, {}, 2};
  const int64_t len = c.prefix + c.tokens, kv_dim = s.nkv * c.hd;
  std::vector<float> k(size_t(len * kv_dim)), v(k.size());
  for (auto& x : k) x = nd(rng);
  for (auto& x : v) x = nd(rng);
  s.cache.ensure(len, len);
  s.cache.store(0, 0, len, k.data(), v.data());
  s.q.resize(size_t(c.tokens * s.nkv * c.kv_mul * c.hd));
  for (auto& x : s.q) x = nd(rng);
  s.sinks.resize(size_t(s.nkv * c.kv_mul));
  for (auto& x : s.sinks) x = nd(rng);
  return s;
}

// attend() per (token, KV head), as the engine runs decode.
std::vector<float> reference(const Case& c, const Inputs& s) {
  const int64_t nh = s.nkv * c.kv_mul;
  std::vector<float> out(size_t(c.tokens * nh * c.hd));
  for (int64_t t = 0; t < c.tokens; ++t)
    for (int64_t kvh = 0; kvh < s.nkv; ++kvh) {
      const int64_t h0 = kvh * c.kv_mul, end = c.prefix + t + 1;
      kernels::AttentionGroup g;
      g.q = s.q.data() + (t * nh + h0) * c.hd;
      g.heads = c.kv_mul;
      g.head_dim = g.v_head_dim = c.hd;
      g.type = KvCacheType::bf16;
      g.k = s.cache.keys(0, kvh);
      g.v = s.cache.values(0, kvh);
      g.k_stride = s.cache.key_tile_stride();
      g.v_stride = s.cache.value_stride();
      g.begin = c.window > 0 ? std::max<int64_t>(0, end - c.window) : 0;
      g.end = end;
      g.scale = 1.f / std::sqrt(float(c.hd));
      g.sinks = c.sinks ? s.sinks.data() + h0 : nullptr;
      g.out = out.data() + (t * nh + h0) * c.hd;
      kernels::attend(g);
    }
  return out;
}

// The engine's call: every token and KV head at once, on `threads`.
std::vector<float> prefill(const Case& c, const Inputs& s, int threads) {
  const int64_t nh = s.nkv * c.kv_mul;
  std::vector<float> out(size_t(c.tokens * nh * c.hd), NAN);
  std::vector<const uint16_t*> keys, values;
  for (int64_t h = 0; h < s.nkv; ++h) {
    keys.push_back(static_cast<const uint16_t*>(s.cache.keys(0, h)));
    values.push_back(static_cast<const uint16_t*>(s.cache.values(0, h)));
  }
  kernels::PrefillAttention a;
  a.q = s.q.data();
  a.q_stride = nh * c.hd;
  a.tokens = c.tokens;
  a.kv_heads = s.nkv;
  a.heads = c.kv_mul;
  a.head_dim = a.v_head_dim = c.hd;
  a.k = keys;
  a.v = values;
  a.k_stride = s.cache.key_tile_stride();
  a.v_stride = s.cache.value_stride();
  a.position = c.prefix;
  a.window = c.window;
  a.scale = 1.f / std::sqrt(float(c.hd));
  a.sinks = c.sinks ? s.sinks.data() : nullptr;
  a.out = out.data();
  a.out_stride = nh * c.hd;
  ThreadPool pool(threads);
  kernels::attend_prefill_amx(a, &pool);
  return out;
}

void check(const Case& c, uint32_t seed) {
  SCOPED_TRACE(testing::Message() << "kv_mul " << c.kv_mul << " hd " << c.hd << " prefix "
                                  << c.prefix << " tokens " << c.tokens << " window " << c.window
                                  << " sinks " << c.sinks);
  const Inputs s = make(c, seed);
  const auto ref = reference(c, s);
  const auto got = prefill(c, s, 2);
  double worst = 0, sum = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    ASSERT_TRUE(std::isfinite(got[i])) << i;
    const double e = std::fabs(double(got[i]) - ref[i]);
    worst = std::max(worst, e);
    sum += e;
  }
  EXPECT_LE(worst, 0.016);
  EXPECT_LE(sum / double(ref.size()), 2e-3);
}

TEST(AttentionPrefillAmx, MatchesAttendForGqaRatiosAndHeadSizes) {
  if (!kernels::prefill_attention_amx_fits(64, 64)) GTEST_SKIP() << "no AMX-BF16";
  uint32_t seed = 1;
  for (int64_t kv_mul : {1, 4, 8})
    for (int64_t hd : {64, 128})
      // 37 and 150 tokens: the last block is a partial row tile for every ratio.
      for (int64_t tokens : {37, 150}) check({kv_mul, hd, 0, tokens}, seed++);
}

TEST(AttentionPrefillAmx, PrefillAfterACachePrefix) {
  if (!kernels::prefill_attention_amx_fits(64, 64)) GTEST_SKIP() << "no AMX-BF16";
  check({4, 64, 45, 70}, 11);    // the block starts inside a key tile
  check({1, 128, 200, 19}, 12);  // a short block after a long prefix
  check({8, 64, 64, 33}, 13);    // on a key block boundary
}

TEST(AttentionPrefillAmx, SlidingWindowAndSinks) {
  if (!kernels::prefill_attention_amx_fits(64, 64)) GTEST_SKIP() << "no AMX-BF16";
  check({4, 64, 30, 100, 20}, 21);         // window shorter than a key block
  check({2, 64, 0, 150, 70, true}, 22);    // window over key block boundaries, with sinks
  check({1, 128, 10, 40, 0, true}, 23);    // sinks alone
}

TEST(AttentionPrefillAmx, SameBitsAtOneAndTwoThreads) {
  if (!kernels::prefill_attention_amx_fits(64, 64)) GTEST_SKIP() << "no AMX-BF16";
  const Case c{4, 64, 13, 100, 0, true};
  const Inputs s = make(c, 31);
  const auto one = prefill(c, s, 1), two = prefill(c, s, 2);
  EXPECT_EQ(std::memcmp(one.data(), two.data(), one.size() * sizeof(float)), 0);
}

}  // namespace
}  // namespace qf

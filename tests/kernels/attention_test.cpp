// kernels::attend against a double-precision reference of the same math, for every KV cache
// type, with shapes that leave tails everywhere (head sizes not a multiple of the vector, ranges
// that start and end inside key tiles, groups of 1-5 heads), sinks and soft-capping; and
// engine/kv_cache: the stored values, and that growing keeps them.
#include "core/numeric.h"
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
  int64_t heads, hd, vd, begin, end;
  float softcap = 0.f;
  bool sinks = false;
};

// What the cache holds for x: the type's rounding (fp8 with `scale`).
float stored(KvCacheType t, float x, float scale) {
  switch (t) {
    case KvCacheType::f32: return x;
    case KvCacheType::bf16: return bf16_to_f32(f32_to_bf16(x));
    case KvCacheType::f16: return f16_to_f32(f32_to_f16(x));
    case KvCacheType::fp8: return e4m3_to_f32(f32_to_e4m3_satfinite(x / scale)) * scale;
  }
  return x;
}

// Runs one group through a KvCache of one layer and one KV head (the engine's layout) and
// compares with softmax(scale * q.k) . v in double over the stored values.
void check(KvCacheType type, const Case& c, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.f, 1.f);
  const float k_scale = 0.02f, v_scale = 0.03f;
  KvCache cache(type, 1, c.hd, c.vd, {k_scale}, {v_scale});
  std::vector<float> k(size_t(c.end * c.hd)), v(size_t(c.end * c.vd)), q(size_t(c.heads * c.hd));
  for (auto& x : k) x = nd(rng);
  for (auto& x : v) x = nd(rng);
  for (auto& x : q) x = nd(rng);
  // Grown in two steps, so the second re-lays the first's positions.
  cache.ensure(c.end / 2 + 1, c.end / 2 + 1);
  cache.store(0, 0, c.end / 2 + 1, k.data(), v.data());
  cache.ensure(c.end, c.end);
  cache.store(0, c.end / 2 + 1, c.end - c.end / 2 - 1, k.data() + (c.end / 2 + 1) * c.hd,
              v.data() + (c.end / 2 + 1) * c.vd);
  std::vector<float> sinks(size_t(c.heads));
  for (auto& x : sinks) x = nd(rng);
  std::vector<float> out(size_t(c.heads * c.vd), NAN);
  kernels::AttentionGroup g;
  g.q = q.data();
  g.heads = c.heads;
  g.head_dim = c.hd;
  g.v_head_dim = c.vd;
  g.type = type;
  g.k = cache.keys(0, 0);
  g.v = cache.values(0, 0);
  g.k_stride = cache.key_tile_stride();
  g.v_stride = cache.value_stride();
  g.k_scale = cache.k_scale(0);
  g.v_scale = cache.v_scale(0);
  g.begin = c.begin;
  g.end = c.end;
  g.scale = 1.f / std::sqrt(float(c.hd));
  g.softcap = c.softcap;
  g.sinks = c.sinks ? sinks.data() : nullptr;
  g.out = out.data();
  kernels::attend(g);

  for (int64_t h = 0; h < c.heads; ++h) {
    std::vector<double> s;
    double m = c.sinks ? double(sinks[size_t(h)]) : -INFINITY;
    for (int64_t p = c.begin; p < c.end; ++p) {
      double dot = 0;
      for (int64_t i = 0; i < c.hd; ++i)
        dot += double(q[size_t(h * c.hd + i)]) * stored(type, k[size_t(p * c.hd + i)], k_scale);
      dot *= g.scale;
      if (c.softcap > 0) dot = std::tanh(dot / c.softcap) * c.softcap;
      s.push_back(dot);
      m = std::max(m, dot);
    }
    double sum = c.sinks ? std::exp(double(sinks[size_t(h)]) - m) : 0.0;
    for (double& x : s) sum += (x = std::exp(x - m));
    for (int64_t i = 0; i < c.vd; ++i) {
      double o = 0;
      for (int64_t p = c.begin; p < c.end; ++p)
        o += s[size_t(p - c.begin)] / sum * stored(type, v[size_t(p * c.vd + i)], v_scale);
      const float got = out[size_t(h * c.vd + i)];
      ASSERT_NEAR(got, o, 2e-5 * (1 + std::fabs(o)))
          << kv_cache_type_name(type) << " heads " << c.heads << " hd " << c.hd << " vd " << c.vd
          << " [" << c.begin << ", " << c.end << ") head " << h << " channel " << i;
    }
  }
}

TEST(Attention, EveryCacheTypeMatchesTheReferenceWithTails) {
  const Case cases[] = {
      {4, 64, 64, 0, 1},     {4, 64, 64, 0, 37},   {1, 16, 16, 5, 16},  {3, 80, 48, 17, 100},
      {5, 24, 40, 0, 33},    {2, 192, 128, 3, 70}, {4, 64, 64, 0, 300}, {1, 7, 9, 2, 19},
  };
  uint32_t seed = 1;
  for (KvCacheType t : {KvCacheType::f32, KvCacheType::bf16, KvCacheType::f16, KvCacheType::fp8})
    for (const Case& c : cases) check(t, c, seed++);
}

TEST(Attention, SinksAndSoftcapJoinTheSoftmax) {
  uint32_t seed = 100;
  for (KvCacheType t : {KvCacheType::f32, KvCacheType::fp8}) {
    check(t, {4, 64, 64, 0, 50, 0.f, true}, seed++);
    check(t, {2, 32, 32, 10, 45, 5.f, false}, seed++);
  }
}

// A long range split into parts (each normalised by its own max and sum, merged with the sink
// by combine_attention_parts) equals the range in one piece.
TEST(Attention, PartsCombineToTheWholeRange) {
  std::mt19937 rng(9);
  std::normal_distribution<float> nd(0.f, 1.f);
  const int64_t H = 4, hd = 64, len = 2500;
  for (KvCacheType type : {KvCacheType::f32, KvCacheType::fp8}) {
    KvCache cache(type, 1, hd, hd, {0.05f}, {0.05f});
    std::vector<float> k(size_t(len * hd)), v(k.size()), q(size_t(H * hd)), sinks(static_cast<size_t>(H));
    for (auto* vec : {&k, &v, &q, &sinks})
      for (auto& x : *vec) x = nd(rng);
    cache.ensure(len, len);
    cache.store(0, 0, len, k.data(), v.data());
    for (bool with_sinks : {false, true}) {
      kernels::AttentionGroup g;
      g.q = q.data();
      g.heads = H;
      g.head_dim = g.v_head_dim = hd;
      g.type = type;
      g.k = cache.keys(0, 0);
      g.v = cache.values(0, 0);
      g.k_stride = cache.key_tile_stride();
      g.v_stride = cache.value_stride();
      g.k_scale = g.v_scale = 0.05f;
      g.scale = 0.125f;
      g.sinks = with_sinks ? sinks.data() : nullptr;
      g.begin = 3;
      g.end = len;
      std::vector<float> whole(size_t(H * hd));
      g.out = whole.data();
      kernels::attend(g);
      const int64_t parts = 3, step = 1000;
      std::vector<float> outs(size_t(parts * H * hd)), maxes(size_t(parts * H)), sums(maxes.size());
      for (int64_t c = 0; c < parts; ++c) {
        kernels::AttentionGroup p = g;
        p.begin = 3 + c * step;
        p.end = std::min<int64_t>(len, p.begin + step);
        p.out = outs.data() + c * H * hd;
        p.part_max = maxes.data() + c * H;
        p.part_sum = sums.data() + c * H;
        kernels::attend(p);
      }
      std::vector<float> merged(whole.size());
      kernels::combine_attention_parts(parts, H, hd, outs.data(), maxes.data(), sums.data(),
                                       g.sinks, merged.data());
      for (size_t i = 0; i < whole.size(); ++i)
        ASSERT_NEAR(merged[i], whole[i], 1e-5 * (1 + std::fabs(whole[i])))
            << kv_cache_type_name(type) << " sinks " << with_sinks << " " << i;
    }
  }
}

TEST(KvCache, StoresTheTypesRoundingAndReportsItsBytes) {
  const std::vector<float> x = {0.1f, -3.3f, 1000.f, 1e-8f};
  for (KvCacheType t : {KvCacheType::f32, KvCacheType::bf16, KvCacheType::f16, KvCacheType::fp8}) {
    std::vector<uint8_t> buf(16);
    std::vector<float> back(4);
    kernels::kv_store(t, x.data(), 4, 2.f, buf.data());
    kernels::kv_load(t, buf.data(), 4, 2.f, back.data());
    for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(back[i], stored(t, x[i], 2.f)) << i;
    KvCache cache(t, 2, 8, 8, {1.f, 1.f, 1.f}, {1.f, 1.f, 1.f});
    EXPECT_EQ(cache.bytes(), 0u);
    cache.ensure(20, 1000);  // room for whole key tiles: 32 positions
    EXPECT_EQ(cache.length(), 20);
    EXPECT_EQ(cache.bytes(), uint64_t(3 * 2 * 2 * 32 * 8 * kv_cache_type_bytes(t)));
  }
  EXPECT_EQ(parse_kv_cache_type("fp8"), KvCacheType::fp8);
  EXPECT_FALSE(parse_kv_cache_type("int8").has_value());
}

// Every cache type: key channel c of head h at position p sits at (p / 16) * hd * 16 + c * 16 +
// p % 16 of the head's keys, value row p at p * vd, each rounded as kv_store rounds it; positions
// stored in two calls across a tile boundary, heads apart.
TEST(KvCache, StoresKeysInTransposedTilesForEveryType) {
  const int64_t heads = 2, hd = 8, n = 21;
  std::vector<float> k(size_t(n * heads * hd)), v(k.size());
  for (size_t i = 0; i < k.size(); ++i) {
    k[i] = 0.37f * float(i) - 40.f;
    v[i] = 3.f - 0.21f * float(i);
  }
  for (KvCacheType t : {KvCacheType::f32, KvCacheType::bf16, KvCacheType::f16, KvCacheType::fp8}) {
    SCOPED_TRACE(kv_cache_type_name(t));
    const int64_t b = kv_cache_type_bytes(t);
    KvCache cache(t, heads, hd, hd, {0.5f, 2.f}, {0.25f, 4.f});
    cache.ensure(n, n);
    cache.store(1, 0, 7, k.data(), v.data());
    cache.store(1, 7, n - 7, k.data() + 7 * heads * hd, v.data() + 7 * heads * hd);
    std::vector<uint8_t> want(static_cast<size_t>(b));
    for (int64_t p = 0; p < n; ++p)
      for (int64_t h = 0; h < heads; ++h)
        for (int64_t c = 0; c < hd; ++c) {
          const auto* keys = static_cast<const uint8_t*>(cache.keys(1, h));
          const size_t i = size_t((p * heads + h) * hd + c);
          kernels::kv_store(t, &k[i], 1, 2.f, want.data());
          ASSERT_EQ(std::memcmp(keys + (p / 16 * hd * 16 + c * 16 + p % 16) * b, want.data(),
                                size_t(b)),
                    0)
              << "key p " << p << " h " << h << " c " << c;
          const auto* values = static_cast<const uint8_t*>(cache.values(1, h));
          kernels::kv_store(t, &v[i], 1, 4.f, want.data());
          ASSERT_EQ(std::memcmp(values + (p * hd + c) * b, want.data(), size_t(b)), 0)
              << "value p " << p << " h " << h << " c " << c;
        }
  }
}

TEST(KvCache, ReserveMakesRoomWithoutHoldingMoreOrMoving) {
  KvCache cache(KvCacheType::bf16, 2, 8, 8, {1.f}, {1.f});
  std::vector<float> k(size_t(5 * 16)), v(k.size());
  for (size_t i = 0; i < k.size(); ++i) {
    k[i] = float(i);
    v[i] = -float(i);
  }
  cache.ensure(5, 5);
  cache.store(0, 0, 5, k.data(), v.data());
  cache.reserve(100);  // whole key tiles: 112 positions
  EXPECT_EQ(cache.length(), 5);
  EXPECT_EQ(cache.bytes(), uint64_t(2 * 2 * 112 * 8 * 2));
  const void* keys = cache.keys(0, 1);
  cache.ensure(112, 4096);  // within the room: no growth, no copy
  EXPECT_EQ(cache.keys(0, 1), keys);
  EXPECT_EQ(cache.length(), 112);
  cache.reserve(10);  // never shrinks
  EXPECT_EQ(cache.bytes(), uint64_t(2 * 2 * 112 * 8 * 2));
  // The positions held before the reserve kept their values: value row p of head h.
  std::vector<float> back(8);
  for (int64_t p = 0; p < 5; ++p)
    for (int64_t h = 0; h < 2; ++h) {
      kernels::kv_load(KvCacheType::bf16,
                       static_cast<const uint8_t*>(cache.values(0, h)) + p * 8 * 2, 8, 1.f,
                       back.data());
      for (int64_t c = 0; c < 8; ++c) EXPECT_EQ(back[size_t(c)], v[size_t(p * 16 + h * 8 + c)]);
    }
}

}  // namespace
}  // namespace qf

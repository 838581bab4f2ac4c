// Decode attention of one layer of a Llama-1B-class model (32 query heads, 8 KV heads of 64) at
// a long context, per KV cache type: GB/s of cache bytes read (the layer's keys and values),
// next to a STREAM-style read of the same bytes in the same run. Threads split the KV heads as
// the engine does. 64 layers' caches rotate (512 MB at BF16, 1 GB at F32) so no layer stays in
// the last-level cache (16 layers, 128 MB, fitted in the 300 MB L3 of an Emerald Rapids VM, and
// the figures were L3's).
// AttentionPrefill: the same layer's attention for a 512-token prefill over a BF16 cache,
// attend() per (token, KV head) as without AMX (arg 0) against attend_prefill_amx, the engine's
// call (arg 1), as GFLOP/s of the causal products (4 x heads x head_dim per visible key).
// Run: qforge_bench --benchmark_filter='Attention' --benchmark_repetitions=5
//        --benchmark_report_aggregates_only=true
#include "core/thread_pool.h"
#include "engine/kv_cache.h"
#include "kernels/attention.h"
#include "kernels/memory_read.h"

#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace qf {
namespace {

constexpr int64_t kHeads = 32, kKvHeads = 8, kHeadDim = 64, kLayers = 64;

struct Cache {
  std::vector<std::vector<uint8_t>> k, v;  // per layer
  int64_t bytes_per_layer = 0;
};

Cache make_cache(KvCacheType type, int64_t context) {
  Cache c;
  const int64_t dim = kKvHeads * kHeadDim;
  std::vector<float> row(static_cast<size_t>(dim));
  const int64_t b = kv_cache_type_bytes(type);
  for (int64_t l = 0; l < kLayers; ++l) {
    std::vector<uint8_t> k(size_t(context * dim * b)), v(k.size());
    for (int64_t p = 0; p < context; ++p) {
      for (int64_t i = 0; i < dim; ++i) row[size_t(i)] = float((p * 31 + i * 7 + l) % 17) / 17.f - 0.5f;
      // The tile layout only permutes a layer's keys; the bytes read are the same.
      kernels::kv_store(type, row.data(), dim, 1.f, k.data() + p * dim * b);
      kernels::kv_store(type, row.data(), dim, 1.f, v.data() + p * dim * b);
    }
    c.k.push_back(std::move(k));
    c.v.push_back(std::move(v));
  }
  c.bytes_per_layer = 2 * context * dim * b;
  return c;
}

void AttentionDecode(benchmark::State& state) {
  const auto type = KvCacheType(state.range(0));
  const int64_t context = state.range(1);
  const int threads = int(state.range(2));
  const Cache c = make_cache(type, context);
  ThreadPool pool(threads);
  std::vector<float> q(size_t(kHeads * kHeadDim), 0.01f), out(size_t(kHeads * kHeadDim));
  const int64_t b = kv_cache_type_bytes(type), kv_mul = kHeads / kKvHeads;
  int64_t layer = 0;
  for (auto _ : state) {
    const auto& k = c.k[size_t(layer)];
    const auto& v = c.v[size_t(layer)];
    pool.parallel_for(kKvHeads, [&](int64_t h) {
      kernels::AttentionGroup g;
      g.q = q.data() + h * kv_mul * kHeadDim;
      g.heads = kv_mul;
      g.head_dim = g.v_head_dim = kHeadDim;
      g.type = type;
      // Each KV head's region contiguous, as engine/kv_cache lays it.
      g.k = k.data() + h * context * kHeadDim * b;
      g.v = v.data() + h * context * kHeadDim * b;
      g.k_stride = kHeadDim * kernels::kKeyTile;
      g.v_stride = kHeadDim;
      g.begin = 0;
      g.end = context;
      g.scale = 0.125f;
      g.out = out.data() + h * kv_mul * kHeadDim;
      kernels::attend(g);
    });
    benchmark::DoNotOptimize(out.data());
    layer = (layer + 1) % kLayers;
  }
  state.counters["GB/s"] = benchmark::Counter(double(c.bytes_per_layer) * double(state.iterations()),
                                              benchmark::Counter::kIsRate);
  state.SetLabel(std::string(kv_cache_type_name(type)));
}

// The same bytes read with kernels::read_all, split like the attention.
void AttentionStreamRead(benchmark::State& state) {
  const int64_t context = state.range(1);
  const int threads = int(state.range(2));
  const Cache c = make_cache(KvCacheType(state.range(0)), context);
  ThreadPool pool(threads);
  int64_t layer = 0;
  uint64_t sink = 0;
  for (auto _ : state) {
    const auto& k = c.k[size_t(layer)];
    const auto& v = c.v[size_t(layer)];
    const size_t part = k.size() / kKvHeads;
    std::vector<uint64_t> sums(static_cast<size_t>(kKvHeads));
    pool.parallel_for(kKvHeads, [&](int64_t h) {
      sums[size_t(h)] = kernels::read_all(k.data() + h * part, part) +
                        kernels::read_all(v.data() + h * part, part);
    });
    for (uint64_t s : sums) sink += s;
    layer = (layer + 1) % kLayers;
  }
  benchmark::DoNotOptimize(sink);
  state.counters["GB/s"] = benchmark::Counter(double(c.bytes_per_layer) * double(state.iterations()),
                                              benchmark::Counter::kIsRate);
}

void AttentionPrefill(benchmark::State& state) {
  const bool amx = state.range(0) != 0;
  const int threads = int(state.range(1));
  constexpr int64_t kTokens = 512;
  if (amx && !kernels::prefill_attention_amx_fits(kHeadDim, kHeadDim)) {
    state.SkipWithError("no AMX-BF16");
    return;
  }
  const int64_t kv_mul = kHeads / kKvHeads, q_dim = kHeads * kHeadDim;
  const int64_t kv_dim = kKvHeads * kHeadDim;
  KvCache cache(KvCacheType::bf16, kKvHeads, kHeadDim, kHeadDim, {1.f}, {1.f});
  std::vector<float> k(size_t(kTokens * kv_dim)), q(size_t(kTokens * q_dim)), out(q.size());
  for (size_t i = 0; i < k.size(); ++i) k[i] = float((i * 31) % 17) / 17.f - 0.5f;
  for (size_t i = 0; i < q.size(); ++i) q[i] = float((i * 13) % 11) / 11.f - 0.5f;
  cache.ensure(kTokens, kTokens);
  cache.store(0, 0, kTokens, k.data(), k.data());
  ThreadPool pool(threads);
  const float scale = 1.f / std::sqrt(float(kHeadDim));
  std::vector<const uint16_t*> keys, values;
  for (int64_t h = 0; h < kKvHeads; ++h) {
    keys.push_back(static_cast<const uint16_t*>(cache.keys(0, h)));
    values.push_back(static_cast<const uint16_t*>(cache.values(0, h)));
  }
  for (auto _ : state) {
    if (amx) {
      // The engine's call (Model::attention).
      kernels::PrefillAttention a;
      a.q = q.data();
      a.q_stride = q_dim;
      a.tokens = kTokens;
      a.kv_heads = kKvHeads;
      a.heads = kv_mul;
      a.head_dim = a.v_head_dim = kHeadDim;
      a.k = keys;
      a.v = values;
      a.k_stride = cache.key_tile_stride();
      a.v_stride = cache.value_stride();
      a.scale = scale;
      a.out = out.data();
      a.out_stride = q_dim;
      kernels::attend_prefill_amx(a, &pool);
    } else {
      pool.parallel_for(kTokens * kKvHeads, [&](int64_t task) {
        const int64_t t = task / kKvHeads, kvh = task % kKvHeads;
        kernels::AttentionGroup g;
        g.q = q.data() + t * q_dim + kvh * kv_mul * kHeadDim;
        g.heads = kv_mul;
        g.head_dim = g.v_head_dim = kHeadDim;
        g.type = KvCacheType::bf16;
        g.k = cache.keys(0, kvh);
        g.v = cache.values(0, kvh);
        g.k_stride = cache.key_tile_stride();
        g.v_stride = cache.value_stride();
        g.begin = 0;
        g.end = t + 1;
        g.scale = scale;
        g.out = out.data() + t * q_dim + kvh * kv_mul * kHeadDim;
        kernels::attend(g);
      });
    }
    benchmark::DoNotOptimize(out.data());
  }
  const double flops = 4.0 * double(kHeads * kHeadDim) * double(kTokens * (kTokens + 1) / 2);
  state.counters["GFLOP/s"] =
      benchmark::Counter(flops * double(state.iterations()) / 1e9, benchmark::Counter::kIsRate);
  state.SetLabel(amx ? "amx" : "attend");
}

void Args(benchmark::internal::Benchmark* b) {
  for (KvCacheType t : {KvCacheType::f32, KvCacheType::bf16, KvCacheType::fp8})
    for (int threads : {1, 2}) b->Args({int64_t(t), 4096, threads});
  b->UseRealTime()->MinTime(0.5);
}

BENCHMARK(AttentionDecode)->Apply(Args);
BENCHMARK(AttentionStreamRead)->Apply(Args);
BENCHMARK(AttentionPrefill)->ArgsProduct({{0, 1}, {1, 2}})->UseRealTime()->MinTime(0.5);

}  // namespace
}  // namespace qf

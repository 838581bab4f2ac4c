// Inference kernels at Llama-8B MLP size (4096 x 14336): matrix-vector products (decode) as GB/s
// of weight bytes, next to a STREAM-style read of the same buffers in the same run (the memory
// ceiling); matrix-matrix products for 512 tokens (prefill) as GFLOP/s. The matrix-vector
// benchmarks rotate through more than 2 GiB of weight copies so that no copy is cache-resident.
// KernelVsStream* time each product and a STREAM read of as many bytes in alternation and report
// the median ratio: the kernel's share of what the memory gave in the same milliseconds.
// KernelGgml* are GGUF tensors in ggml blocks (the fast mode's Q8_0 / Q8_K integer kernels) at
// the same shape, and at Llama-1B's 8192 x 2048 (ffn_up) next to them.
// KernelMatMulLayerLlama1b* run one Llama-3.2-1B layer's seven products for 512 tokens: the
// GEMM ceiling at the shapes of `qforge bench`'s whole-model prefill.
// The *Precise variants run the float-activation kernels (KernelMode::exact): the baseline
// of the int8-activation matrix-vector and BF16 matrix-matrix kernels, in the same run.
// Run: qforge_bench --benchmark_filter='Kernel' --benchmark_repetitions=5
//        --benchmark_report_aggregates_only=true
#include "core/huge_pages.h"
#include "core/numeric.h"
#include "core/thread_pool.h"
#include "formats/ggml_types.h"
#include "kernels/kernels_internal.h"
#include "kernels/linear.h"
#include "kernels/memory_read.h"
#include "kernels/q4_rows16.h"

#include <benchmark/benchmark.h>

#include <hwy/highway.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <map>
#include <tuple>
#include <memory>
#include <vector>

namespace qf {
namespace {

constexpr int64_t kRows = 4096;
constexpr int64_t kCols = 14336;
constexpr uint64_t kRotateBytes = 2200ull << 20;  // > 2 GiB of distinct weights

uint64_t next(uint64_t& s) {
  s ^= s << 13;
  s ^= s >> 7;
  s ^= s << 17;
  return s;
}

// Fills bytes with random data quickly (the benchmark measures data movement, not values).
void fill_random(uint8_t* p, size_t n, uint64_t seed) {
  uint64_t s = seed | 1;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const uint64_t v = next(s);
    std::memcpy(p + i, &v, 8);
  }
  for (; i < n; ++i) p[i] = uint8_t(next(s));
}

// One stored weight matrix: its bytes and scales, plus the LinearWeight that views them.
struct Stored {
  std::vector<uint8_t> data, block_scales;
  std::vector<float> scales;
  LinearWeight w;
  std::shared_ptr<const void> huge;  // w.data's bytes once moved (on_huge_pages)
};

// Moves the weight bytes to 2 MB pages, where the engine keeps the weights it streams
// (core/huge_pages.h): on 4 KB pages a read pays a TLB miss per 4 KB and both the STREAM read
// and the kernels measured ~25% below what the memory gives.
void on_huge_pages(Stored& s) {
  s.huge = copy_to_huge_pages(s.data.data(), s.data.size());
  s.w.data = s.huge.get();
  std::vector<uint8_t>().swap(s.data);
}

std::unique_ptr<Stored> make(WeightFormat f, int64_t rows, int64_t cols, uint64_t seed) {
  if (kernels::is_q4_rows16(f)) {
    // The stored weight of the same seed repacked 16 rows at a time on 2 MB pages, as
    // ModelWeights::move_to_huge_pages makes it.
    auto s = make(kernels::q4_rows16_source(f), rows, cols, seed);
    s->huge = fill_huge_pages(size_t(kernels::q4_rows16_bytes(s->w)), [&](void* dst) {
      kernels::q4_repack_rows16(s->w, static_cast<uint8_t*>(dst));
    });
    s->w = kernels::q4_rows16_weight(s->w, s->huge.get());
    std::vector<uint8_t>().swap(s->block_scales);
    std::vector<float>().swap(s->scales);
    return s;
  }
  auto s = std::make_unique<Stored>();
  s->w.format = f;
  s->w.rows = rows;
  s->w.cols = cols;
  const size_t n = size_t(rows * cols);
  if (f == WeightFormat::nvfp4) {
    s->data.resize(n / 2);
    s->block_scales.resize(n / 16);
    fill_random(s->data.data(), s->data.size(), seed);
    // Valid, moderate E4M3 scales (no NaN codes).
    for (size_t i = 0; i < s->block_scales.size(); ++i) s->block_scales[i] = uint8_t(0x30 + i % 16);
    s->w.block_scales = s->block_scales.data();
    s->w.global_scale = 1e-3f;
  } else if (f == WeightFormat::mxfp4) {
    s->data.resize(n / 2);
    s->block_scales.assign(n / 32, uint8_t(120));
    fill_random(s->data.data(), s->data.size(), seed);
    s->w.block_scales = s->block_scales.data();
  } else if (f == WeightFormat::int4_row_pairs || f == WeightFormat::int4_packed32) {
    // ModelOpt W4A16_AWQ (row pairs) or compressed-tensors pack-quantized (words), group 128
    s->data.resize(n / 2);
    fill_random(s->data.data(), s->data.size(), seed);
    s->w.group = 128;
    s->scales.assign(n / 128, 1e-3f);
    s->w.scales = s->scales.data();
  } else {  // BF16: random patterns in a sane range
    s->data.resize(n * 2);
    auto* h = reinterpret_cast<uint16_t*>(s->data.data());
    uint64_t st = seed | 1;
    for (size_t i = 0; i < n; ++i) h[i] = uint16_t(0x3C00 + (next(st) & 0x3FF)) ^ uint16_t(i << 15);
  }
  on_huge_pages(*s);
  return s;
}

// Enough copies of a [rows, cols] weight for kRotateBytes.
const std::vector<std::unique_ptr<Stored>>& copies(WeightFormat f, int64_t rows = kRows,
                                                   int64_t cols = kCols) {
  static std::map<std::tuple<WeightFormat, int64_t, int64_t>, std::vector<std::unique_ptr<Stored>>>
      all;
  auto& v = all[{f, rows, cols}];
  if (v.empty()) {
    const uint64_t one = make(f, 16, cols, 1)->w.stored_bytes() / 16 * uint64_t(rows);
    const size_t n = size_t((kRotateBytes + one - 1) / one);
    for (size_t i = 0; i < n; ++i) v.push_back(make(f, rows, cols, 1 + i));
  }
  return v;
}

std::vector<float> activation(int64_t n) {
  std::vector<float> x(static_cast<size_t>(n));
  uint64_t s = 7;
  for (auto& v : x) v = float(int64_t(next(s) % 2001) - 1000) * 1e-3f;
  return x;
}

// precise: the float-activation kernels (the baseline of the int8-activation ones).
void MatVec(benchmark::State& state, WeightFormat f, bool precise = false, int64_t rows = kRows,
            int64_t cols = kCols, bool transposed = false) {
  const auto& ws = copies(f, rows, cols);
  const KernelMode mode = precise ? KernelMode::exact : KernelMode::fast;
  ThreadPool pool(int(state.range(0)));
  const auto x = activation(cols);
  std::vector<float> y(static_cast<size_t>(rows));
  size_t i = 0;
  uint64_t bytes = 0;
  for (auto _ : state) {
    LinearWeight w = ws[i++ % ws.size()]->w;
    w.transposed = transposed;  // the same bytes read as the transpose (random data either way)
    linear_forward(w, x.data(), 1, y.data(), &pool, mode);
    benchmark::DoNotOptimize(y.data());
    bytes += w.stored_bytes();
  }
  state.counters["GB/s"] = benchmark::Counter(double(bytes) / 1e9, benchmark::Counter::kIsRate);
  state.counters["copies"] = double(ws.size());
}

// The same product on one thread with the weights in cache (256 x 4096: NVFP4 0.6 MB in L2,
// BF16 2 MB in L3), timed by CPU time: the kernel's compute ceiling per core, which shared
// machines disturb least.
void MatVecCached(benchmark::State& state, WeightFormat f) {
  // Arg: tokens (batched decode reads each weight once for all of them; GB/s of weights).
  const int64_t tokens = state.range(0);
  auto s = make(f, 256, 4096, 5);
  const auto x = activation(tokens * 4096);
  std::vector<float> y(static_cast<size_t>(tokens * 256));
  for (auto _ : state) {
    linear_forward(s->w, x.data(), tokens, y.data(), nullptr, KernelMode::fast);
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["GB/s"] = benchmark::Counter(
      double(s->w.stored_bytes()) * double(state.iterations()) / 1e9, benchmark::Counter::kIsRate);
}

// One STREAM-style pass (kernels::read_all, vector loads) over a stored weight's bytes, split
// over the pool in 64 tasks; returns the bytes read.
uint64_t stream_pass(const Stored& s, ThreadPool& pool, std::vector<uint64_t>& sums) {
  const auto* data = static_cast<const uint8_t*>(s.w.data);
  const size_t n = s.w.data_bytes() / 8;
  sums.resize(64);
  pool.parallel_for(64, [&](int64_t t) {
    const size_t b = n * size_t(t) / 64, e = n * size_t(t + 1) / 64;
    sums[size_t(t)] = kernels::read_all(data + b * 8, (e - b) * 8);
  });
  benchmark::DoNotOptimize(sums.data());
  return n * 8;
}

// STREAM-style read of the same rotated NVFP4 buffers, split over the same pool: the bandwidth
// ceiling the matrix-vector kernels chase.
void StreamRead(benchmark::State& state) {
  const auto& ws = copies(WeightFormat::nvfp4);
  ThreadPool pool(int(state.range(0)));
  size_t i = 0;
  uint64_t bytes = 0;
  std::vector<uint64_t> sums;
  for (auto _ : state) bytes += stream_pass(*ws[i++ % ws.size()], pool, sums);
  state.counters["GB/s"] = benchmark::Counter(double(bytes) / 1e9, benchmark::Counter::kIsRate);
}

// A matrix-vector product against the STREAM read in alternation: each iteration times one
// product (fast mode, a rotated copy) and then a STREAM read of as many bytes (rotated NVFP4
// copies, the same pool), and the counters are the medians over iterations of each rate and of
// their ratio. On a shared machine whose memory bandwidth moves by 2x within seconds, separate
// benchmarks minutes apart compare different machines; a few milliseconds apart they share the
// neighbours' load, so the ratio is what the kernel gets of what the memory gave just then.
// The alternation itself: time(fn) for a product of `bytes` weight bytes, then a STREAM read of
// as many bytes (rotated NVFP4 copies, the same pool); report() sets the medians.
class VsStream {
 public:
  explicit VsStream(ThreadPool& pool) : pool_(pool), rs_(copies(WeightFormat::nvfp4)) {}
  template <class Fn>
  void time(uint64_t bytes, const Fn& fn) {
    using clock = std::chrono::steady_clock;
    auto t0 = clock::now();
    fn();
    const double tk = std::chrono::duration<double>(clock::now() - t0).count();
    uint64_t read = 0;
    t0 = clock::now();
    while (read < bytes) read += stream_pass(*rs_[j_++ % rs_.size()], pool_, sums_);
    const double ts = std::chrono::duration<double>(clock::now() - t0).count();
    kernel_.push_back(double(bytes) / tk / 1e9);
    stream_.push_back(double(read) / ts / 1e9);
    ratio_.push_back(kernel_.back() / stream_.back());
  }
  void report(benchmark::State& state) const {
    state.counters["GB/s"] = median(kernel_);
    state.counters["stream_GB/s"] = median(stream_);
    state.counters["of_stream"] = median(ratio_);
  }

 private:
  static double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0.0 : v[v.size() / 2];
  }
  ThreadPool& pool_;
  const std::vector<std::unique_ptr<Stored>>& rs_;
  std::vector<uint64_t> sums_;
  std::vector<double> kernel_, stream_, ratio_;
  size_t j_ = 0;
};

void MatVecVsStream(benchmark::State& state, WeightFormat f) {
  const auto& ws = copies(f);
  ThreadPool pool(int(state.range(0)));
  const auto x = activation(kCols);
  std::vector<float> y(static_cast<size_t>(kRows));
  VsStream vs(pool);
  size_t i = 0;
  for (auto _ : state) {
    const LinearWeight& w = ws[i++ % ws.size()]->w;
    vs.time(w.stored_bytes(), [&] {
      linear_forward(w, x.data(), 1, y.data(), &pool, KernelMode::fast);
      benchmark::DoNotOptimize(y.data());
    });
  }
  vs.report(state);
}

void MatMul(benchmark::State& state, WeightFormat f, bool precise = false) {
  const int64_t tokens = 512;
  const KernelMode mode = precise ? KernelMode::exact : KernelMode::fast;
  auto s = make(f, kRows, kCols, 99);
  ThreadPool pool(int(state.range(0)));
  const auto x = activation(tokens * kCols);
  std::vector<float> y(static_cast<size_t>(tokens * kRows));
  for (auto _ : state) {
    linear_forward(s->w, x.data(), tokens, y.data(), &pool, mode);
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["GFLOP/s"] = benchmark::Counter(
      2.0 * double(tokens) * double(kRows) * double(kCols) * double(state.iterations()) / 1e9,
      benchmark::Counter::kIsRate);
}

// GGUF tensors in ggml blocks: random block bytes (the product's speed does not depend on the
// values), as many copies as kRotateBytes needs.
const std::vector<std::unique_ptr<Stored>>& ggml_copies(GgmlType type, int64_t rows, int64_t cols) {
  static std::map<std::tuple<GgmlType, int64_t, int64_t>, std::vector<std::unique_ptr<Stored>>> all;
  auto& v = all[{type, rows, cols}];
  if (v.empty()) {
    const GgmlTypeInfo& info = ggml_type_info(type);
    const uint64_t one = uint64_t(rows * cols / info.block_size * info.block_bytes);
    const size_t n = size_t((kRotateBytes + one - 1) / one);
    for (size_t i = 0; i < n; ++i) {
      auto s = std::make_unique<Stored>();
      s->data.resize(size_t(one));
      fill_random(s->data.data(), s->data.size(), 1 + i);
      s->w.format = WeightFormat::ggml;
      s->w.ggml_type = uint32_t(type);
      s->w.group = info.block_size;
      s->w.rows = rows;
      s->w.cols = cols;
      on_huge_pages(*s);
      v.push_back(std::move(s));
    }
  }
  return v;
}

void GgmlMatVec(benchmark::State& state, GgmlType type, int64_t rows = kRows, int64_t cols = kCols) {
  const auto& ws = ggml_copies(type, rows, cols);
  ThreadPool pool(int(state.range(0)));
  const auto x = activation(cols);
  std::vector<float> y(static_cast<size_t>(rows));
  size_t i = 0;
  uint64_t bytes = 0;
  for (auto _ : state) {
    const LinearWeight& w = ws[i++ % ws.size()]->w;
    linear_forward(w, x.data(), 1, y.data(), &pool, KernelMode::fast);
    benchmark::DoNotOptimize(y.data());
    bytes += w.stored_bytes();
  }
  state.counters["GB/s"] = benchmark::Counter(double(bytes) / 1e9, benchmark::Counter::kIsRate);
}

// One thread, 256 x 4096 in cache (0.6-1.1 MB), timed by CPU time: the kernel's compute ceiling
// per core, as MatVecCached.
void GgmlMatVecCached(benchmark::State& state, GgmlType type) {
  const GgmlTypeInfo& info = ggml_type_info(type);
  Stored s;
  s.data.resize(size_t(256 * 4096 / info.block_size * info.block_bytes));
  fill_random(s.data.data(), s.data.size(), 5);
  s.w.format = WeightFormat::ggml;
  s.w.ggml_type = uint32_t(type);
  s.w.group = info.block_size;
  s.w.rows = 256;
  s.w.cols = 4096;
  s.w.data = s.data.data();
  const auto x = activation(4096);
  std::vector<float> y(256);
  for (auto _ : state) {
    linear_forward(s.w, x.data(), 1, y.data(), nullptr, KernelMode::fast);
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["GB/s"] = benchmark::Counter(
      double(s.data.size()) * double(state.iterations()) / 1e9, benchmark::Counter::kIsRate);
}

void GgmlMatMul(benchmark::State& state, GgmlType type) {
  const int64_t tokens = 512;
  const auto& ws = ggml_copies(type, kRows, kCols);
  ThreadPool pool(int(state.range(0)));
  const auto x = activation(tokens * kCols);
  std::vector<float> y(static_cast<size_t>(tokens * kRows));
  for (auto _ : state) {
    linear_forward(ws[0]->w, x.data(), tokens, y.data(), &pool, KernelMode::fast);
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["GFLOP/s"] = benchmark::Counter(
      2.0 * double(tokens) * double(kRows) * double(kCols) * double(state.iterations()) / 1e9,
      benchmark::Counter::kIsRate);
}

// One Llama-3.2-1B decoder layer's Linear products for 512 tokens (q, k, v, o 2048 x 2048 /
// 512 x 2048, gate and up 8192 x 2048, down 2048 x 8192), in the model's order, over 4 copies
// of the layer: the matrix-matrix kernel at the shapes whole-model prefill runs, the ceiling
// `qforge bench`'s prefill is compared with (2 x 60.8 M multiply-adds per token).
void MatMulLayerLlama1b(benchmark::State& state, WeightFormat f) {
  const int64_t tokens = 512, hidden = 2048, kv = 512, inter = 8192;
  const std::pair<int64_t, int64_t> shapes[] = {{hidden, hidden}, {kv, hidden},    {kv, hidden},
                                                {hidden, hidden}, {inter, hidden}, {inter, hidden},
                                                {hidden, inter}};
  std::vector<std::vector<std::unique_ptr<Stored>>> layers(4);
  double flops = 0;
  for (size_t l = 0; l < layers.size(); ++l)
    for (const auto& [rows, cols] : shapes) {
      layers[l].push_back(make(f, rows, cols, 1 + layers[l].size() + 7 * l));
      if (l == 0) flops += 2.0 * double(tokens) * double(rows) * double(cols);
    }
  ThreadPool pool(int(state.range(0)));
  const auto x = activation(tokens * inter);
  std::vector<float> y(static_cast<size_t>(tokens * inter));
  size_t l = 0;
  for (auto _ : state) {
    for (const auto& s : layers[l]) linear_forward(s->w, x.data(), tokens, y.data(), &pool, KernelMode::fast);
    benchmark::DoNotOptimize(y.data());
    l = (l + 1) % layers.size();
  }
  state.counters["GFLOP/s"] =
      benchmark::Counter(flops * double(state.iterations()) / 1e9, benchmark::Counter::kIsRate);
}

// One Llama-3.2-1B decoder layer's Linear products for one token, called as the model calls
// them (q/k/v sharing their input, o, gate/up with the gating, down), over enough copies of the
// layer to stream from memory: what whole-model decode runs, next to the single 4096 x 14336
// product (short rows, small k/v matrices, several pool dispatches per layer). GB/s of weight
// bytes, and of_stream: each layer against a STREAM read of as many bytes in alternation, as
// KernelVsStream*.
void MatVecLayerLlama1b(benchmark::State& state, WeightFormat f) {
  const int64_t hidden = 2048, kv = 512, inter = 8192;
  const std::pair<int64_t, int64_t> shapes[] = {{hidden, hidden}, {kv, hidden},    {kv, hidden},
                                                {hidden, hidden}, {inter, hidden}, {inter, hidden},
                                                {hidden, inter}};
  std::vector<std::vector<std::unique_ptr<Stored>>> layers;
  uint64_t total = 0;
  while (total < kRotateBytes) {
    layers.emplace_back();
    for (const auto& [rows, cols] : shapes) {
      layers.back().push_back(make(f, rows, cols, 1 + 7 * layers.size() + layers.back().size()));
      total += layers.back().back()->w.stored_bytes();
    }
  }
  ThreadPool pool(int(state.range(0)));
  const auto x = activation(inter);
  std::vector<float> y(static_cast<size_t>(inter)), y2(y.size());
  VsStream vs(pool);
  size_t l = 0;
  for (auto _ : state) {
    uint64_t bytes = 0;
    for (const auto& s : layers[l]) bytes += s->w.stored_bytes();
    vs.time(bytes, [&] {
      const auto& L = layers[l];
      const LinearWeight* qkv[] = {&L[0]->w, &L[1]->w, &L[2]->w};
      float* qkv_out[] = {y.data(), y.data() + hidden, y.data() + hidden + kv};
      linear_forward_shared_input(qkv, x.data(), 1, qkv_out, &pool, KernelMode::fast);
      linear_forward(L[3]->w, x.data(), 1, y.data(), &pool, KernelMode::fast);
      linear_forward_gated_silu(L[4]->w, L[5]->w, x.data(), 1, y.data(), y2.data(), &pool,
                                KernelMode::fast);
      linear_forward(L[6]->w, x.data(), 1, y.data(), &pool, KernelMode::fast);
      benchmark::DoNotOptimize(y.data());
    });
    l = (l + 1) % layers.size();
  }
  vs.report(state);
  state.counters["copies"] = double(layers.size());
}

void KernelGgmlMatVecQ4_0(benchmark::State& s) { GgmlMatVec(s, GgmlType::Q4_0); }
void KernelGgmlMatVecQ8_0(benchmark::State& s) { GgmlMatVec(s, GgmlType::Q8_0); }
void KernelGgmlMatVecMxfp4(benchmark::State& s) { GgmlMatVec(s, GgmlType::MXFP4); }
void KernelGgmlMatVecNvfp4(benchmark::State& s) { GgmlMatVec(s, GgmlType::NVFP4); }
void KernelGgmlMatVecQ4_K(benchmark::State& s) { GgmlMatVec(s, GgmlType::Q4_K); }
void KernelGgmlMatVecQ6_K(benchmark::State& s) { GgmlMatVec(s, GgmlType::Q6_K); }
void KernelGgmlMatVecQ4_0Llama1b(benchmark::State& s) { GgmlMatVec(s, GgmlType::Q4_0, 8192, 2048); }
void KernelGgmlMatVecNvfp4Llama1b(benchmark::State& s) { GgmlMatVec(s, GgmlType::NVFP4, 8192, 2048); }
void KernelGgmlMatVecCachedQ4_0(benchmark::State& s) { GgmlMatVecCached(s, GgmlType::Q4_0); }
void KernelGgmlMatVecCachedQ8_0(benchmark::State& s) { GgmlMatVecCached(s, GgmlType::Q8_0); }
void KernelGgmlMatVecCachedNvfp4(benchmark::State& s) { GgmlMatVecCached(s, GgmlType::NVFP4); }
void KernelGgmlMatVecCachedQ6_K(benchmark::State& s) { GgmlMatVecCached(s, GgmlType::Q6_K); }
void KernelGgmlMatMulQ4_0(benchmark::State& s) { GgmlMatMul(s, GgmlType::Q4_0); }
void KernelGgmlMatMulNvfp4(benchmark::State& s) { GgmlMatMul(s, GgmlType::NVFP4); }
void KernelGgmlMatMulQ4_K(benchmark::State& s) { GgmlMatMul(s, GgmlType::Q4_K); }

void KernelVsStreamNvfp4(benchmark::State& s) { MatVecVsStream(s, WeightFormat::nvfp4); }
void KernelVsStreamMxfp4(benchmark::State& s) { MatVecVsStream(s, WeightFormat::mxfp4); }
void KernelVsStreamInt4(benchmark::State& s) { MatVecVsStream(s, WeightFormat::int4_row_pairs); }
void KernelVsStreamInt4Words(benchmark::State& s) {
  MatVecVsStream(s, WeightFormat::int4_packed32);
}
void KernelVsStreamBf16(benchmark::State& s) { MatVecVsStream(s, WeightFormat::bf16); }
// 4-bit weights repacked 16 rows at a time (kernels/q4_rows16.h) where the CPU has the kernel.
bool rows16_kernel(benchmark::State& s) {
  if (kernels::cpu_has_avx512vnni() && kernels::cpu_has_avx512vbmi()) return true;
  s.SkipWithError("no AVX-512 VNNI + VBMI: 4-bit weights are not repacked on this CPU");
  return false;
}
void KernelVsStreamNvfp4Rows16(benchmark::State& s) {
  if (rows16_kernel(s)) MatVecVsStream(s, WeightFormat::nvfp4_rows16);
}
void KernelMatVecNvfp4Rows16Cached(benchmark::State& s) {
  if (rows16_kernel(s)) MatVecCached(s, WeightFormat::nvfp4_rows16);
}
void KernelMatVecLayerLlama1bNvfp4Rows16(benchmark::State& s) {
  if (rows16_kernel(s)) MatVecLayerLlama1b(s, WeightFormat::nvfp4_rows16);
}
void KernelVsStreamMxfp4Rows16(benchmark::State& s) {
  if (rows16_kernel(s)) MatVecVsStream(s, WeightFormat::mxfp4_rows16);
}
void KernelMatVecMxfp4Rows16Cached(benchmark::State& s) {
  if (rows16_kernel(s)) MatVecCached(s, WeightFormat::mxfp4_rows16);
}
void KernelVsStreamInt4Rows16(benchmark::State& s) {
  if (rows16_kernel(s)) MatVecVsStream(s, WeightFormat::int4_row_pairs_rows16);
}
void KernelMatVecInt4Rows16Cached(benchmark::State& s) {
  if (rows16_kernel(s)) MatVecCached(s, WeightFormat::int4_row_pairs_rows16);
}
void KernelMatVecInt4WordsRows16Cached(benchmark::State& s) {
  if (rows16_kernel(s)) MatVecCached(s, WeightFormat::int4_packed32_rows16);
}
void KernelMatVecNvfp4(benchmark::State& s) { MatVec(s, WeightFormat::nvfp4); }
void KernelMatVecNvfp4Precise(benchmark::State& s) { MatVec(s, WeightFormat::nvfp4, true); }
void KernelMatVecBf16(benchmark::State& s) { MatVec(s, WeightFormat::bf16); }
// Llama-3.2-1B's gate/up shape (8192 x 2048): short rows, so more row blocks per byte.
void KernelMatVecNvfp4Short(benchmark::State& s) {
  MatVec(s, WeightFormat::nvfp4, false, 8192, 2048);
}
// A Qwen3-30B-A3B expert's gate/up shape (768 x 2048, 0.9 MB): MoE decode runs dozens of these
// per layer, so the pool's dispatch cost per product shows against the bytes.
void KernelMatVecNvfp4Expert(benchmark::State& s) {
  MatVec(s, WeightFormat::nvfp4, false, 768, 2048);
}
// gpt-oss's experts as the hub stores them (x @ W, read in place): gate_up [2 x 2880, 2880] BF16
// stored transposed, next to the same shape stored row-major.
void KernelMatVecBf16Transposed(benchmark::State& s) {
  MatVec(s, WeightFormat::bf16, false, 5760, 2880, s.range(1) != 0);
}
void KernelMatVecInt4(benchmark::State& s) { MatVec(s, WeightFormat::int4_row_pairs); }
void KernelMatVecMxfp4(benchmark::State& s) { MatVec(s, WeightFormat::mxfp4); }
void KernelMatVecNvfp4Cached(benchmark::State& s) { MatVecCached(s, WeightFormat::nvfp4); }
void KernelMatVecMxfp4Cached(benchmark::State& s) { MatVecCached(s, WeightFormat::mxfp4); }
void KernelMatVecInt4Cached(benchmark::State& s) { MatVecCached(s, WeightFormat::int4_row_pairs); }
void KernelMatVecInt4Words(benchmark::State& s) { MatVec(s, WeightFormat::int4_packed32); }
void KernelMatVecInt4WordsCached(benchmark::State& s) { MatVecCached(s, WeightFormat::int4_packed32); }
void KernelMatVecBf16Cached(benchmark::State& s) { MatVecCached(s, WeightFormat::bf16); }
void KernelMatMulNvfp4(benchmark::State& s) { MatMul(s, WeightFormat::nvfp4); }
void KernelMatMulBf16(benchmark::State& s) { MatMul(s, WeightFormat::bf16); }
void KernelMatMulNvfp4Precise(benchmark::State& s) { MatMul(s, WeightFormat::nvfp4, true); }
void KernelMatMulBf16Precise(benchmark::State& s) { MatMul(s, WeightFormat::bf16, true); }
void KernelMatVecLayerLlama1bNvfp4(benchmark::State& s) { MatVecLayerLlama1b(s, WeightFormat::nvfp4); }
void KernelMatVecLayerLlama1bBf16(benchmark::State& s) { MatVecLayerLlama1b(s, WeightFormat::bf16); }
void KernelMatMulLayerLlama1bBf16(benchmark::State& s) { MatMulLayerLlama1b(s, WeightFormat::bf16); }
void KernelMatMulLayerLlama1bNvfp4(benchmark::State& s) { MatMulLayerLlama1b(s, WeightFormat::nvfp4); }
// The layout the engine runs NVFP4 in on AVX-512 VNNI + VBMI CPUs (`bench`'s prefill there).
void KernelMatMulLayerLlama1bNvfp4Rows16(benchmark::State& s) {
  if (rows16_kernel(s)) MatMulLayerLlama1b(s, WeightFormat::nvfp4_rows16);
}

BENCHMARK(StreamRead)->Name("KernelStreamRead")->Arg(1)->Arg(2)->UseRealTime()->MinTime(1.0);
BENCHMARK(KernelVsStreamNvfp4)->Arg(1)->Arg(2)->UseRealTime()->MinTime(2.0);
BENCHMARK(KernelVsStreamNvfp4Rows16)->Arg(1)->Arg(2)->UseRealTime()->MinTime(2.0);
BENCHMARK(KernelVsStreamMxfp4Rows16)->Arg(1)->Arg(2)->UseRealTime()->MinTime(2.0);
BENCHMARK(KernelVsStreamInt4Rows16)->Arg(1)->Arg(2)->UseRealTime()->MinTime(2.0);
BENCHMARK(KernelVsStreamMxfp4)->Arg(1)->Arg(2)->UseRealTime()->MinTime(2.0);
BENCHMARK(KernelVsStreamInt4)->Arg(1)->Arg(2)->UseRealTime()->MinTime(2.0);
BENCHMARK(KernelVsStreamInt4Words)->Arg(1)->Arg(2)->UseRealTime()->MinTime(2.0);
BENCHMARK(KernelVsStreamBf16)->Arg(1)->Arg(2)->UseRealTime()->MinTime(2.0);
BENCHMARK(KernelMatVecNvfp4)->Arg(1)->Arg(2)->UseRealTime()->MinTime(1.0);
BENCHMARK(KernelMatVecNvfp4Precise)->Arg(1)->Arg(2)->UseRealTime()->MinTime(1.0);
BENCHMARK(KernelMatVecNvfp4Short)->Arg(1)->Arg(2)->UseRealTime()->MinTime(1.0);
BENCHMARK(KernelMatVecNvfp4Expert)->Arg(1)->Arg(2)->UseRealTime()->MinTime(1.0);
BENCHMARK(KernelMatVecBf16Transposed)->Args({2, 0})->Args({2, 1})->UseRealTime()->MinTime(1.0);
BENCHMARK(KernelMatVecInt4)->Arg(1)->Arg(2)->UseRealTime()->MinTime(1.0);
BENCHMARK(KernelMatVecMxfp4)->Arg(1)->Arg(2)->UseRealTime()->MinTime(1.0);
BENCHMARK(KernelMatVecNvfp4Cached)->Arg(1)->Arg(8)->MinTime(0.5);
BENCHMARK(KernelMatVecNvfp4Rows16Cached)->Arg(1)->Arg(8)->MinTime(0.5);
BENCHMARK(KernelMatVecMxfp4Rows16Cached)->Arg(1)->Arg(8)->MinTime(0.5);
BENCHMARK(KernelMatVecInt4Rows16Cached)->Arg(1)->Arg(8)->MinTime(0.5);
BENCHMARK(KernelMatVecInt4WordsRows16Cached)->Arg(1)->Arg(8)->MinTime(0.5);
BENCHMARK(KernelMatVecMxfp4Cached)->Arg(1)->Arg(8)->MinTime(0.5);
BENCHMARK(KernelMatVecInt4Cached)->Arg(1)->Arg(8)->MinTime(0.5);
BENCHMARK(KernelMatVecInt4Words)->Arg(1)->Arg(2)->UseRealTime()->MinTime(1.0);
BENCHMARK(KernelMatVecInt4WordsCached)->Arg(1)->Arg(8)->MinTime(0.5);
BENCHMARK(KernelMatVecBf16Cached)->Arg(1)->Arg(8)->MinTime(0.5);
BENCHMARK(KernelMatVecBf16)->Arg(2)->UseRealTime()->MinTime(1.0);
BENCHMARK(KernelMatVecLayerLlama1bNvfp4)->Arg(1)->Arg(2)->UseRealTime()->MinTime(1.0);
BENCHMARK(KernelMatVecLayerLlama1bNvfp4Rows16)->Arg(1)->Arg(2)->UseRealTime()->MinTime(1.0);
BENCHMARK(KernelMatVecLayerLlama1bBf16)->Arg(2)->UseRealTime()->MinTime(1.0);
BENCHMARK(KernelGgmlMatVecQ4_0)->Arg(1)->Arg(2)->UseRealTime()->MinTime(1.0);
BENCHMARK(KernelGgmlMatVecQ8_0)->Arg(1)->Arg(2)->UseRealTime()->MinTime(1.0);
BENCHMARK(KernelGgmlMatVecMxfp4)->Arg(1)->Arg(2)->UseRealTime()->MinTime(1.0);
BENCHMARK(KernelGgmlMatVecNvfp4)->Arg(1)->Arg(2)->UseRealTime()->MinTime(1.0);
BENCHMARK(KernelGgmlMatVecQ4_K)->Arg(1)->Arg(2)->UseRealTime()->MinTime(1.0);
BENCHMARK(KernelGgmlMatVecQ6_K)->Arg(1)->Arg(2)->UseRealTime()->MinTime(1.0);
BENCHMARK(KernelGgmlMatVecQ4_0Llama1b)->Arg(2)->UseRealTime()->MinTime(1.0);
BENCHMARK(KernelGgmlMatVecNvfp4Llama1b)->Arg(2)->UseRealTime()->MinTime(1.0);
BENCHMARK(KernelGgmlMatVecCachedQ4_0)->MinTime(0.5);
BENCHMARK(KernelGgmlMatVecCachedQ8_0)->MinTime(0.5);
BENCHMARK(KernelGgmlMatVecCachedNvfp4)->MinTime(0.5);
BENCHMARK(KernelGgmlMatVecCachedQ6_K)->MinTime(0.5);
BENCHMARK(KernelGgmlMatMulQ4_0)->Arg(2)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(KernelGgmlMatMulNvfp4)->Arg(2)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(KernelGgmlMatMulQ4_K)->Arg(2)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(KernelMatMulNvfp4)->Arg(2)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(KernelMatMulBf16)->Arg(2)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(KernelMatMulNvfp4Precise)->Arg(2)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(KernelMatMulBf16Precise)->Arg(2)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(KernelMatMulLayerLlama1bBf16)->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(KernelMatMulLayerLlama1bNvfp4)->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(KernelMatMulLayerLlama1bNvfp4Rows16)->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace qf

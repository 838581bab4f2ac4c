// Batched decode products: one NVFP4 and one BF16 4096 x 14336 weight against 1 and 8 tokens
// (fast mode: int8 activations for NVFP4, float activations for BF16), as GB/s of weights per
// step. Eight copies rotate so the weights stream from memory. A step of 8 tokens reads the
// weights once: at the memory's limit it costs what a step of 1 token costs.
// Run: qforge_bench --benchmark_filter='BatchDecode' --benchmark_repetitions=5
//        --benchmark_report_aggregates_only=true
#include "core/thread_pool.h"
#include "kernels/linear.h"

#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstring>
#include <vector>

namespace qf {
namespace {

constexpr int64_t kRows = 4096, kCols = 14336, kCopies = 8;

struct Weights {
  std::vector<std::vector<uint8_t>> data, scales;
  std::vector<LinearWeight> w;
};

const Weights& weights(WeightFormat f) {
  static Weights nv, bf;
  Weights& s = f == WeightFormat::nvfp4 ? nv : bf;
  if (!s.w.empty()) return s;
  uint64_t st = 0x9E3779B97F4A7C15ull;
  auto rnd = [&st] {
    st ^= st << 13;
    st ^= st >> 7;
    st ^= st << 17;
    return st;
  };
  for (int64_t i = 0; i < kCopies; ++i) {
    LinearWeight w;
    w.format = f;
    w.rows = kRows;
    w.cols = kCols;
    const size_t n = size_t(kRows * kCols);
    std::vector<uint8_t> d(f == WeightFormat::nvfp4 ? n / 2 : n * 2), sc;
    for (size_t k = 0; k + 8 <= d.size(); k += 8) {
      uint64_t v = rnd();
      // BF16: magnitudes in [0.5, 2) with random signs and mantissas (no subnormals, which
      // some CPUs multiply slowly).
      if (f == WeightFormat::bf16) v = (v & 0x807F807F807F807Full) | 0x3F003F003F003F00ull;
      std::memcpy(d.data() + k, &v, 8);
    }
    if (f == WeightFormat::nvfp4) {
      sc.resize(n / 16);
      for (size_t k = 0; k < sc.size(); ++k) sc[k] = uint8_t(0x30 + k % 16);
      w.global_scale = 1e-3f;
    }
    s.data.push_back(std::move(d));
    s.scales.push_back(std::move(sc));
    w.data = s.data.back().data();
    w.block_scales = s.scales.back().empty() ? nullptr : s.scales.back().data();
    s.w.push_back(w);
  }
  return s;
}

void BatchDecode(benchmark::State& state) {
  const auto f = WeightFormat(state.range(0));
  const int64_t tokens = state.range(1);
  const Weights& ws = weights(f);
  ThreadPool pool(int(state.range(2)));
  std::vector<float> x(size_t(tokens * kCols)), y(size_t(tokens * kRows));
  for (size_t i = 0; i < x.size(); ++i) x[i] = float(int64_t(i * 7919 % 2001) - 1000) * 1e-3f;
  size_t i = 0;
  for (auto _ : state) {
    linear_forward(ws.w[i], x.data(), tokens, y.data(), &pool, KernelMode::fast);
    benchmark::DoNotOptimize(y.data());
    i = (i + 1) % ws.w.size();
  }
  state.counters["GB/s"] = benchmark::Counter(
      double(ws.w[0].stored_bytes()) * double(state.iterations()), benchmark::Counter::kIsRate);
  state.SetLabel(std::string(weight_format_name(f)) + " x " + std::to_string(tokens) + " tokens");
}

BENCHMARK(BatchDecode)
    ->ArgsProduct({{int64_t(WeightFormat::nvfp4), int64_t(WeightFormat::bf16)}, {1, 8}, {1, 2}})
    ->UseRealTime()
    ->MinTime(0.5);

}  // namespace
}  // namespace qf

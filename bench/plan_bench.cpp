// The planner's costs at 2 threads: the proxy score of one llama-8b-shaped Linear (in 4096,
// out 14336) in NVFP4 given X^T X (fake quantization plus tr(dW H dW^T), the reference), given
// 256 sampled input rows (fake quantization plus one BF16 product, what `qforge sensitivity`
// runs), and with the diagonal fallback; and the budget solver
// on 32 layers x 7 Linears x 5 candidates (nvfp4, mxfp4, fp8, int4, keep) at 4.8 bits per weight.
// Run: qforge_bench --benchmark_filter='Plan'
#include "core/thread_pool.h"
#include "plan/budget_solver.h"
#include "plan/candidates.h"
#include "plan/sensitivity.h"

#include <benchmark/benchmark.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

namespace qf {
namespace {

constexpr int64_t kIn = 4096, kOut = 14336;

std::vector<float> weights(int64_t rows, int64_t cols) {
  std::vector<float> w(size_t(rows * cols));
  uint64_t s = 0x9E3779B97F4A7C15ull;
  for (auto& x : w) {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    x = (float((s >> 40) & 0xFFFF) / 65536.f - 0.5f) * 0.05f;
  }
  return w;
}

LinearStats ar1_stats(int64_t in) {
  LinearStats st;
  st.tokens = 1;
  st.channel_mean_abs.assign(size_t(in), 1.f);
  st.channel_amax.assign(size_t(in), 4.f);
  st.xtx.resize(size_t(in * in));
  for (int64_t i = 0; i < in; ++i)
    for (int64_t j = 0; j < in; ++j) st.xtx[size_t(i * in + j)] = std::pow(0.9, double(std::abs(i - j)));
  return st;
}

// proxy_unit_scores of one NVFP4 candidate for a [kOut, kIn] Linear with statistics `st`.
void run_proxy(benchmark::State& state, const LinearStats& st) {
  const std::vector<float> w = weights(kOut, kIn);
  ThreadPool pool(2);
  DecisionUnit unit;
  unit.name = "model.layers.0.mlp.gate_proj";
  unit.linears = {0};
  unit.candidates = {{FormatChoice::of(Format::nvfp4), 0}};
  const WeightRows wr{w.data(), DType::F32, kOut, kIn};
  const LinearStats* sp = &st;
  for (auto _ : state) {
    const std::vector<double> s = proxy_unit_scores(unit, std::span(&wr, 1), std::span(&sp, 1), pool);
    benchmark::DoNotOptimize(s.data());
  }
}

// The full X^T X reference.
void PlanProxyNvfp4(benchmark::State& state) { run_proxy(state, ar1_stats(kIn)); }
BENCHMARK(PlanProxyNvfp4)->Unit(benchmark::kMillisecond)->Iterations(2)->UseRealTime();

// What `sensitivity` uses: 256 sampled input rows.
void PlanProxySampledNvfp4(benchmark::State& state) {
  LinearStats st;
  st.tokens = 256;
  st.samples = weights(256, kIn);
  run_proxy(state, st);
}
BENCHMARK(PlanProxySampledNvfp4)->Unit(benchmark::kMillisecond)->Iterations(3)->UseRealTime();

// The diagonal fallback (channel mean |x| only).
void PlanProxyDiagonalNvfp4(benchmark::State& state) {
  LinearStats st;
  st.tokens = 1;
  st.channel_mean_abs.assign(size_t(kIn), 1.f);
  run_proxy(state, st);
}
BENCHMARK(PlanProxyDiagonalNvfp4)->Unit(benchmark::kMillisecond)->Iterations(3)->UseRealTime();

void PlanSolver(benchmark::State& state) {
  // Llama-3-8B shapes, every Linear its own unit (no fusion): q, k, v, o, gate, up, down.
  const int64_t shapes[7][2] = {{4096, 4096}, {1024, 4096}, {1024, 4096}, {4096, 4096},
                                {14336, 4096}, {14336, 4096}, {4096, 14336}};
  const FormatChoice formats[5] = {FormatChoice::of(Format::nvfp4), FormatChoice::of(Format::mxfp4),
                                   FormatChoice::of(Format::fp8), FormatChoice::of(Format::int4),
                                   FormatChoice::keep()};
  std::mt19937 rng(1);
  std::lognormal_distribution<double> sens(0.0, 1.0);
  std::vector<KnapsackUnit> units;
  uint64_t numel = 0;
  for (int layer = 0; layer < 32; ++layer)
    for (const auto& s : shapes) {
      KnapsackUnit u;
      const double base = sens(rng);
      const double factor[5] = {1.0, 1.3, 0.05, 1.1, 0.0};
      for (int f = 0; f < 5; ++f) {
        u.cost.push_back(linear_stored_bytes(formats[f], s[0], s[1], DType::BF16));
        u.score.push_back(base * factor[f]);
      }
      numel += uint64_t(s[0] * s[1]);
      units.push_back(std::move(u));
    }
  const uint64_t budget = uint64_t(4.8 * double(numel) / 8.0);
  for (auto _ : state) {
    const KnapsackResult r = solve_knapsack(units, budget);
    benchmark::DoNotOptimize(r.total_score);
    state.counters["bucket_bytes"] = double(r.granularity);
    state.counters["bound_bytes"] = double(r.rounding_bound_bytes);
    state.counters["bits"] = 8.0 * double(r.total_bytes) / double(numel);
  }
}
BENCHMARK(PlanSolver)->Unit(benchmark::kMillisecond)->Iterations(3)->UseRealTime();

}  // namespace
}  // namespace qf

// Seconds per layer of the weight algorithms at 2 threads: GPTQ on 4096x4096 and 14336x4096
// (out x in) layers, AWQ (scale search + clip) and MSE (NVFP4 global amax search, FP8 sweep)
// on 4096x4096. Synthetic weights and statistics (XtX an AR(1) covariance, 128 sample rows).
// Run: qforge_bench --benchmark_filter='Algo'
#include "algo/awq.h"
#include "algo/gptq.h"
#include "algo/mse.h"
#include "core/thread_pool.h"

#include <benchmark/benchmark.h>

#include <cmath>
#include <cstdint>
#include <vector>

namespace qf {
namespace {

constexpr int64_t kIn = 4096;

std::vector<float> weights(int64_t rows, int64_t cols) {
  std::vector<float> w(size_t(rows * cols));
  uint64_t s = 0x9E3779B97F4A7C15ull;
  for (auto& x : w) {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    const float u = float((s & 0xFFFF) + ((s >> 16) & 0xFFFF) + ((s >> 32) & 0xFFFF)) / 65536.f - 1.5f;
    x = u * 0.03f * (((s >> 50) & 0x3FF) == 0 ? 20.f : 1.f);
  }
  return w;
}

LinearStats stats(int64_t in, bool xtx, int64_t samples) {
  LinearStats st;
  st.tokens = 1;
  st.channel_amax.assign(size_t(in), 0.f);
  st.channel_mean_abs.assign(size_t(in), 0.f);
  for (int64_t c = 0; c < in; ++c) {
    st.channel_mean_abs[size_t(c)] = 0.1f + float(c % 97) * 0.02f;
    st.channel_amax[size_t(c)] = 10.f * st.channel_mean_abs[size_t(c)];
  }
  if (xtx) {
    st.xtx.resize(size_t(in * in));
    for (int64_t i = 0; i < in; ++i)
      for (int64_t j = 0; j < in; ++j) st.xtx[size_t(i * in + j)] = std::pow(0.9, double(std::abs(i - j)));
  }
  const std::vector<float> x = weights(samples, in);
  st.samples.resize(x.size());
  for (size_t i = 0; i < x.size(); ++i) st.samples[i] = x[i] * 30.f * st.channel_mean_abs[i % size_t(in)];
  return st;
}

void AlgoGptq(benchmark::State& state) {
  const int64_t rows = state.range(0);
  const std::vector<float> w = weights(rows, kIn);
  const LinearStats st = stats(kIn, true, 0);
  ThreadPool pool(2);
  for (auto _ : state) {
    const GptqResult r = quantize_gptq(WeightRows{w.data(), DType::F32, rows, kIn}, st, GptqOptions{}, 0.6f, pool);
    benchmark::DoNotOptimize(r.tensor.codes.data());
  }
}
BENCHMARK(AlgoGptq)->Arg(4096)->Arg(14336)->Iterations(1)->Unit(benchmark::kSecond)->UseRealTime();

void AlgoAwq(benchmark::State& state) {
  const std::vector<float> w = weights(kIn, kIn);
  const LinearStats st = stats(kIn, false, 128);
  ThreadPool pool(2);
  AwqOptions o;
  o.format.format = state.range(0) == 0 ? Format::nvfp4 : Format::int4;
  const WeightRows view{w.data(), DType::F32, kIn, kIn};
  for (auto _ : state) {
    const AwqResult r = quantize_awq(std::span(&view, 1), st, o, pool);
    benchmark::DoNotOptimize(r.tensors[0].codes.data());
  }
}
BENCHMARK(AlgoAwq)->Arg(0)->Arg(1)->Iterations(1)->Unit(benchmark::kSecond)->UseRealTime();

void AlgoMseNvfp4Global(benchmark::State& state) {
  const std::vector<float> w = weights(kIn, kIn);
  ThreadPool pool(2);
  for (auto _ : state) {
    const QuantizedTensor q = quantize_mse(WeightRows{w.data(), DType::F32, kIn, kIn}, RtnOptions{}, MseOptions{}, pool);
    benchmark::DoNotOptimize(q.codes.data());
  }
}
BENCHMARK(AlgoMseNvfp4Global)->Iterations(1)->Unit(benchmark::kSecond)->UseRealTime();

void AlgoMseFp8Sweep(benchmark::State& state) {
  const std::vector<float> w = weights(kIn, kIn);
  ThreadPool pool(2);
  for (auto _ : state) {
    const QuantizedTensor q = quantize_nvfp4_fp8_sweep(WeightRows{w.data(), DType::F32, kIn, kIn}, 0.9f, pool);
    benchmark::DoNotOptimize(q.codes.data());
  }
}
BENCHMARK(AlgoMseFp8Sweep)->Iterations(1)->Unit(benchmark::kSecond)->UseRealTime();

}  // namespace
}  // namespace qf

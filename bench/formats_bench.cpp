// Throughput of the format quantizers on a Llama-8B MLP-sized matrix (4096 x 14336), in bytes of
// input per second, next to a memcpy of the same bytes (the memory-bandwidth ceiling).
// Run: qforge_bench --benchmark_filter='Nvfp4|Memcpy' --benchmark_repetitions=3
#include "core/numeric.h"
#include "core/progress.h"
#include "core/thread_pool.h"
#include "formats/fp8.h"
#include "formats/int4.h"
#include "formats/mxfp4.h"
#include "formats/nvfp4.h"
#include "formats/weight_rows.h"

#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

namespace qf {
namespace {

constexpr int64_t kRows = 4096;
constexpr int64_t kCols = 14336;
constexpr int64_t kElements = kRows * kCols;

// Weight-like values (roughly normal, std 0.02, with a few outliers), made with a cheap
// generator because 59M std::normal_distribution draws would dominate start-up.
const std::vector<float>& matrix_f32() {
  static const std::vector<float> v = [] {
    std::vector<float> out(static_cast<size_t>(kElements));
    uint64_t s = 0x9E3779B97F4A7C15ull;
    for (auto& x : out) {
      s ^= s << 13;
      s ^= s >> 7;
      s ^= s << 17;
      // Sum of four uniforms: close enough to a normal for data movement and rounding work.
      const float u = float((s & 0xFFFF) + ((s >> 16) & 0xFFFF) + ((s >> 32) & 0xFFFF) +
                            ((s >> 48) & 0xFFFF)) / 65536.f - 2.f;
      x = u * 0.035f * (((s >> 20) & 0x3FF) == 0 ? 20.f : 1.f);
    }
    return out;
  }();
  return v;
}

const std::vector<uint16_t>& matrix_bf16() {
  static const std::vector<uint16_t> v = [] {
    const auto& f = matrix_f32();
    std::vector<uint16_t> out(f.size());
    for (size_t i = 0; i < f.size(); ++i) out[i] = f32_to_bf16(f[i]);
    return out;
  }();
  return v;
}

// Benchmark argument 0: input dtype (0 = F32, 1 = BF16); argument 1: threads.
WeightRows input(int64_t dtype_arg) {
  if (dtype_arg == 0) return {matrix_f32().data(), DType::F32, kRows, kCols};
  return {matrix_bf16().data(), DType::BF16, kRows, kCols};
}

int64_t input_bytes(int64_t dtype_arg) { return kElements * (dtype_arg == 0 ? 4 : 2); }

void finish(benchmark::State& state, int64_t bytes_per_iteration) {
  state.SetBytesProcessed(state.iterations() * bytes_per_iteration);
  state.counters["peak_rss_MB"] = double(peak_rss_bytes()) / 1e6;
  state.SetLabel(state.range(0) == 0 ? "F32" : "BF16");
}

void BM_Nvfp4Quantize(benchmark::State& state) {
  const WeightRows w = input(state.range(0));
  ThreadPool pool(int(state.range(1)));
  const float g = nvfp4_global_scale(weight_amax(w, pool).amax);
  std::vector<uint8_t> packed(size_t(kElements / 2)), scales(size_t(kElements / kNvfp4Block));
  for (auto _ : state) {
    nvfp4_quantize(w, g, packed.data(), scales.data(), pool);
    benchmark::DoNotOptimize(packed.data());
    benchmark::ClobberMemory();
  }
  finish(state, input_bytes(state.range(0)));
}
BENCHMARK(BM_Nvfp4Quantize)
    ->ArgsProduct({{0, 1}, {1, 2}})
    ->ArgNames({"bf16", "threads"})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

void BM_Mxfp4Quantize(benchmark::State& state) {
  const WeightRows w = input(state.range(0));
  ThreadPool pool(int(state.range(1)));
  std::vector<uint8_t> packed(size_t(kElements / 2)), scales(size_t(kElements / kMxfp4Block));
  for (auto _ : state) {
    mxfp4_quantize(w, packed.data(), scales.data(), pool);
    benchmark::DoNotOptimize(packed.data());
    benchmark::ClobberMemory();
  }
  finish(state, input_bytes(state.range(0)));
}
BENCHMARK(BM_Mxfp4Quantize)
    ->ArgsProduct({{0, 1}, {2}})
    ->ArgNames({"bf16", "threads"})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

void BM_Fp8Quantize(benchmark::State& state) {
  const WeightRows w = input(state.range(0));
  ThreadPool pool(int(state.range(1)));
  std::vector<uint8_t> codes(static_cast<size_t>(kElements));
  std::vector<float> scales(static_cast<size_t>(kRows));
  for (auto _ : state) {
    fp8_channel_quantize(w, DType::F32, codes.data(), scales.data(), pool);
    benchmark::DoNotOptimize(codes.data());
    benchmark::ClobberMemory();
  }
  finish(state, input_bytes(state.range(0)));
}
BENCHMARK(BM_Fp8Quantize)
    ->ArgsProduct({{0, 1}, {2}})
    ->ArgNames({"bf16", "threads"})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

void BM_Int4Quantize(benchmark::State& state) {
  const WeightRows w = input(state.range(0));
  ThreadPool pool(int(state.range(1)));
  std::vector<int8_t> q(static_cast<size_t>(kElements));
  std::vector<float> scales(size_t(kElements / kInt4DefaultGroup));
  for (auto _ : state) {
    int4_quantize(w, kInt4DefaultGroup, DType::F32, q.data(), scales.data(), pool);
    benchmark::DoNotOptimize(q.data());
    benchmark::ClobberMemory();
  }
  finish(state, input_bytes(state.range(0)));
}
BENCHMARK(BM_Int4Quantize)
    ->ArgsProduct({{0, 1}, {2}})
    ->ArgNames({"bf16", "threads"})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

void BM_WeightAmax(benchmark::State& state) {
  const WeightRows w = input(state.range(0));
  ThreadPool pool(int(state.range(1)));
  for (auto _ : state) benchmark::DoNotOptimize(weight_amax(w, pool));
  finish(state, input_bytes(state.range(0)));
}
BENCHMARK(BM_WeightAmax)
    ->ArgsProduct({{0, 1}, {1, 2}})
    ->ArgNames({"bf16", "threads"})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

// The same input bytes copied in 1 MB chunks over the pool: what streaming them costs at most.
void BM_Memcpy(benchmark::State& state) {
  const int64_t bytes = input_bytes(state.range(0));
  const auto* src = static_cast<const uint8_t*>(input(state.range(0)).data);
  std::vector<uint8_t> dst(static_cast<size_t>(bytes));
  ThreadPool pool(int(state.range(1)));
  constexpr int64_t kChunk = int64_t(1) << 20;
  const int64_t chunks = (bytes + kChunk - 1) / kChunk;
  for (auto _ : state) {
    pool.parallel_for(chunks, [&](int64_t c) {
      const int64_t begin = c * kChunk;
      std::memcpy(dst.data() + begin, src + begin, size_t(std::min(kChunk, bytes - begin)));
    });
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  finish(state, bytes);
}
BENCHMARK(BM_Memcpy)
    ->ArgsProduct({{0, 1}, {1, 2}})
    ->ArgNames({"bf16", "threads"})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace qf

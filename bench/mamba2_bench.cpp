// The Mamba2 mixer kernels on one Nemotron-3-Nano-like layer (64 heads of 64, 8 groups, state
// 128, conv kernel 4; conv_dim 6144), reading their inputs inside in_proj-like rows as the
// engine does: prefill of 512 tokens by the chunked scan (chunk 128) against the recurrence,
// the conv and the gated norm over the same rows, and a decode step (n = 1) whose cost is the
// [heads, P, N] float32 state read and written (2 MB per layer): GB/s of state bytes streamed
// (read + written), over the states of 320 layers in rotation (640 MB: more than any L3, so
// from DRAM), of 16 (32 MB: a real model's Mamba layers; L3-resident on large server parts)
// and of 1 (cache-resident).
// Run: qforge_bench --benchmark_filter='Mamba2' --benchmark_repetitions=5
//        --benchmark_report_aggregates_only=true
#include "core/thread_pool.h"
#include "kernels/mamba2.h"

#include <benchmark/benchmark.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace qf {
namespace {

Mamba2Dims nano() {
  Mamba2Dims d;
  d.heads = 64;
  d.head_dim = 64;
  d.groups = 8;
  d.state = 128;
  d.conv_kernel = 4;
  return d;
}

// in_proj output rows [z (I) | xBC (conv_dim) | dt (heads)] of n tokens, dt, A, D, states.
struct Layer {
  Mamba2Dims d = nano();
  int64_t n, row;
  std::vector<float> rows, dt, A, D, norm_w, conv_w, conv_b, y;
  explicit Layer(int64_t tokens) : n(tokens) {
    row = d.inner() + d.conv_dim() + d.heads;
    std::mt19937 rng(1);
    std::normal_distribution<float> nd(0.f, 1.f);
    rows.resize(size_t(n * row));
    for (auto& v : rows) v = nd(rng);
    dt.resize(size_t(n * d.heads));
    for (auto& v : dt) v = 0.01f + 0.05f * std::fabs(nd(rng));
    A.assign(size_t(d.heads), -2.f);
    D.assign(size_t(d.heads), 1.f);
    norm_w.assign(size_t(d.inner()), 1.f);
    conv_w.resize(size_t(d.conv_dim() * d.conv_kernel));
    for (auto& v : conv_w) v = 0.3f * nd(rng);
    conv_b.assign(size_t(d.conv_dim()), 0.f);
    y.resize(size_t(n * d.inner()));
  }
  Mamba2ScanArgs args(float* state) {
    Mamba2ScanArgs a;
    a.n = n;
    a.x = rows.data() + d.inner();
    a.x_stride = row;
    a.B = a.x + d.inner();
    a.C = a.B + d.groups * d.state;
    a.bc_stride = row;
    a.dt = dt.data();
    a.A = A.data();
    a.D = D.data();
    a.y = y.data();
    a.y_stride = d.inner();
    a.ssm_state = state;
    return a;
  }
};

void set_token_rate(benchmark::State& state, int64_t tokens) {
  state.counters["tokens/s"] = benchmark::Counter(double(tokens) * double(state.iterations()),
                                                  benchmark::Counter::kIsRate);
}

// range(0): 0 chunked, 1 recurrent; range(1): tokens; range(2): threads; range(3): chunk size.
void Mamba2Prefill(benchmark::State& state) {
  const bool recurrent = state.range(0) == 1;
  Layer l(state.range(1));
  ThreadPool pool(int(state.range(2)));
  std::vector<float> ssm(size_t(l.d.ssm_state_floats()), 0.f);
  const Mamba2ScanArgs a = l.args(ssm.data());
  for (auto _ : state) {
    if (recurrent) mamba2_scan_recurrent(l.d, a, pool);
    else mamba2_scan_chunked(l.d, a, state.range(3), pool);
    benchmark::DoNotOptimize(l.y.data());
  }
  set_token_rate(state, l.n);
  state.SetLabel(recurrent ? "recurrent" : "chunked " + std::to_string(state.range(3)));
}

// Decode: one token, the state of one of `state_layers` layers in rotation. range(0): layers,
// range(1): threads.
void Mamba2DecodeScan(benchmark::State& state) {
  const int64_t layers = state.range(0);
  Layer l(1);
  ThreadPool pool(int(state.range(1)));
  const int64_t floats = l.d.ssm_state_floats();
  std::vector<std::vector<float>> states(size_t(layers), std::vector<float>(size_t(floats), 0.01f));
  int64_t layer = 0;
  for (auto _ : state) {
    mamba2_scan_recurrent(l.d, l.args(states[size_t(layer)].data()), pool);
    benchmark::DoNotOptimize(l.y.data());
    layer = (layer + 1) % layers;
  }
  // Read and written once per step.
  state.counters["GB/s"] = benchmark::Counter(2.0 * double(floats) * 4 * double(state.iterations()),
                                              benchmark::Counter::kIsRate);
}

// The conv + SiLU over xBC inside the rows. In place, so each iteration convolves the last
// one's outputs: taps of 1/4 and a bias of 1/2 keep them near a fixed point (no denormals, no
// overflow). range(0): tokens, range(1): threads.
void Mamba2Conv(benchmark::State& state) {
  Layer l(state.range(0));
  ThreadPool pool(int(state.range(1)));
  l.conv_w.assign(l.conv_w.size(), 0.25f);
  l.conv_b.assign(l.conv_b.size(), 0.5f);
  std::vector<float> conv_state(size_t(l.d.conv_state_floats()), 0.f);
  for (auto _ : state) {
    mamba2_conv1d_silu(l.d, l.rows.data() + l.d.inner(), l.n, l.row, l.conv_w.data(),
                       l.conv_b.data(), conv_state.data(), pool);
    benchmark::DoNotOptimize(l.rows.data());
  }
  set_token_rate(state, l.n);
}

void Mamba2GatedNorm(benchmark::State& state) {
  Layer l(state.range(0));
  ThreadPool pool(int(state.range(1)));
  // In place too: a gate of 2 everywhere keeps the normalised rows where they are.
  for (auto& v : l.y) v = 0.5f;
  for (int64_t t = 0; t < l.n; ++t)
    for (int64_t c = 0; c < l.d.inner(); ++c) l.rows[size_t(t * l.row + c)] = 2.f;
  for (auto _ : state) {
    mamba2_gated_rmsnorm(l.d, l.y.data(), l.d.inner(), l.rows.data(), l.row, l.n, l.norm_w.data(),
                         1e-5, pool);
    benchmark::DoNotOptimize(l.y.data());
  }
  set_token_rate(state, l.n);
}

BENCHMARK(Mamba2Prefill)
    ->Args({0, 512, 2, 128})->Args({1, 512, 2, 0})->Args({0, 512, 1, 128})->Args({1, 512, 1, 0})
    ->Args({0, 512, 1, 32})->Args({0, 512, 1, 64})->Args({0, 512, 1, 256})
    ->Args({0, 64, 1, 128})->Args({1, 64, 1, 0})->Args({0, 48, 1, 128})->Args({1, 48, 1, 0})
    ->Args({0, 32, 1, 128})->Args({1, 32, 1, 0})->Args({0, 16, 1, 128})->Args({1, 16, 1, 0})
    ->Args({0, 4, 1, 128})->Args({1, 4, 1, 0})
    ->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(Mamba2DecodeScan)->Args({320, 2})->Args({320, 1})->Args({16, 2})->Args({16, 1})->Args({1, 2})->UseRealTime()
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(Mamba2Conv)->Args({512, 2})->Args({512, 1})->Args({1, 2})->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(Mamba2GatedNorm)->Args({512, 2})->Args({512, 1})->Args({1, 2})->UseRealTime()->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace qf

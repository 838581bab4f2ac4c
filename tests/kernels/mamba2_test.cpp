// kernels/mamba2 against plain double-precision references written here (token-by-token
// recurrence, direct convolution, the norm's formula): shapes with heads 1..8, groups 1 / 2 /
// heads, P and N that leave vector tails (P = 5, N = 7) and the realistic P = 64, N = 128;
// n = 1, n < chunk, n = chunk, n = k * chunk + partial; non-zero initial states in, final
// states out; decode after a chunked prefill; the conv state across calls of any sizes; dt
// limits; rows read in place inside in_proj-like rows (strides wider than the rows read).
// Tolerances are relative to the magnitude of the terms summed (the same sums over absolute
// values), at 1e-5: float32 accumulation. Every SIMD target compiled in and supported by the CPU
// runs the reference comparisons.
#include "core/error.h"
#include "core/thread_pool.h"
#include "formats/formats_test_util.h"
#include "kernels/mamba2.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

namespace qf {
namespace {

constexpr double kTol = 1e-5;

Mamba2Dims dims(int64_t heads, int64_t head_dim, int64_t groups, int64_t state, int64_t k = 4) {
  Mamba2Dims d;
  d.heads = heads;
  d.head_dim = head_dim;
  d.groups = groups;
  d.state = state;
  d.conv_kernel = k;
  return d;
}

std::string name(const Mamba2Dims& d) {
  return "heads " + std::to_string(d.heads) + " P " + std::to_string(d.head_dim) + " groups " +
         std::to_string(d.groups) + " N " + std::to_string(d.state);
}

// The inputs of a scan laid out as the engine has them: rows of an in_proj output
// [z (I) | x (I) | B (G*N) | C (G*N) | dt (heads) | 3 spare], so every stride is wider than
// the part read. dt itself is [n, heads] (mamba2_dt's output).
struct ScanData {
  Mamba2Dims d;
  int64_t n = 0, row = 0;
  std::vector<float> rows, dt, A, D, S0;

  ScanData(const Mamba2Dims& dm, int64_t tokens, uint32_t seed) : d(dm), n(tokens) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> nd(0.f, 1.f);
    std::uniform_real_distribution<float> ud(0.f, 1.f);
    row = d.inner() + d.conv_dim() + d.heads + 3;
    rows.resize(size_t(n * row));
    for (auto& v : rows) v = nd(rng);
    // Per head a time scale from long memory (dt ~ 1e-3: the state decays little over the
    // whole sequence) to short (dt ~ 0.5 with A ~ -8: forgets within a few tokens).
    dt.resize(size_t(n * d.heads));
    A.resize(size_t(d.heads));
    D.resize(size_t(d.heads));
    std::vector<float> scale(size_t(d.heads));
    for (int64_t h = 0; h < d.heads; ++h) {
      A[size_t(h)] = -(0.5f + 7.5f * ud(rng));
      D[size_t(h)] = nd(rng);
      scale[size_t(h)] = std::exp(std::log(1e-3f) + ud(rng) * (std::log(0.5f) - std::log(1e-3f)));
    }
    for (int64_t t = 0; t < n; ++t)
      for (int64_t h = 0; h < d.heads; ++h)
        dt[size_t(t * d.heads + h)] = scale[size_t(h)] * (0.5f + ud(rng));
    S0.resize(size_t(d.ssm_state_floats()));
    for (auto& v : S0) v = 0.5f * nd(rng);
  }
  const float* x() const { return rows.data() + d.inner(); }
  const float* B() const { return x() + d.inner(); }
  const float* C() const { return B() + d.groups * d.state; }

  // Args for tokens [t0, t0 + count), writing y rows of stride y_stride.
  Mamba2ScanArgs args(int64_t t0, int64_t count, float* y, int64_t y_stride, float* state) const {
    Mamba2ScanArgs a;
    a.n = count;
    a.x = x() + t0 * row;
    a.x_stride = row;
    a.B = B() + t0 * row;
    a.C = C() + t0 * row;
    a.bc_stride = row;
    a.dt = dt.data() + t0 * d.heads;
    a.A = A.data();
    a.D = D.data();
    a.y = y + t0 * y_stride;
    a.y_stride = y_stride;
    a.ssm_state = state;
    return a;
  }
};

// The recurrence in double, token by token, with its magnitudes (the same sums over absolute
// values) for the tolerances.
struct Reference {
  std::vector<double> y, y_mag, S, S_mag;  // y [n, I]
  explicit Reference(const ScanData& s) {
    const Mamba2Dims& d = s.d;
    const int64_t H = d.heads, P = d.head_dim, N = d.state, I = d.inner(), per = H / d.groups;
    S.assign(s.S0.begin(), s.S0.end());
    S_mag.resize(S.size());
    for (size_t i = 0; i < S.size(); ++i) S_mag[i] = std::fabs(S[i]);
    y.assign(size_t(s.n * I), 0.0);
    y_mag.assign(size_t(s.n * I), 0.0);
    for (int64_t t = 0; t < s.n; ++t)
      for (int64_t h = 0; h < H; ++h) {
        const int64_t g = h / per;
        const double dt = s.dt[size_t(t * H + h)], dA = std::exp(dt * double(s.A[size_t(h)]));
        const float* B = s.B() + t * s.row + g * N;
        const float* C = s.C() + t * s.row + g * N;
        for (int64_t p = 0; p < P; ++p) {
          const double x = s.x()[t * s.row + h * P + p];
          double acc = 0, mag = 0;
          for (int64_t i = 0; i < N; ++i) {
            double& st = S[size_t((h * P + p) * N + i)];
            double& sm = S_mag[size_t((h * P + p) * N + i)];
            st = st * dA + dt * x * B[i];
            sm = sm * dA + std::fabs(dt * x * B[i]);
            acc += st * C[i];
            mag += sm * std::fabs(C[i]);
          }
          const double dx = double(s.D[size_t(h)]) * x;
          y[size_t(t * I + h * P + p)] = acc + dx;
          y_mag[size_t(t * I + h * P + p)] = mag + std::fabs(dx);
        }
      }
  }
};

constexpr float kSentinel = -12345.f;

// y (row stride y_stride, sentinel in the spare columns) and the final state against the
// reference; the spare columns must be untouched.
void expect_matches(const ScanData& s, const Reference& r, const std::vector<float>& y,
                    int64_t y_stride, const std::vector<float>& state, const std::string& what) {
  const int64_t I = s.d.inner();
  for (int64_t t = 0; t < s.n; ++t) {
    for (int64_t c = 0; c < I; ++c) {
      const double want = r.y[size_t(t * I + c)], got = y[size_t(t * y_stride + c)];
      ASSERT_NEAR(got, want, kTol * r.y_mag[size_t(t * I + c)])
          << what << " " << name(s.d) << " n " << s.n << " token " << t << " channel " << c;
    }
    for (int64_t c = I; c < y_stride; ++c)
      ASSERT_EQ(y[size_t(t * y_stride + c)], kSentinel) << what << ": wrote past the row, token " << t;
  }
  for (size_t i = 0; i < state.size(); ++i)
    ASSERT_NEAR(state[i], r.S[i], kTol * r.S_mag[i]) << what << " " << name(s.d) << " state " << i;
}

enum class Scan { recurrent, chunked };

void run_scan(Scan kind, const ScanData& s, int64_t chunk, ThreadPool& pool, std::vector<float>& y,
              int64_t y_stride, std::vector<float>& state) {
  const Mamba2ScanArgs a = s.args(0, s.n, y.data(), y_stride, state.data());
  if (kind == Scan::recurrent) mamba2_scan_recurrent(s.d, a, pool);
  else mamba2_scan_chunked(s.d, a, chunk, pool);
}

void check_scan(Scan kind, const Mamba2Dims& d, int64_t n, int64_t chunk, uint32_t seed,
                ThreadPool& pool) {
  const ScanData s(d, n, seed);
  const Reference r(s);
  const int64_t y_stride = d.inner() + 5;
  std::vector<float> y(size_t(n * y_stride), kSentinel), state = s.S0;
  run_scan(kind, s, chunk, pool, y, y_stride, state);
  expect_matches(s, r, y, y_stride, state,
                 kind == Scan::recurrent ? "recurrent" : "chunked " + std::to_string(chunk));
}

const Mamba2Dims kSmallShapes[] = {
    dims(1, 5, 1, 7), dims(2, 5, 2, 7),  dims(4, 3, 2, 17), dims(8, 5, 1, 7),
    dims(8, 16, 8, 33), dims(6, 9, 3, 20), dims(3, 1, 3, 1), dims(2, 21, 1, 16),
};

TEST(Mamba2Scan, RecurrentMatchesTheReference) {
  test::for_each_simd_target([&](const std::string& target) {
    SCOPED_TRACE(target);
    ThreadPool pool(2);
    uint32_t seed = 1;
    for (const Mamba2Dims& d : kSmallShapes)
      for (int64_t n : {1, 2, 37}) check_scan(Scan::recurrent, d, n, 0, seed++, pool);
    check_scan(Scan::recurrent, dims(8, 64, 2, 128), 40, 0, seed++, pool);
  });
}

TEST(Mamba2Scan, ChunkedMatchesTheReferenceAtEveryLengthAroundTheChunk) {
  test::for_each_simd_target([&](const std::string& target) {
    SCOPED_TRACE(target);
    ThreadPool pool(2);
    uint32_t seed = 100;
    for (const Mamba2Dims& d : kSmallShapes)
      for (int64_t chunk : {1, 8, 13})
        for (int64_t n : {int64_t(1), std::max<int64_t>(1, chunk - 3), chunk, 3 * chunk + 5})
          check_scan(Scan::chunked, d, n, chunk, seed++, pool);
  });
}

TEST(Mamba2Scan, ChunkedMatchesTheReferenceAtRealisticSizes) {
  test::for_each_simd_target([&](const std::string& target) {
    SCOPED_TRACE(target);
    ThreadPool pool(2);
    uint32_t seed = 200;
    // P = 64, N = 128 as Nemotron-H; 4 heads per group, and one group of every head.
    for (const Mamba2Dims& d : {dims(8, 64, 2, 128), dims(2, 64, 1, 128)})
      for (int64_t n : {1, 100, 128, 2 * 128 + 37}) check_scan(Scan::chunked, d, n, 128, seed++, pool);
    // A chunk of 48 over 5 chunks and a partial one.
    check_scan(Scan::chunked, dims(4, 64, 4, 128), 5 * 48 + 17, 48, seed++, pool);
    // Chunks of 1024, run as chunks of kMamba2MaxChunk = 256, over 8 groups: the 8 MB of scores
    // hold 3 chunks, so the call runs three windows and carries the state from one to the next.
    check_scan(Scan::chunked, dims(8, 5, 8, 7), 2 * 1024 + 5, 1024, seed++, pool);
  });
}

// A prompt run chunked, then decode steps token by token (the engine's use), equals one
// recurrence over all the tokens; so does a prompt split into chunked calls of odd sizes.
TEST(Mamba2Scan, DecodeAfterChunkedPrefillContinuesTheSequence) {
  test::for_each_simd_target([&](const std::string& target) {
    SCOPED_TRACE(target);
    ThreadPool pool(2);
    uint32_t seed = 300;
    for (const Mamba2Dims& d : {dims(4, 5, 2, 7), dims(8, 64, 2, 128)}) {
      const int64_t n = 150, prompt = 133, y_stride = d.inner() + 2;
      const ScanData s(d, n, seed++);
      const Reference r(s);
      std::vector<float> y(size_t(n * y_stride), kSentinel), state = s.S0;
      mamba2_scan_chunked(d, s.args(0, prompt, y.data(), y_stride, state.data()), 32, pool);
      for (int64_t t = prompt; t < n; ++t)
        mamba2_scan_recurrent(d, s.args(t, 1, y.data(), y_stride, state.data()), pool);
      expect_matches(s, r, y, y_stride, state, "prefill + decode");

      std::vector<float> y2(size_t(n * y_stride), kSentinel), state2 = s.S0;
      int64_t t = 0;
      for (int64_t part : {1, 40, 64, 3, 42}) {
        mamba2_scan_chunked(d, s.args(t, part, y2.data(), y_stride, state2.data()), 16, pool);
        t += part;
      }
      ASSERT_EQ(t, n);
      expect_matches(s, r, y2, y_stride, state2, "chunked calls");
    }
  });
}

// mamba2_scan takes the recurrence for short calls and the chunks for long ones: a prompt, then
// decode steps through the one entry point.
TEST(Mamba2Scan, TheEntryPointTakesEitherPathAndContinuesTheSequence) {
  ThreadPool pool(2);
  const Mamba2Dims d = dims(4, 5, 2, 7);
  const int64_t n = kMamba2ChunkedMinTokens + 40, y_stride = d.inner();
  const ScanData s(d, n, 350);
  const Reference r(s);
  std::vector<float> y(size_t(n * y_stride), kSentinel), state = s.S0;
  int64_t t = 0;
  for (int64_t part : {int64_t(3), kMamba2ChunkedMinTokens + 20, int64_t(1), int64_t(16)}) {
    mamba2_scan(d, s.args(t, part, y.data(), y_stride, state.data()), 16, pool);
    t += part;
  }
  ASSERT_EQ(t, n);
  expect_matches(s, r, y, y_stride, state, "mamba2_scan");
}

// The recurrence runs tokens in pairs over the state; a sequence in calls of any sizes (decode
// steps are calls of one) gives the bytes of one call.
TEST(Mamba2Scan, RecurrentCallsOfAnySizeGiveTheSameBytes) {
  ThreadPool pool(2);
  const Mamba2Dims d = dims(4, 6, 2, 19);
  const int64_t n = 23;
  const ScanData s(d, n, 360);
  std::vector<float> y(size_t(n * d.inner())), state = s.S0;
  mamba2_scan_recurrent(d, s.args(0, n, y.data(), d.inner(), state.data()), pool);
  for (int64_t part : {1, 2, 3, 5}) {
    std::vector<float> y2(y.size()), state2 = s.S0;
    for (int64_t t = 0; t < n; t += part)
      mamba2_scan_recurrent(d, s.args(t, std::min(part, n - t), y2.data(), d.inner(), state2.data()), pool);
    EXPECT_EQ(y2, y) << "calls of " << part;
    EXPECT_EQ(state2, state) << "calls of " << part;
  }
}

// Results do not depend on the number of threads (tasks are fixed by the shape).
TEST(Mamba2Scan, ThreadCountDoesNotChangeTheBytes) {
  const Mamba2Dims d = dims(8, 12, 2, 20);
  const ScanData s(d, 77, 400);
  for (Scan kind : {Scan::recurrent, Scan::chunked}) {
    std::vector<std::vector<float>> ys, states;
    for (int threads : {1, 3}) {
      ThreadPool pool(threads);
      std::vector<float> y(size_t(s.n * d.inner()), kSentinel), state = s.S0;
      run_scan(kind, s, 16, pool, y, d.inner(), state);
      ys.push_back(y);
      states.push_back(state);
    }
    EXPECT_EQ(ys[0], ys[1]);
    EXPECT_EQ(states[0], states[1]);
  }
}

TEST(Mamba2Scan, NoTokensIsANoOp) {
  ThreadPool pool(1);
  const Mamba2Dims d = dims(2, 5, 1, 7);
  Mamba2ScanArgs a;  // every pointer null
  mamba2_scan_recurrent(d, a, pool);
  mamba2_scan_chunked(d, a, 64, pool);
}

// ---------------------------------------------------------------------------------------------

// The conv over xBC rows in double: out[t, c] = silu(bias + sum_k w[c, k] in[t - K + 1 + k, c])
// with in[j < 0] from the initial state; returns the final state (the last K - 1 inputs).
struct ConvReference {
  std::vector<double> out, mag, state;
  ConvReference(const Mamba2Dims& d, const std::vector<float>& in, int64_t n, int64_t stride,
                const std::vector<float>& w, const float* bias, const std::vector<float>& state0) {
    const int64_t C = d.conv_dim(), K = d.conv_kernel;
    auto input = [&](int64_t j, int64_t c) -> double {
      return j < 0 ? state0[size_t(c * (K - 1) + (K - 1 + j))] : in[size_t(j * stride + c)];
    };
    out.resize(size_t(n * C));
    mag.resize(size_t(n * C));
    for (int64_t t = 0; t < n; ++t)
      for (int64_t c = 0; c < C; ++c) {
        double s = bias ? bias[c] : 0.0, m = std::fabs(s);
        for (int64_t k = 0; k < K; ++k) {
          const double v = double(w[size_t(c * K + k)]) * input(t - K + 1 + k, c);
          s += v;
          m += std::fabs(v);
        }
        out[size_t(t * C + c)] = s / (1 + std::exp(-s));
        mag[size_t(t * C + c)] = m;
      }
    state.resize(size_t(C * (K - 1)));
    for (int64_t c = 0; c < C; ++c)
      for (int64_t k = 0; k < K - 1; ++k) state[size_t(c * (K - 1) + k)] = input(n - K + 1 + k, c);
  }
};

struct ConvData {
  Mamba2Dims d;
  int64_t n, stride;
  std::vector<float> in, w, bias, state0;
  ConvData(const Mamba2Dims& dm, int64_t tokens, uint32_t seed) : d(dm), n(tokens) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> nd(0.f, 1.f);
    stride = d.conv_dim() + 7;
    in.resize(size_t(n * stride));
    for (auto& v : in) v = nd(rng);
    w.resize(size_t(d.conv_dim() * d.conv_kernel));
    for (auto& v : w) v = 0.5f * nd(rng);
    bias.resize(size_t(d.conv_dim()));
    for (auto& v : bias) v = 0.3f * nd(rng);
    state0.resize(size_t(d.conv_state_floats()));
    for (auto& v : state0) v = nd(rng);
  }
};

TEST(Mamba2Conv, MatchesTheDirectConvolution) {
  test::for_each_simd_target([&](const std::string& target) {
    SCOPED_TRACE(target);
    ThreadPool pool(2);
    uint32_t seed = 500;
    // conv_dim from 2 * 7 + 5 = 19 (a vector tail only) to 8 * 64 + 2 * 2 * 128 = 1024 (four
    // tasks), kernels of 1 to 5 taps; sequences shorter than the kernel too.
    for (const Mamba2Dims& d : {dims(1, 5, 1, 7, 4), dims(8, 64, 2, 128, 4), dims(4, 3, 2, 17, 1),
                                dims(6, 9, 3, 20, 2), dims(2, 21, 1, 16, 5)})
      for (int64_t n : {1, 2, 37})
        for (bool with_bias : {true, false}) {
          const ConvData c(d, n, seed++);
          const float* bias = with_bias ? c.bias.data() : nullptr;
          const ConvReference r(d, c.in, n, c.stride, c.w, bias, c.state0);
          std::vector<float> x = c.in, state = c.state0;
          mamba2_conv1d_silu(d, x.data(), n, c.stride, c.w.data(), bias, state.data(), pool);
          const int64_t C = d.conv_dim();
          for (int64_t t = 0; t < n; ++t) {
            for (int64_t ch = 0; ch < C; ++ch)
              ASSERT_NEAR(x[size_t(t * c.stride + ch)], r.out[size_t(t * C + ch)],
                          kTol * r.mag[size_t(t * C + ch)] + 1e-7)
                  << name(d) << " K " << d.conv_kernel << " n " << n << " token " << t << " channel " << ch;
            for (int64_t ch = C; ch < c.stride; ++ch)  // the rest of the row is not the conv's
              ASSERT_EQ(x[size_t(t * c.stride + ch)], c.in[size_t(t * c.stride + ch)]);
          }
          for (size_t i = 0; i < state.size(); ++i) ASSERT_EQ(state[i], float(r.state[i])) << i;
        }
  });
}

// A sequence run in calls of 1..n tokens (decode is n = 1 calls) gives the bytes of one call.
TEST(Mamba2Conv, StateCarriesAcrossCallsOfAnySize) {
  test::for_each_simd_target([&](const std::string& target) {
    SCOPED_TRACE(target);
    ThreadPool pool(2);
    const Mamba2Dims d = dims(4, 5, 2, 7, 4);
    const ConvData c(d, 50, 600);
    std::vector<float> whole = c.in, state_whole = c.state0;
    mamba2_conv1d_silu(d, whole.data(), c.n, c.stride, c.w.data(), c.bias.data(), state_whole.data(), pool);
    for (int64_t part : {1, 2, 3, 7}) {
      std::vector<float> x = c.in, state = c.state0;
      for (int64_t t = 0; t < c.n; t += part) {
        const int64_t len = std::min(part, c.n - t);
        mamba2_conv1d_silu(d, x.data() + t * c.stride, len, c.stride, c.w.data(), c.bias.data(),
                           state.data(), pool);
      }
      EXPECT_EQ(x, whole) << "calls of " << part;
      EXPECT_EQ(state, state_whole) << "calls of " << part;
    }
  });
}

// ---------------------------------------------------------------------------------------------

TEST(Mamba2Dt, SoftplusWithBiasThenTheLimits) {
  const Mamba2Dims d = dims(3, 1, 1, 1);
  // Three tokens in rows of 5 (the dt columns of an in_proj row), heads 0..2.
  const std::vector<float> raw = {-30.f, 0.f, 19.5f, 9, 9,  //
                                  21.f,  -2.f, 1.f, 9, 9,   //
                                  5.f,   -9.f, 100.f, 9, 9};
  const std::vector<float> bias = {0.f, 0.5f, 1.f};
  auto softplus = [](double v) { return v > 20 ? v : std::log1p(std::exp(v)); };
  std::vector<float> out(9);
  const float inf = std::numeric_limits<float>::infinity();
  mamba2_dt(d, raw.data(), 5, 3, bias.data(), 0.f, inf, out.data());
  for (int64_t t = 0; t < 3; ++t)
    for (int64_t h = 0; h < 3; ++h) {
      const double want = softplus(double(raw[size_t(t * 5 + h)] + bias[size_t(h)]));
      EXPECT_NEAR(out[size_t(t * 3 + h)], want, 1e-6 * std::max(1e-30, want)) << t << " " << h;
    }
  // 19.5 + 1 = 20.5 > 20 passes through; 21 + 0 too.
  EXPECT_EQ(out[2], 20.5f);
  EXPECT_EQ(out[3], 21.f);
  mamba2_dt(d, raw.data(), 5, 3, bias.data(), 0.01f, 2.f, out.data());
  EXPECT_EQ(out[0], 0.01f);  // softplus(-30) ~ 1e-13, clamped up
  EXPECT_EQ(out[2], 2.f);    // clamped down
  EXPECT_NEAR(out[4], std::log1p(std::exp(-1.5)), 1e-7);
  EXPECT_EQ(out[8], 2.f);
}

// ---------------------------------------------------------------------------------------------

TEST(Mamba2Norm, GatedGroupedRmsNormMatchesTheFormula) {
  test::for_each_simd_target([&](const std::string& target) {
    SCOPED_TRACE(target);
    ThreadPool pool(2);
    std::mt19937 rng(700);
    std::normal_distribution<float> nd(0.f, 1.f);
    for (const Mamba2Dims& d : {dims(8, 64, 8, 128), dims(8, 64, 1, 128), dims(4, 5, 2, 7), dims(6, 3, 3, 4)})
      for (int64_t n : {1, 19}) {
        const int64_t I = d.inner(), ys = I + 3, zs = I + 11, gs = I / d.groups;
        std::vector<float> y(size_t(n * ys)), z(size_t(n * zs)), w(static_cast<size_t>(I));
        for (auto& v : y) v = nd(rng);
        for (auto& v : z) v = 2 * nd(rng);
        for (auto& v : w) v = 1 + 0.2f * nd(rng);
        const double eps = 1e-5;
        std::vector<float> out = y;
        mamba2_gated_rmsnorm(d, out.data(), ys, z.data(), zs, n, w.data(), eps, pool);
        for (int64_t t = 0; t < n; ++t) {
          for (int64_t g = 0; g < d.groups; ++g) {
            std::vector<double> v(static_cast<size_t>(gs));
            double ms = 0;
            for (int64_t i = 0; i < gs; ++i) {
              const int64_t c = g * gs + i;
              const double zz = z[size_t(t * zs + c)];
              v[size_t(i)] = y[size_t(t * ys + c)] * zz / (1 + std::exp(-zz));
              ms += v[size_t(i)] * v[size_t(i)];
            }
            const double inv = 1 / std::sqrt(ms / double(gs) + eps);
            for (int64_t i = 0; i < gs; ++i) {
              const int64_t c = g * gs + i;
              const double want = w[size_t(c)] * v[size_t(i)] * inv;
              ASSERT_NEAR(out[size_t(t * ys + c)], want, kTol * (std::fabs(want) + 1e-3))
                  << name(d) << " token " << t << " channel " << c;
            }
          }
          for (int64_t c = I; c < ys; ++c) ASSERT_EQ(out[size_t(t * ys + c)], y[size_t(t * ys + c)]);
        }
      }
  });
}

// ---------------------------------------------------------------------------------------------

// The mixer's numeric part as the engine runs it on in_proj output rows [z | xBC | dt]: conv in
// place, dt, scan reading x, B, C inside the conv's rows, gated norm with z from the same rows;
// against the whole pipeline in double, prompt chunked then decode steps.
TEST(Mamba2Mixer, PipelineOnInProjRowsMatchesTheReference) {
  ThreadPool pool(2);
  const Mamba2Dims d = dims(8, 16, 2, 24, 4);
  const int64_t I = d.inner(), CD = d.conv_dim(), H = d.heads, P = d.head_dim, N = d.state;
  const int64_t row = I + CD + H + 4, n = 45, prompt = 40;
  std::mt19937 rng(800);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<float> rows(size_t(n * row)), w(size_t(CD * 4)), cb(static_cast<size_t>(CD)), dtb(static_cast<size_t>(H)),
      A(static_cast<size_t>(H)), D(static_cast<size_t>(H)), nw(static_cast<size_t>(I));
  for (auto& v : rows) v = nd(rng);
  for (auto& v : w) v = 0.5f * nd(rng);
  for (auto& v : cb) v = 0.1f * nd(rng);
  for (int64_t h = 0; h < H; ++h) {
    dtb[size_t(h)] = -3.f + 0.5f * float(h);
    A[size_t(h)] = -1.f - float(h);
    D[size_t(h)] = nd(rng);
  }
  for (auto& v : nw) v = 1 + 0.1f * nd(rng);
  const float lo = 1e-3f, hi = 5.f;
  const double eps = 1e-5;

  // Reference.
  std::vector<double> xbc(size_t(n * CD)), out(size_t(n * I));
  for (int64_t t = 0; t < n; ++t)
    for (int64_t c = 0; c < CD; ++c) {
      double s = cb[size_t(c)];
      for (int64_t k = 0; k < 4; ++k) {
        const int64_t j = t - 3 + k;
        if (j >= 0) s += double(w[size_t(c * 4 + k)]) * rows[size_t(j * row + I + c)];
      }
      xbc[size_t(t * CD + c)] = s / (1 + std::exp(-s));
    }
  std::vector<double> S(size_t(d.ssm_state_floats()), 0.0);
  for (int64_t t = 0; t < n; ++t) {
    std::vector<double> y(static_cast<size_t>(I));
    for (int64_t h = 0; h < H; ++h) {
      const double raw = double(rows[size_t(t * row + I + CD + h)]) + dtb[size_t(h)];
      const double dt = std::min<double>(std::max<double>(raw > 20 ? raw : std::log1p(std::exp(raw)), lo), hi);
      const double dA = std::exp(dt * A[size_t(h)]);
      const int64_t g = h / (H / d.groups);
      for (int64_t p = 0; p < P; ++p) {
        const double x = xbc[size_t(t * CD + h * P + p)];
        double acc = 0;
        for (int64_t i = 0; i < N; ++i) {
          double& st = S[size_t((h * P + p) * N + i)];
          st = st * dA + dt * x * xbc[size_t(t * CD + I + g * N + i)];
          acc += st * xbc[size_t(t * CD + I + d.groups * N + g * N + i)];
        }
        y[size_t(h * P + p)] = acc + D[size_t(h)] * x;
      }
    }
    const int64_t gs = I / d.groups;
    for (int64_t g = 0; g < d.groups; ++g) {
      double ms = 0;
      for (int64_t i = g * gs; i < (g + 1) * gs; ++i) {
        const double z = rows[size_t(t * row + i)];
        y[size_t(i)] *= z / (1 + std::exp(-z));
        ms += y[size_t(i)] * y[size_t(i)];
      }
      const double inv = 1 / std::sqrt(ms / double(gs) + eps);
      for (int64_t i = g * gs; i < (g + 1) * gs; ++i) out[size_t(t * I + i)] = nw[size_t(i)] * y[size_t(i)] * inv;
    }
  }

  // Kernels: the prompt in one call of each, then one token at a time.
  std::vector<float> conv_state(size_t(d.conv_state_floats()), 0.f), ssm(size_t(d.ssm_state_floats()), 0.f);
  std::vector<float> dt(size_t(n * H)), y(size_t(n * I));
  auto step = [&](int64_t t0, int64_t len, bool chunked) {
    float* r0 = rows.data() + t0 * row;
    mamba2_conv1d_silu(d, r0 + I, len, row, w.data(), cb.data(), conv_state.data(), pool);
    mamba2_dt(d, r0 + I + CD, row, len, dtb.data(), lo, hi, dt.data() + t0 * H);
    Mamba2ScanArgs a;
    a.n = len;
    a.x = r0 + I;
    a.x_stride = row;
    a.B = r0 + 2 * I;
    a.C = r0 + 2 * I + d.groups * N;
    a.bc_stride = row;
    a.dt = dt.data() + t0 * H;
    a.A = A.data();
    a.D = D.data();
    a.y = y.data() + t0 * I;
    a.y_stride = I;
    a.ssm_state = ssm.data();
    if (chunked) mamba2_scan_chunked(d, a, 16, pool);
    else mamba2_scan_recurrent(d, a, pool);
    mamba2_gated_rmsnorm(d, y.data() + t0 * I, I, r0, row, len, nw.data(), eps, pool);
  };
  step(0, prompt, true);
  for (int64_t t = prompt; t < n; ++t) step(t, 1, false);
  for (int64_t t = 0; t < n; ++t)
    for (int64_t c = 0; c < I; ++c) {
      const double want = out[size_t(t * I + c)];
      // The norm divides by its group's RMS, so the scale of the errors is the weight's (an
      // output near zero carries the scan's rounding relative to its sums, not to itself).
      ASSERT_NEAR(y[size_t(t * I + c)], want, kTol * (std::fabs(want) + std::fabs(nw[size_t(c)])))
          << "token " << t << " channel " << c;
    }
}

// ---------------------------------------------------------------------------------------------

template <class Fn>
void expect_error(Fn&& fn, const std::string& needle) {
  try {
    fn();
    ADD_FAILURE() << "no error; expected one naming '" << needle << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(Mamba2, ImpossibleDimsAndArgumentsAreErrorsNamingTheQuantity) {
  ThreadPool pool(1);
  expect_error([] { mamba2_check_dims(dims(6, 4, 4, 8)); }, "groups");
  expect_error([] { mamba2_check_dims(dims(0, 4, 1, 8)); }, "heads");
  expect_error([] { mamba2_check_dims(dims(2, 0, 1, 8)); }, "head_dim");
  expect_error([] { mamba2_check_dims(dims(2, 4, 1, 0)); }, "state");
  expect_error([] { mamba2_check_dims(dims(2, 4, 1, 8, 0)); }, "conv_kernel");
  const ScanData s(dims(2, 5, 1, 7), 3, 1);
  std::vector<float> y(100), state = s.S0;
  expect_error([&] { mamba2_scan_chunked(s.d, s.args(0, 3, y.data(), 10, state.data()), 0, pool); },
               "chunk_size");
  expect_error([&] { mamba2_scan(s.d, s.args(0, 1, y.data(), 10, state.data()), -1, pool); },
               "chunk_size");
  expect_error([&] { mamba2_scan_recurrent(s.d, s.args(0, 3, y.data(), 9, state.data()), pool); },
               "y_stride");
  Mamba2ScanArgs a = s.args(0, 3, y.data(), 10, state.data());
  a.bc_stride = 6;  // < groups * N = 7
  expect_error([&] { mamba2_scan_recurrent(s.d, a, pool); }, "bc_stride");
  a = s.args(0, 3, y.data(), 10, state.data());
  a.D = nullptr;
  expect_error([&] { mamba2_scan_chunked(s.d, a, 4, pool); }, "null");
  std::vector<float> x(100), w(100), cs(100);
  expect_error([&] { mamba2_conv1d_silu(s.d, x.data(), 2, 20, w.data(), nullptr, cs.data(), pool); },
               "stride");
  expect_error([&] { mamba2_conv1d_silu(s.d, x.data(), 2, 30, w.data(), nullptr, nullptr, pool); },
               "conv state");
  expect_error([&] { mamba2_dt(s.d, x.data(), 1, 2, w.data(), 0.f, 1.f, y.data()); }, "raw_stride");
  expect_error([&] { mamba2_dt(s.d, x.data(), 2, 2, w.data(), 2.f, 1.f, y.data()); }, "limits");
  expect_error([&] { mamba2_gated_rmsnorm(s.d, y.data(), 10, x.data(), 10, 2, w.data(), -1.0, pool); },
               "eps");
  expect_error([&] { mamba2_gated_rmsnorm(s.d, y.data(), 10, x.data(), 9, 2, w.data(), 1e-5, pool); },
               "z_stride");
}

}  // namespace
}  // namespace qf

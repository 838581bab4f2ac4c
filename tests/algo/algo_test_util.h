// Synthetic layers for the algorithm tests: weights, correlated inputs and their statistics,
// output-error measures. Header-only (the test build compiles only *_test.cpp files).
#pragma once

#include "algo/layer_stats.h"
#include "core/numeric.h"
#include "formats/weight_rows.h"

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

namespace qf::test {

// Heavy-tailed weights (normal / sqrt(uniform), a few large outliers), float32 [rows, cols],
// rounded through BF16 so they are what a checkpoint holds.
inline std::vector<float> random_weights(int64_t rows, int64_t cols, uint32_t seed,
                                         bool heavy = true) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.f, 0.02f);
  std::uniform_real_distribution<float> uniform(0.05f, 1.f);
  std::vector<float> w(size_t(rows * cols));
  for (auto& x : w) {
    float v = normal(rng);
    if (heavy) v /= std::sqrt(uniform(rng));
    x = bf16_to_f32(f32_to_bf16(v));
  }
  return w;
}

inline WeightRows f32_view(const std::vector<float>& w, int64_t rows, int64_t cols) {
  return {w.data(), DType::F32, rows, cols};
}

// Inputs X [tokens, in] with correlated channels (x = z M, M = I + 0.6 * random) and per-channel
// magnitudes spread over a decade, as real hidden states have.
inline std::vector<float> correlated_inputs(int64_t tokens, int64_t in, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<float> mix(size_t(in * in));
  for (int64_t i = 0; i < in; ++i)
    for (int64_t j = 0; j < in; ++j)
      mix[size_t(i * in + j)] = (i == j ? 1.f : 0.f) + 0.6f * normal(rng) / std::sqrt(float(in)) * 4.f;
  std::vector<float> mag(static_cast<size_t>(in));
  for (auto& m : mag) m = std::exp(normal(rng));
  std::vector<float> z(static_cast<size_t>(in)), x(size_t(tokens * in));
  for (int64_t t = 0; t < tokens; ++t) {
    for (auto& v : z) v = normal(rng);
    for (int64_t j = 0; j < in; ++j) {
      float acc = 0.f;
      for (int64_t i = 0; i < in; ++i) acc += z[size_t(i)] * mix[size_t(i * in + j)];
      x[size_t(t * in + j)] = acc * mag[size_t(j)];
    }
  }
  return x;
}

// The statistics calibration would collect from X [tokens, in]; `samples` = the first
// `n_samples` rows.
inline LinearStats stats_from_inputs(const std::vector<float>& x, int64_t tokens, int64_t in,
                                     int64_t n_samples, bool with_xtx = true) {
  LinearStats s;
  s.tokens = tokens;
  s.channel_amax.assign(size_t(in), 0.f);
  s.channel_mean_abs.assign(size_t(in), 0.f);
  std::vector<double> sum_abs(size_t(in), 0.0);
  if (with_xtx) s.xtx.assign(size_t(in * in), 0.0);
  for (int64_t t = 0; t < tokens; ++t) {
    const float* xt = x.data() + t * in;
    for (int64_t i = 0; i < in; ++i) {
      const float a = std::fabs(xt[i]);
      s.channel_amax[size_t(i)] = std::max(s.channel_amax[size_t(i)], a);
      s.input_amax = std::max(s.input_amax, a);
      sum_abs[size_t(i)] += a;
      if (with_xtx)
        for (int64_t j = 0; j < in; ++j) s.xtx[size_t(i * in + j)] += double(xt[i]) * double(xt[j]);
    }
  }
  for (int64_t i = 0; i < in; ++i) s.channel_mean_abs[size_t(i)] = float(sum_abs[size_t(i)] / double(tokens));
  s.samples.assign(x.begin(), x.begin() + n_samples * in);
  return s;
}

// sum over tokens and outputs of (x (A - B)^T)^2, in double.
inline double output_error(const std::vector<float>& x, int64_t tokens, int64_t in,
                           const std::vector<float>& a, const std::vector<float>& b, int64_t out) {
  double total = 0.0;
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t r = 0; r < out; ++r) {
      double acc = 0.0;
      for (int64_t c = 0; c < in; ++c)
        acc += double(x[size_t(t * in + c)]) * (double(a[size_t(r * in + c)]) - double(b[size_t(r * in + c)]));
      total += acc * acc;
    }
  return total;
}

}  // namespace qf::test

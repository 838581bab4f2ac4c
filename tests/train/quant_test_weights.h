// Weights and their round-to-nearest quantization for the fake-quantization and tuning tests.
#pragma once

#include "algo/round_to_nearest.h"
#include "core/thread_pool.h"
#include "formats/quantized_tensor.h"

#include <cstdint>
#include <random>
#include <vector>

namespace qf::test {

// N(0, 0.02) with heavy-ish tails (about one entry in 17 six times larger), so that blocks
// differ in amax.
inline std::vector<float> random_weights(std::mt19937& rng, int64_t rows, int64_t cols) {
  std::normal_distribution<float> n(0.f, 0.02f);
  std::vector<float> w(size_t(rows * cols));
  for (float& x : w) x = n(rng) * ((rng() % 17 == 0) ? 6.f : 1.f);
  return w;
}

// w [rows, cols] quantized by round to nearest in format f (block: INT4's group, 0 for the
// format's own), under the weights' own amax.
inline QuantizedTensor rtn(const std::vector<float>& w, int64_t rows, int64_t cols, Format f,
                           int block = 0) {
  ThreadPool pool(1);
  const WeightRows wr{w.data(), DType::F32, rows, cols, nullptr};
  RtnOptions o;
  o.format = f;
  o.block = block;
  return quantize_rtn(wr, o, weight_amax(wr, pool).amax, pool);
}

}  // namespace qf::test

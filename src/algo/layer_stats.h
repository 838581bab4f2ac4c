// Statistics of one Linear layer's input over the calibration tokens: what the calibration pass
// collects and what the weight algorithms (mse, awq, smoothquant, gptq) consume.
#pragma once

#include <cstdint>
#include <vector>

namespace qf {

// All vectors are indexed by input channel (the Linear's `in` = weight cols). Fields an
// algorithm does not need may stay empty; each algorithm's header says which it reads.
struct LinearStats {
  int64_t tokens = 0;                   // calibration tokens seen (rows of X)
  float input_amax = 0;                 // max |x| over all tokens and channels
  std::vector<float> channel_amax;      // [in] max |x_c| over tokens
  std::vector<float> channel_mean_abs;  // [in] mean |x_c| over tokens
  std::vector<double> xtx;              // [in * in] sum over tokens of x x^T, row-major; or empty
  std::vector<float> samples;           // [n_samples, in] a subsample of input rows (row-major)

  int64_t in_features() const { return int64_t(channel_amax.size()); }
  int64_t sample_count(int64_t in) const { return in > 0 ? int64_t(samples.size()) / in : 0; }
};

}  // namespace qf

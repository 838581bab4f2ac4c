// Small architectures and synthetic layer statistics for the plan/ tests. Header-only.
#pragma once

#include "algo/algo_test_util.h"
#include "algo/layer_stats.h"
#include "model/architecture.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

namespace qf::test {

// A llama-shaped architecture: q/k/v and gate/up fused groups.
inline Architecture tiny_llama(int64_t layers = 3, int64_t hidden = 64, int64_t inter = 128) {
  nlohmann::json c = {{"model_type", "llama"},       {"hidden_size", hidden},
                      {"intermediate_size", inter},  {"num_hidden_layers", layers},
                      {"num_attention_heads", 4},    {"num_key_value_heads", 2},
                      {"vocab_size", 256}};
  return Architecture::from_config(c, "tiny.json");
}

// X [tokens, in]: standard normal inputs with channel c scaled by scale[c].
inline std::vector<float> scaled_inputs(int64_t tokens, int64_t in, const std::vector<float>& scale,
                                        uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<float> x(size_t(tokens * in));
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t c = 0; c < in; ++c) x[size_t(t * in + c)] = normal(rng) * scale[size_t(c)];
  return x;
}

// The statistics of inputs x [tokens, in] (no sample rows).
inline LinearStats stats_of(const std::vector<float>& x, int64_t tokens, int64_t in, bool xtx) {
  return stats_from_inputs(x, tokens, in, 0, xtx);
}

}  // namespace qf::test

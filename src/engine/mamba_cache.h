// The recurrent state of one sequence's Mamba2 layers (Nemotron-H): per Mamba layer the last
// K-1 inputs of the causal convolution [conv_dim, K-1] and the SSM state [heads, head_dim,
// state], float32 (vLLM's mamba_ssm_cache_dtype float32). Unlike a KV cache it does not grow
// and cannot be rewound: it stands for every position run so far, so a sequence continues at
// position() or starts anew at 0.
#pragma once

#include "model/architecture.h"

#include <cstdint>
#include <vector>

namespace qf {

class MambaCache {
 public:
  MambaCache() = default;
  // Zeroed state for every Mamba layer of `a` (none when it has none).
  explicit MambaCache(const Architecture& a);

  bool empty() const { return conv_.empty(); }
  // Positions the state stands for.
  int64_t position() const { return position_; }
  void set_position(int64_t p) { position_ = p; }
  // Zeros every layer (a sequence starting at 0), or one layer (layer-by-layer calibration).
  void reset();
  void reset_layer(int64_t layer);
  float* conv(int64_t layer) { return conv_[size_t(layer)].data(); }
  float* ssm(int64_t layer) { return ssm_[size_t(layer)].data(); }
  uint64_t bytes() const;

 private:
  std::vector<std::vector<float>> conv_, ssm_;  // per layer; empty for non-Mamba layers
  int64_t position_ = 0;
};

}  // namespace qf

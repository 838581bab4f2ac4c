#include "engine/mamba_cache.h"

#include <algorithm>

namespace qf {

MambaCache::MambaCache(const Architecture& a) {
  if (!a.has_mamba()) return;
  const MambaSpec& m = a.mamba;
  conv_.resize(a.layers.size());
  ssm_.resize(a.layers.size());
  for (size_t l = 0; l < a.layers.size(); ++l) {
    if (!a.layers[l].is_mamba) continue;
    conv_[l].assign(size_t(m.conv_dim() * (m.conv_kernel - 1)), 0.f);
    ssm_[l].assign(size_t(m.heads * m.head_dim * m.state), 0.f);
  }
}

void MambaCache::reset() {
  for (size_t l = 0; l < conv_.size(); ++l) reset_layer(int64_t(l));
  position_ = 0;
}

void MambaCache::reset_layer(int64_t layer) {
  std::fill(conv_[size_t(layer)].begin(), conv_[size_t(layer)].end(), 0.f);
  std::fill(ssm_[size_t(layer)].begin(), ssm_[size_t(layer)].end(), 0.f);
}

uint64_t MambaCache::bytes() const {
  uint64_t n = 0;
  for (size_t l = 0; l < conv_.size(); ++l) n += (conv_[l].size() + ssm_[l].size()) * sizeof(float);
  return n;
}

}  // namespace qf

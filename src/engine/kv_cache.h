// The keys and values of one sequence, per decoder layer, in the storage type chosen for the
// cache, laid out as kernels::attend reads them: per KV head one contiguous region (so each
// head's attention streams its own memory), keys in transposed tiles of kernels::kKeyTile
// positions [tile, head_dim, kKeyTile], values in rows [position, v_head_dim]. The cache grows
// with the positions run, geometrically (token-by-token decode does not copy it every step);
// growing re-lays every head at the new capacity.
#pragma once

#include "kernels/attention.h"

#include <cstdint>
#include <vector>

namespace qf {

class KvCache {
 public:
  KvCache() = default;
  // `k_scale` / `v_scale`: one per layer (fp8 only: the divisor of stored codes; 1 where a
  // layer has none). `attends`: per layer, whether it stores keys and values (a hybrid model's
  // Mamba and MLP layers do not); empty: every layer.
  KvCache(KvCacheType type, int64_t kv_heads, int64_t head_dim, int64_t v_head_dim,
          std::vector<float> k_scale, std::vector<float> v_scale,
          std::vector<bool> attends = {});

  // A cache of the same type, shape and scales, holding nothing.
  KvCache empty_copy() const {
    return KvCache(type_, heads_, hd_, vd_, k_scale_, v_scale_, attends_);
  }

  KvCacheType type() const { return type_; }
  // Positions every layer holds.
  int64_t length() const { return len_; }
  // Grows every layer to hold positions [0, len), with room for up to `limit` positions ahead.
  void ensure(int64_t len, int64_t limit);
  // Room for `positions` positions (rounded up to whole key tiles) without growing again; the
  // positions held do not change. What an engine does when it allocates a context up front.
  void reserve(int64_t positions);
  // Writes keys [n, kv_heads * head_dim] and values [n, kv_heads * v_head_dim] (heads in order)
  // at positions [pos, pos + n) of `layer` (pos + n <= length()).
  void store(int64_t layer, int64_t pos, int64_t n, const float* k, const float* v);

  // A KV head's keys (tile 0; kernels::AttentionGroup::k) and values (position 0).
  const void* keys(int64_t layer, int64_t head) const;
  const void* values(int64_t layer, int64_t head) const;
  // Elements between consecutive key tiles and consecutive value positions.
  int64_t key_tile_stride() const { return hd_ * kernels::kKeyTile; }
  int64_t value_stride() const { return vd_; }
  float k_scale(int64_t layer) const { return k_scale_[size_t(layer)]; }
  float v_scale(int64_t layer) const { return v_scale_[size_t(layer)]; }
  // Bytes held (room for capacity positions).
  uint64_t bytes() const;

 private:
  KvCacheType type_ = KvCacheType::f32;
  int64_t heads_ = 0, hd_ = 0, vd_ = 0, bytes_ = 4;
  int64_t len_ = 0, cap_ = 0;  // positions held and room (a whole number of key tiles)
  std::vector<float> k_scale_, v_scale_;
  std::vector<bool> attends_;
  std::vector<std::vector<uint8_t>> k_, v_;  // per layer [heads, cap_ positions]
  std::vector<uint8_t> row_;                 // one position's keys, converted
};

}  // namespace qf

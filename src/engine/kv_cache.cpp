#include "engine/kv_cache.h"

#include <algorithm>
#include <cstring>

namespace qf {

KvCache::KvCache(KvCacheType type, int64_t kv_heads, int64_t head_dim, int64_t v_head_dim,
                 std::vector<float> k_scale, std::vector<float> v_scale,
                 std::vector<bool> attends)
    : type_(type),
      heads_(kv_heads),
      hd_(head_dim),
      vd_(v_head_dim),
      bytes_(kv_cache_type_bytes(type)),
      k_scale_(std::move(k_scale)),
      v_scale_(std::move(v_scale)),
      attends_(attends.empty() ? std::vector<bool>(k_scale_.size(), true) : std::move(attends)),
      k_(k_scale_.size()),
      v_(k_scale_.size()) {}

void KvCache::ensure(int64_t len, int64_t limit) {
  if (len > cap_) reserve(std::max(len, std::min(limit, 2 * cap_)));
  len_ = std::max(len_, len);
}

void KvCache::reserve(int64_t positions) {
  constexpr int64_t tile = kernels::kKeyTile;
  const int64_t cap = (positions + tile - 1) / tile * tile;
  if (cap <= cap_) return;
  // Each head's region moves to its place at the new capacity; the positions held keep their
  // offsets inside it (tiles and rows both grow at the end).
  const int64_t old_k = cap_ * hd_ * bytes_, old_v = cap_ * vd_ * bytes_;
  const int64_t new_k = cap * hd_ * bytes_, new_v = cap * vd_ * bytes_;
  for (size_t l = 0; l < k_.size(); ++l) {
    if (!attends_[l]) continue;
    std::vector<uint8_t> k(size_t(heads_ * new_k)), v(size_t(heads_ * new_v));
    for (int64_t h = 0; h < heads_ && cap_ > 0; ++h) {
      std::memcpy(k.data() + h * new_k, k_[l].data() + h * old_k, size_t(old_k));
      std::memcpy(v.data() + h * new_v, v_[l].data() + h * old_v, size_t(old_v));
    }
    k_[l] = std::move(k);
    v_[l] = std::move(v);
  }
  cap_ = cap;
}

namespace {

// Position p's converted key row (heads x hd elements of T) into each channel's column of the
// head's key tile: one store of sizeof(T) each (a memcpy of a run-time size per element cost a
// 512-token prefill ~2% of its time).
template <typename T>
void scatter_keys(const uint8_t* row, int64_t heads, int64_t hd, int64_t cap, int64_t p,
                  uint8_t* keys) {
  constexpr int64_t tile = kernels::kKeyTile;
  for (int64_t h = 0; h < heads; ++h) {
    uint8_t* base = keys + (h * cap * hd + p / tile * hd * tile + p % tile) * int64_t(sizeof(T));
    const uint8_t* src = row + h * hd * int64_t(sizeof(T));
    for (int64_t c = 0; c < hd; ++c)
      std::memcpy(base + c * tile * int64_t(sizeof(T)), src + c * int64_t(sizeof(T)), sizeof(T));
  }
}

}  // namespace

void KvCache::store(int64_t layer, int64_t pos, int64_t n, const float* k, const float* v) {
  const size_t l = size_t(layer);
  const int64_t k_dim = heads_ * hd_, b = bytes_;
  row_.resize(size_t(std::max(k_dim, vd_) * b));
  const auto scatter = b == 4   ? scatter_keys<uint32_t>
                       : b == 2 ? scatter_keys<uint16_t>
                                : scatter_keys<uint8_t>;
  for (int64_t t = 0; t < n; ++t) {
    const int64_t p = pos + t;
    // Keys: the row converted, then each channel into its tile's column.
    kernels::kv_store(type_, k + t * k_dim, k_dim, k_scale_[l], row_.data());
    scatter(row_.data(), heads_, hd_, cap_, p, k_[l].data());
    for (int64_t h = 0; h < heads_; ++h)
      kernels::kv_store(type_, v + (t * heads_ + h) * vd_, vd_, v_scale_[l],
                        v_[l].data() + (h * cap_ + p) * vd_ * b);
  }
}

const void* KvCache::keys(int64_t layer, int64_t head) const {
  return k_[size_t(layer)].data() + head * cap_ * hd_ * bytes_;
}

const void* KvCache::values(int64_t layer, int64_t head) const {
  return v_[size_t(layer)].data() + head * cap_ * vd_ * bytes_;
}

uint64_t KvCache::bytes() const {
  uint64_t n = 0;
  for (size_t l = 0; l < k_.size(); ++l) n += k_[l].size() + v_[l].size();
  return n;
}

}  // namespace qf

// The 64-byte tile configuration `ldtilecfg` reads (palette 1), shared by the AMX kernels: per
// tile register its rows and bytes per row; and the kernels' aligned scratch buffers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>

// The target of the AMX kernels' functions: every kernel runs only where cpu_has_amx_bf16()
// (which checks all of these) holds.
#define QF_AMX_TARGET \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,amx-tile,amx-bf16")))

namespace qf::kernels {

struct alignas(64) AmxTileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// ldtilecfg of cfg. GCC 12's _tile_loadconfig declares a read of the configuration's first 8
// bytes only, so the stores of rows and colsb before it may be dropped as dead (they were, for a
// configuration of constants: every tile 0 x 0 and the first tile load an invalid opcode); this
// reads all 64.
inline void load_tile_config(const AmxTileConfig& cfg) {
  asm volatile("ldtilecfg %0" : : "m"(cfg));
}

// A grow-only buffer on 64-byte boundaries: tile rows are 64 bytes, and a row that straddles two
// cache lines costs two (with std::vector's 16-byte alignment the kernel ran at half speed).
template <typename T>
class TileBuffer {
 public:
  T* get(size_t n) {
    if (n > size_) {
      data_.reset(static_cast<T*>(::operator new[](n * sizeof(T), std::align_val_t(64))));
      size_ = n;
    }
    return data_.get();
  }

 private:
  struct Free {
    void operator()(T* p) const { ::operator delete[](p, std::align_val_t(64)); }
  };
  std::unique_ptr<T[], Free> data_;
  size_t size_ = 0;
};

}  // namespace qf::kernels

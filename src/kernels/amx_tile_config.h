// The 64-byte tile configuration `ldtilecfg` reads (palette 1), shared by the AMX kernels: per
// tile register its rows and bytes per row.
#pragma once

#include <cstdint>

namespace qf::kernels {

struct alignas(64) AmxTileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

}  // namespace qf::kernels

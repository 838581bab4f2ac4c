#include "kernels/nvfp4_rows16.h"

#include "kernels/kernels_internal.h"

#include <cstring>

namespace qf::kernels {
namespace {

constexpr int64_t kBlock = 16;  // elements per NVFP4 block scale

uint64_t group_bytes(const LinearWeight& w) {
  return uint64_t(w.cols / kBlock) * uint64_t(kNvfp4Rows16BlockBytes);
}

}  // namespace

bool nvfp4_rows16_wanted(const LinearWeight& w) {
  return w.format == WeightFormat::nvfp4 && !w.transposed && w.rows >= kNvfp4Rows16 &&
         w.rows % kNvfp4Rows16 == 0 && w.cols % kBlock == 0 && w.cols > 0 &&
         cpu_has_avx512vnni() && cpu_has_avx512vbmi();
}

void nvfp4_repack_rows16(const LinearWeight& w, uint8_t* dst) {
  const auto* codes = static_cast<const uint8_t*>(w.data);
  const int64_t blocks = w.cols / kBlock;
  for (int64_t g = 0; g < w.rows / kNvfp4Rows16; ++g)
    for (int64_t i = 0; i < blocks; ++i) {
      uint8_t* o = dst + uint64_t(g) * group_bytes(w) + uint64_t(i) * kNvfp4Rows16BlockBytes;
      for (int64_t k = 0; k < kNvfp4Rows16; ++k) {
        const int64_t r = g * kNvfp4Rows16 + k;
        const uint8_t* p = codes + uint64_t(r) * uint64_t(w.cols / 2) + uint64_t(i) * 8;
        std::memcpy(o + 4 * k, p, 4);
        std::memcpy(o + 64 + 4 * k, p + 4, 4);
        o[128 + k] = w.block_scales[uint64_t(r) * uint64_t(blocks) + uint64_t(i)];
      }
    }
}

LinearWeight nvfp4_rows16_weight(const LinearWeight& w, const void* repacked) {
  LinearWeight r = w;
  r.format = WeightFormat::nvfp4_rows16;
  r.data = repacked;
  r.block_scales = nullptr;
  return r;
}

LinearWeight nvfp4_rows16_view(const LinearWeight& w, int64_t r0, int64_t nr, int64_t c0,
                               int64_t nc, std::vector<uint8_t>& scratch) {
  const int64_t blocks = nc / kBlock;
  scratch.resize(size_t(nr * (nc / 2 + blocks)));
  uint8_t* codes = scratch.data();
  uint8_t* scales = codes + nr * nc / 2;
  const auto* data = static_cast<const uint8_t*>(w.data);
  for (int64_t r = 0; r < nr; ++r) {
    const int64_t row = r0 + r, k = row % kNvfp4Rows16;
    const uint8_t* b = data + uint64_t(row / kNvfp4Rows16) * group_bytes(w) +
                       uint64_t(c0 / kBlock) * kNvfp4Rows16BlockBytes;
    uint8_t* o = codes + r * (nc / 2);
    for (int64_t i = 0; i < blocks; ++i, b += kNvfp4Rows16BlockBytes) {
      std::memcpy(o + 8 * i, b + 4 * k, 4);
      std::memcpy(o + 8 * i + 4, b + 64 + 4 * k, 4);
      scales[r * blocks + i] = b[128 + k];
    }
  }
  LinearWeight v = w;
  v.format = WeightFormat::nvfp4;
  v.rows = nr;
  v.cols = nc;
  v.data = codes;
  v.block_scales = scales;
  return v;
}

}  // namespace qf::kernels

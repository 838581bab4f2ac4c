#include "kernels/fp4_rows16.h"

#include "kernels/kernels_internal.h"

#include <cstring>

namespace qf::kernels {
namespace {

uint64_t group_bytes(const LinearWeight& w, int64_t block) {
  return uint64_t(w.cols / block) * uint64_t(fp4_rows16_block_bytes(block));
}

WeightFormat stored_format(WeightFormat f) {
  return f == WeightFormat::mxfp4_rows16 ? WeightFormat::mxfp4 : WeightFormat::nvfp4;
}

}  // namespace

bool is_fp4_rows16(WeightFormat f) {
  return f == WeightFormat::nvfp4_rows16 || f == WeightFormat::mxfp4_rows16;
}

int64_t fp4_rows16_block(WeightFormat f) {
  return f == WeightFormat::mxfp4 || f == WeightFormat::mxfp4_rows16 ? 32 : 16;
}

bool fp4_rows16_wanted(const LinearWeight& w) {
  return (w.format == WeightFormat::nvfp4 || w.format == WeightFormat::mxfp4) && !w.transposed &&
         w.rows >= kRows16 && w.rows % kRows16 == 0 && w.cols > 0 &&
         w.cols % fp4_rows16_block(w.format) == 0 && cpu_has_avx512vnni() && cpu_has_avx512vbmi();
}

uint64_t fp4_rows16_bytes(const LinearWeight& w) {
  const uint64_t n = uint64_t(w.rows) * uint64_t(w.cols);
  return n / 2 + n / uint64_t(fp4_rows16_block(w.format));
}

void fp4_repack_rows16(const LinearWeight& w, uint8_t* dst) {
  const auto* codes = static_cast<const uint8_t*>(w.data);
  const int64_t block = fp4_rows16_block(w.format), blocks = w.cols / block;
  const int64_t regs = block / 8, block_bytes = fp4_rows16_block_bytes(block);
  for (int64_t g = 0; g < w.rows / kRows16; ++g)
    for (int64_t i = 0; i < blocks; ++i) {
      uint8_t* o = dst + uint64_t(g) * group_bytes(w, block) + uint64_t(i * block_bytes);
      for (int64_t k = 0; k < kRows16; ++k) {
        const int64_t r = g * kRows16 + k;
        const uint8_t* p = codes + uint64_t(r) * uint64_t(w.cols / 2) + uint64_t(i * block / 2);
        for (int64_t j = 0; j < regs; ++j) std::memcpy(o + 64 * j + 4 * k, p + 4 * j, 4);
        o[64 * regs + k] = w.block_scales[uint64_t(r) * uint64_t(blocks) + uint64_t(i)];
      }
    }
}

LinearWeight fp4_rows16_weight(const LinearWeight& w, const void* repacked) {
  LinearWeight r = w;
  r.format = w.format == WeightFormat::mxfp4 ? WeightFormat::mxfp4_rows16
                                             : WeightFormat::nvfp4_rows16;
  r.data = repacked;
  r.block_scales = nullptr;
  return r;
}

LinearWeight fp4_rows16_view(const LinearWeight& w, int64_t r0, int64_t nr, int64_t c0,
                             int64_t nc, std::vector<uint8_t>& scratch) {
  const int64_t block = fp4_rows16_block(w.format), blocks = nc / block;
  const int64_t regs = block / 8, block_bytes = fp4_rows16_block_bytes(block);
  scratch.resize(size_t(nr * (nc / 2 + blocks)));
  uint8_t* codes = scratch.data();
  uint8_t* scales = codes + nr * nc / 2;
  const auto* data = static_cast<const uint8_t*>(w.data);
  for (int64_t r = 0; r < nr; ++r) {
    const int64_t row = r0 + r, k = row % kRows16;
    const uint8_t* b = data + uint64_t(row / kRows16) * group_bytes(w, block) +
                       uint64_t(c0 / block * block_bytes);
    uint8_t* o = codes + r * (nc / 2);
    for (int64_t i = 0; i < blocks; ++i, b += block_bytes) {
      for (int64_t j = 0; j < regs; ++j) std::memcpy(o + i * block / 2 + 4 * j, b + 64 * j + 4 * k, 4);
      scales[r * blocks + i] = b[64 * regs + k];
    }
  }
  LinearWeight v = w;
  v.format = stored_format(w.format);
  v.rows = nr;
  v.cols = nc;
  v.data = codes;
  v.block_scales = scales;
  return v;
}

}  // namespace qf::kernels

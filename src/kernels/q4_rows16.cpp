#include "kernels/q4_rows16.h"

#include "kernels/kernels_internal.h"

#include <cstring>

namespace qf::kernels {
namespace {

bool is_int4(WeightFormat f) {
  f = q4_rows16_source(f);
  return f == WeightFormat::int4_row_pairs || f == WeightFormat::int4_packed32;
}

// Row r of a stored weight as nibble pairs along the row (element 2i in the low nibble of byte
// i), INT4 as q + 8: cols / 2 bytes at out.
void stored_row_codes(const LinearWeight& w, int64_t r, uint8_t* out) {
  const auto* codes = static_cast<const uint8_t*>(w.data);
  if (w.format != WeightFormat::int4_row_pairs) {
    std::memcpy(out, codes + uint64_t(r) * uint64_t(w.cols / 2), size_t(w.cols / 2));
    return;
  }
  // ModelOpt: byte (r / 2, c) holds column c of rows r (low nibble) and r + 1, signed.
  const uint8_t* p = codes + uint64_t(r / 2) * uint64_t(w.cols);
  const int shift = r % 2 == 0 ? 0 : 4;
  for (int64_t i = 0; i < w.cols / 2; ++i)
    out[i] = uint8_t((((p[2 * i] >> shift) & 0xF) ^ 8) | ((((p[2 * i + 1] >> shift) & 0xF) ^ 8) << 4));
}

}  // namespace

bool is_q4_rows16(WeightFormat f) {
  return f == WeightFormat::nvfp4_rows16 || f == WeightFormat::mxfp4_rows16 ||
         f == WeightFormat::int4_row_pairs_rows16 || f == WeightFormat::int4_packed32_rows16;
}

WeightFormat q4_rows16_source(WeightFormat f) {
  switch (f) {
    case WeightFormat::nvfp4_rows16: return WeightFormat::nvfp4;
    case WeightFormat::mxfp4_rows16: return WeightFormat::mxfp4;
    case WeightFormat::int4_row_pairs_rows16: return WeightFormat::int4_row_pairs;
    case WeightFormat::int4_packed32_rows16: return WeightFormat::int4_packed32;
    default: return f;
  }
}

int64_t q4_rows16_block(const LinearWeight& w) {
  if (is_int4(w.format)) return w.group;
  return q4_rows16_source(w.format) == WeightFormat::mxfp4 ? 32 : 16;
}

int q4_rows16_scale_bytes(WeightFormat f) { return is_int4(f) ? 4 : 1; }

int64_t q4_rows16_block_bytes(const LinearWeight& w) {
  return q4_rows16_block_bytes(q4_rows16_block(w), q4_rows16_scale_bytes(w.format));
}

int64_t q4_rows16_group_bytes(const LinearWeight& w) {
  return w.cols / q4_rows16_block(w) * q4_rows16_block_bytes(w);
}

bool q4_rows16_wanted(const LinearWeight& w) {
  const bool fp4 = w.format == WeightFormat::nvfp4 || w.format == WeightFormat::mxfp4;
  const bool int4 = (w.format == WeightFormat::int4_row_pairs ||
                     w.format == WeightFormat::int4_packed32) &&
                    w.group > 0 && w.group % 16 == 0 && w.scales != nullptr;
  return (fp4 || int4) && !w.transposed && w.rows >= kRows16 && w.rows % kRows16 == 0 &&
         w.cols > 0 && w.cols % q4_rows16_block(w) == 0 && cpu_has_avx512vnni() &&
         cpu_has_avx512vbmi();
}

uint64_t q4_rows16_bytes(const LinearWeight& w) {
  const uint64_t n = uint64_t(w.rows) * uint64_t(w.cols);
  return n / 2 + n / uint64_t(q4_rows16_block(w)) * uint64_t(q4_rows16_scale_bytes(w.format));
}

void q4_repack_rows16(const LinearWeight& w, uint8_t* dst) {
  const int64_t block = q4_rows16_block(w), blocks = w.cols / block;
  const int64_t regs = block / 8, block_bytes = q4_rows16_block_bytes(w);
  const int scale_bytes = q4_rows16_scale_bytes(w.format);
  const bool int4 = is_int4(w.format);
  std::vector<uint8_t> rows(size_t(kRows16 * (w.cols / 2)));  // the group's 16 rows of codes
  const uint64_t group_bytes = uint64_t(q4_rows16_group_bytes(w));
  for (int64_t g = 0; g < w.rows / kRows16; ++g) {
    for (int64_t k = 0; k < kRows16; ++k)
      stored_row_codes(w, g * kRows16 + k, rows.data() + k * (w.cols / 2));
    for (int64_t i = 0; i < blocks; ++i) {
      uint8_t* o = dst + uint64_t(g) * group_bytes + uint64_t(i * block_bytes);
      for (int64_t k = 0; k < kRows16; ++k) {
        const uint64_t at = uint64_t(g * kRows16 + k) * uint64_t(blocks) + uint64_t(i);
        const uint8_t* p = rows.data() + k * (w.cols / 2) + i * block / 2;
        for (int64_t j = 0; j < regs; ++j) std::memcpy(o + 64 * j + 4 * k, p + 4 * j, 4);
        uint8_t* s = o + 64 * regs + k * scale_bytes;
        if (int4) std::memcpy(s, w.scales + at, 4);
        else *s = w.block_scales[at];
      }
    }
  }
}

LinearWeight q4_rows16_weight(const LinearWeight& w, const void* repacked) {
  LinearWeight r = w;
  switch (w.format) {
    case WeightFormat::mxfp4: r.format = WeightFormat::mxfp4_rows16; break;
    case WeightFormat::int4_row_pairs: r.format = WeightFormat::int4_row_pairs_rows16; break;
    case WeightFormat::int4_packed32: r.format = WeightFormat::int4_packed32_rows16; break;
    default: r.format = WeightFormat::nvfp4_rows16; break;
  }
  r.data = repacked;
  r.block_scales = nullptr;
  r.scales = nullptr;
  r.owned_scales.reset();
  return r;
}

LinearWeight q4_rows16_view(const LinearWeight& w, int64_t r0, int64_t nr,
                            std::vector<uint8_t>& scratch) {
  int64_t offset = 0;
  return q4_rows16_view(w, r0, nr, 0, w.cols, scratch, offset);
}

LinearWeight q4_rows16_view(const LinearWeight& w, int64_t r0, int64_t nr, int64_t c0,
                            int64_t nc, std::vector<uint8_t>& scratch, int64_t& offset) {
  const int64_t block = q4_rows16_block(w);
  offset = c0 % block;
  c0 -= offset;
  nc = (offset + nc + block - 1) / block * block;
  const int64_t blocks = nc / block;
  const int64_t regs = block / 8, block_bytes = q4_rows16_block_bytes(w);
  const int scale_bytes = q4_rows16_scale_bytes(w.format);
  // Codes, then the scales (at a multiple of 8 bytes: nc is a multiple of 16).
  scratch.resize(size_t(nr * (nc / 2 + blocks * scale_bytes)));
  uint8_t* codes = scratch.data();
  uint8_t* scales = codes + nr * nc / 2;
  const auto* data = static_cast<const uint8_t*>(w.data);
  const uint64_t group_bytes = uint64_t(q4_rows16_group_bytes(w));
  for (int64_t r = 0; r < nr; ++r) {
    const int64_t row = r0 + r, k = row % kRows16;
    const uint8_t* b =
        data + uint64_t(row / kRows16) * group_bytes + uint64_t(c0 / block * block_bytes);
    uint8_t* o = codes + r * (nc / 2);
    for (int64_t i = 0; i < blocks; ++i, b += block_bytes) {
      for (int64_t j = 0; j < regs; ++j) std::memcpy(o + i * block / 2 + 4 * j, b + 64 * j + 4 * k, 4);
      std::memcpy(scales + (r * blocks + i) * scale_bytes, b + 64 * regs + k * scale_bytes,
                  size_t(scale_bytes));
    }
  }
  LinearWeight v = w;
  v.rows = nr;
  v.cols = nc;
  v.data = codes;
  if (is_int4(w.format)) {
    v.format = WeightFormat::int4_packed32;
    v.scales = reinterpret_cast<const float*>(scales);
  } else {
    v.format = q4_rows16_source(w.format);
    v.block_scales = scales;
  }
  return v;
}

}  // namespace qf::kernels

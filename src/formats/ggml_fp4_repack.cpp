// Repacking FP4 codes between the pairs order and ggml's split-halves blocks.
#include "formats/ggml_fp4_repack.h"

#include "core/error.h"

namespace qf {
namespace {

void check_shape(const char* what, int64_t rows, int64_t cols, int block) {
  if (rows < 0 || cols <= 0 || cols % block != 0)
    fail("{} repack to ggml: shape [{}, {}] needs columns that are a positive multiple of {}",
         what, rows, cols, block);
}

// Code of element i in a pairs-packed row.
uint8_t pair_code(const uint8_t* row, int64_t i) {
  return uint8_t((row[i / 2] >> (4 * (i % 2))) & 0xF);
}
void set_pair_code(uint8_t* row, int64_t i, uint8_t code) {
  uint8_t& b = row[i / 2];
  b = uint8_t(i % 2 ? (b & 0x0F) | (code << 4) : (b & 0xF0) | code);
}

// One split-halves group of n codes (n/2 bytes): byte j = code j | code j+n/2 << 4.
void to_split(const uint8_t* row, int64_t first, int n, uint8_t* qs) {
  for (int j = 0; j < n / 2; ++j)
    qs[j] = uint8_t(pair_code(row, first + j) | (pair_code(row, first + j + n / 2) << 4));
}
void from_split(const uint8_t* qs, int n, uint8_t* row, int64_t first) {
  for (int j = 0; j < n / 2; ++j) {
    set_pair_code(row, first + j, qs[j] & 0xF);
    set_pair_code(row, first + j + n / 2, qs[j] >> 4);
  }
}

}  // namespace

void nvfp4_to_ggml(const uint8_t* packed, const uint8_t* scales, int64_t rows, int64_t cols,
                   uint8_t* out) {
  check_shape("NVFP4", rows, cols, 64);
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t* row = packed + r * (cols / 2);
    const uint8_t* srow = scales + r * (cols / 16);
    for (int64_t b = 0; b < cols / 64; ++b, out += 36) {
      for (int s = 0; s < 4; ++s) {
        const uint8_t d = srow[b * 4 + s];
        if (d & 0x80 || d == 0x7F)
          fail("NVFP4 repack to ggml: row {}, block {}: scale byte 0x{:02x} is {} and has no "
               "UE4M3 encoding",
               r, b * 4 + s, d, d == 0x7F ? "NaN" : "negative");
        out[s] = d;
        to_split(row, b * 64 + s * 16, 16, out + 4 + 8 * s);
      }
    }
  }
}

void ggml_to_nvfp4(const uint8_t* blocks, int64_t rows, int64_t cols, uint8_t* packed,
                   uint8_t* scales) {
  check_shape("NVFP4", rows, cols, 64);
  for (int64_t r = 0; r < rows; ++r) {
    uint8_t* row = packed + r * (cols / 2);
    uint8_t* srow = scales + r * (cols / 16);
    for (int64_t b = 0; b < cols / 64; ++b, blocks += 36)
      for (int s = 0; s < 4; ++s) {
        srow[b * 4 + s] = blocks[s];
        from_split(blocks + 4 + 8 * s, 16, row, b * 64 + s * 16);
      }
  }
}

void mxfp4_to_ggml(const uint8_t* packed, const uint8_t* scales, int64_t rows, int64_t cols,
                   uint8_t* out) {
  check_shape("MXFP4", rows, cols, 32);
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t* row = packed + r * (cols / 2);
    const uint8_t* srow = scales + r * (cols / 32);
    for (int64_t b = 0; b < cols / 32; ++b, out += 17) {
      if (srow[b] == 0xFF)
        fail("MXFP4 repack to ggml: row {}, block {}: scale 0xFF is NaN, which ggml rejects", r,
             b);
      out[0] = srow[b];
      to_split(row, b * 32, 32, out + 1);
    }
  }
}

void ggml_to_mxfp4(const uint8_t* blocks, int64_t rows, int64_t cols, uint8_t* packed,
                   uint8_t* scales) {
  check_shape("MXFP4", rows, cols, 32);
  for (int64_t r = 0; r < rows; ++r) {
    uint8_t* row = packed + r * (cols / 2);
    uint8_t* srow = scales + r * (cols / 32);
    for (int64_t b = 0; b < cols / 32; ++b, blocks += 17) {
      srow[b] = blocks[0];
      from_split(blocks + 1, 32, row, b * 32);
    }
  }
}

}  // namespace qf

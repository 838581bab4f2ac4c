// One row per stored weight layout (WeightFormat): its size, block and the kernels that read it,
// the kernels' counterpart of formats/registry.h. linear.cpp dispatches through the row once per
// product (or tile), never per element. Adding a layout means its kernel files and a row in
// weight_formats.cpp.
#pragma once

#include "kernels/linear.h"

#include <cstdint>
#include <string_view>

namespace qf::kernels {

using MatVecFn = void (*)(const LinearWeight& w, const float* x, float* y, ThreadPool* pool);
// x [tokens, cols] -> y [tokens, rows] for any token count, the weights read once per group of
// up to 8 tokens.
using MatVecTokensFn = void (*)(const LinearWeight& w, const float* x, int64_t tokens, float* y,
                                ThreadPool* pool);

// Factors the BF16 matrix-matrix kernel keeps out of the decoded weights and applies to the
// outputs, so that what it decodes is exact in BF16.
enum class OutputFactor : uint8_t {
  none,
  tensor,  // LinearWeight::global_scale
  row,     // LinearWeight::scales[r]
};

struct WeightFormatRow {
  WeightFormat id;
  std::string_view name;  // for messages: "NVFP4", "INT4 (row pairs)"
  // Elements per block scale along a row: > 0 fixed, kGroupBlock = LinearWeight::group, 0 none.
  int block;
  // Bytes a product reads: weights, scales and tensor scale.
  uint64_t (*stored_bytes)(const LinearWeight& w);
  // y[rows] = W x with float activations (the precise path; Highway runtime dispatch).
  MatVecFn matvec;
  // The int8-activation path (AVX-512 VNNI or AVX2) and whether w's shape suits it on this
  // CPU; null where the layout has none.
  bool (*fits_int8_activation)(const LinearWeight& w);
  MatVecTokensFn matvec_int8_activation;
  // Whether the BF16 matrix-matrix kernel may take it: the decoded values, with `factor` kept
  // out, are exact in BF16 (F32 and F16 are not).
  bool bf16_exact;
  OutputFactor factor;
  // W[r0 .. r0+nr, c0 .. c0+nc) to float32 with row stride ld (the fast scalar decoders; the
  // same values as dequantize_rows). c0 and nc are multiples of the block; r0 and nr are even
  // for int4_row_pairs.
  void (*decode_tile)(const LinearWeight& w, int64_t r0, int64_t nr, int64_t c0, int64_t nc,
                      float* out, int64_t ld);
  // Rows [r0, r0 + n) to float32 [n, cols] through the formats/ reference dequantizers.
  void (*dequantize_rows)(const LinearWeight& w, int64_t r0, int64_t n, float* out);
};

inline constexpr int kGroupBlock = -1;

const WeightFormatRow& weight_format_row(WeightFormat format);

}  // namespace qf::kernels

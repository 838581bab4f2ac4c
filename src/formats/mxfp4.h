// MXFP4 (OCP microscaling): E2M1 values in blocks of 32 along each row with one E8M0 scale per
// block, no tensor scale. Scale choice and rounding follow compressed-tensors'
// `mxfp4-pack-quantized` (shared/specs/engine-formats.md §2.5).
#pragma once

#include "formats/weight_rows.h"

#include <cstdint>

namespace qf {

class ThreadPool;

inline constexpr int kMxfp4Block = 32;

// Quantizes w (cols % 32 == 0):
//   packed: [rows, cols/2] bytes, element 2j in the low nibble;
//   scales: [rows, cols/32] E8M0 codes (value 2^(code-127)).
void mxfp4_quantize_reference(const WeightRows& w, uint8_t* packed, uint8_t* scales);
void mxfp4_quantize(const WeightRows& w, uint8_t* packed, uint8_t* scales, ThreadPool& pool);
void mxfp4_dequantize(const uint8_t* packed, const uint8_t* scales, int64_t rows, int64_t cols,
                      float* out);

}  // namespace qf

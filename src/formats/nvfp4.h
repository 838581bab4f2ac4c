// NVFP4: E2M1 values in blocks of 16 along each row, one E4M3 scale per block and one float32
// scale per tensor (`weight_scale_2`). The math is ModelOpt's dynamic-block export path
// (shared/specs/modelopt-nvfp4.md §1.1) bit for bit.
#pragma once

#include "formats/weight_rows.h"

#include <cstdint>

namespace qf {

class ThreadPool;

inline constexpr int kNvfp4Block = 16;
// The FP8 value a block scale is normalised to: the block holding the tensor's amax gets scale
// code 448 (E4M3's largest), or 256 in Four Over Six mode (ModelOpt `four_over_six`, specs
// moe-hybrid §1), where a block may map its max to 4 instead of 6 and its code reaches
// 1.5 * 256 = 384 without clipping.
inline constexpr float kNvfp4Fp8Max = 448.f;
inline constexpr float kNvfp4FourOverSixFp8Max = 256.f;

// weight_scale_2 for a (group-unified) amax: amax * fl32(1/(6*fp8_max)), i.e. amax / 2688, or
// amax / 1536 for Four Over Six (fp8_max 256). An amax of 0 gives 1.0, so an all-zero tensor
// encodes to zero codes and finite scales (ModelOpt would emit NaN there); so does a subnormal
// amax whose product flushes to 0. Throws qf::Error for a negative or non-finite amax.
// (div_by_constant: exact division with --scale-division cpu, formats/weight_rows.h)
float nvfp4_global_scale(float amax, float fp8_max = kNvfp4Fp8Max);

// Quantizes w (cols % 16 == 0) with global scale g > 0:
//   packed: [rows, cols/2] bytes, element 2j in the low nibble;
//   scales: [rows, cols/16] E4M3 codes.
// Block rule: s = bamax / fl32(6*g) (IEEE); s == 0 -> 1.0; s8 = e4m3_rne(clamp(s, 2^-9, 448));
// q = x / fl32(float(s8) * g) (IEEE), then E2M1 round-half-even, sign bit iff q < 0.
// Inputs must be finite (NaN/Inf give unspecified codes; check weight_amax().nonfinite first).
// Throws qf::Error for a bad dtype or shape, or g not positive and finite.
void nvfp4_quantize_reference(const WeightRows& w, float g, uint8_t* packed, uint8_t* scales);
// Same bytes as the reference, SIMD with runtime dispatch, split into block ranges over the pool
// (the bytes do not depend on the thread count).
void nvfp4_quantize(const WeightRows& w, float g, uint8_t* packed, uint8_t* scales,
                    ThreadPool& pool);
// out[r, c] = e2m1(code) * e4m3(scale) * g, as float32.
void nvfp4_dequantize(const uint8_t* packed, const uint8_t* scales, float g, int64_t rows,
                      int64_t cols, float* out);

}  // namespace qf

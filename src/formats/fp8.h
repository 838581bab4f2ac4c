// FP8 E4M3 weights with one scale per output channel (row).
#pragma once

#include "core/dtype.h"
#include "formats/weight_rows.h"

#include <cstdint>

namespace qf {

class ThreadPool;

// scale[r] = amax_r * fl32(1/448), an amax of 0 giving 1.0, then rounded to `scale_dtype`
// (F32, BF16 or F16: the dtype the scale is stored in, so that the stored scale is the one the
// codes were made with); q[r, c] = e4m3_rne(clamp(x / scale[r], -448, 448)) with IEEE division.
//   codes: [rows, cols] E4M3; scales: [rows] float32 values exactly representable in scale_dtype.
// A non-zero scale that the dtype rounding flushes to 0 becomes the dtype's smallest subnormal and
// one that overflows its largest finite value, so stored scales are always finite and non-zero.
// Inputs must be finite (NaN/Inf give unspecified codes). Throws qf::Error for a bad dtype.
// (div_by_constant: exact division with --scale-division cpu, formats/weight_rows.h)
void fp8_channel_quantize_reference(const WeightRows& w, DType scale_dtype, uint8_t* codes,
                                    float* scales);
// Same bytes as the reference, SIMD with runtime dispatch, split by rows over the pool.
void fp8_channel_quantize(const WeightRows& w, DType scale_dtype, uint8_t* codes, float* scales,
                          ThreadPool& pool);
// out[r, c] = e4m3(code) * scale[r], as float32.
void fp8_channel_dequantize(const uint8_t* codes, const float* scales, int64_t rows,
                            int64_t cols, float* out);

}  // namespace qf

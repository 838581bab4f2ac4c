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
void fp8_channel_quantize_reference(const WeightRows& w, DType scale_dtype, uint8_t* codes,
                                    float* scales);
void fp8_channel_quantize(const WeightRows& w, DType scale_dtype, uint8_t* codes, float* scales,
                          ThreadPool& pool);
void fp8_channel_dequantize(const uint8_t* codes, const float* scales, int64_t rows,
                            int64_t cols, float* out);

}  // namespace qf

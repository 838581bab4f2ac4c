// INT8 weights with one scale per output channel (row), the weight half of SmoothQuant W8A8
// (ModelOpt `int8_sq`, specs modelopt-nvfp4 §3): scale = amax_row / 127, round half to even,
// clamp to [-128, 127]. Registry format `int8` (block 1: one scale per row); SmoothQuant builds
// this struct and hands it on as a QuantizedTensor (int8_to_quantized).
#pragma once

#include "core/dtype.h"
#include "formats/quantized_tensor.h"

#include <cstdint>
#include <vector>

namespace qf {

class ThreadPool;

struct Int8ChannelTensor {
  int64_t rows = 0;
  int64_t cols = 0;
  std::vector<int8_t> codes;  // [rows, cols]
  std::vector<float> scales;  // [rows], exactly representable in scale_dtype
  DType scale_dtype = DType::F32;
};

// scale[r] = amax_r * fl32(1/127) (CUDA's `amax / 127.0`), a dead row (amax 0) getting 1.0, then
// rounded to scale_dtype (F32, BF16, F16; never 0 or Inf); q = clamp(round_half_even(x / scale),
// -128, 127) with IEEE division. w: float32 [rows, cols]. Split by rows; deterministic.
// Throws qf::Error for a bad scale dtype or shape. Inputs must be finite.
// (div_by_constant: exact division with --scale-division cpu, formats/weight_rows.h)
Int8ChannelTensor int8_channel_quantize(const float* w, int64_t rows, int64_t cols,
                                        DType scale_dtype, ThreadPool& pool);
// out[r, c] = q[r, c] * scales[r].
void int8_channel_dequantize(const Int8ChannelTensor& q, float* out);
// The same tensor as a registry QuantizedTensor (format int8, block 1, codes as bytes).
QuantizedTensor int8_to_quantized(Int8ChannelTensor&& q);
// int8 row scale: amax*fl32(1/127) (0 -> 1) rounded to scale_dtype, as int8_channel_quantize.
float int8_scale_from_amax(float amax, DType scale_dtype);

}  // namespace qf

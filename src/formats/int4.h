// INT4: symmetric signed 4-bit integers in groups along each row, one scale per group.
// Math as ModelOpt's INT4 (AWQ) export: scale = amax/7, round half to even, clamp to [-8, 7].
#pragma once

#include "core/dtype.h"
#include "formats/weight_rows.h"

#include <cstdint>

namespace qf {

class ThreadPool;

inline constexpr int kInt4DefaultGroup = 128;
// `--group-size channel`: one scale per output channel, i.e. one group spanning each whole row
// (group = in_features). Resolved to the module's in_features before quantization.
inline constexpr int kInt4ChannelGroup = -1;
// `group`, or `cols` for kInt4ChannelGroup.
inline int int4_resolve_group(int group, int64_t cols) {
  return group == kInt4ChannelGroup ? static_cast<int>(cols) : group;
}

// scale[r, g] = amax_rg * fl32(1/7), an amax of 0 giving 1.0, rounded to `scale_dtype`;
// q = clamp(round_half_even(x / scale), -8, 7) with IEEE division. cols % group == 0.
//   q: [rows, cols] int8 in [-8, 7]; scales: [rows, cols/group] float32 (representable in
//   scale_dtype).
// `group` > 0 (32, 64 and 128 are the usual sizes). Scales are never 0 or Inf: a non-zero scale
// the dtype rounding flushes to 0 becomes the dtype's smallest subnormal, an overflow its largest
// finite value. Inputs must be finite (NaN/Inf give unspecified codes). Throws qf::Error for a
// bad dtype, shape or group.
// (div_by_constant: exact division with --scale-division cpu, formats/weight_rows.h)
void int4_quantize_reference(const WeightRows& w, int group, DType scale_dtype, int8_t* q,
                             float* scales);
// Same values as the reference, SIMD with runtime dispatch, split by groups over the pool.
void int4_quantize(const WeightRows& w, int group, DType scale_dtype, int8_t* q, float* scales,
                   ThreadPool& pool);
// out[r, c] = q[r, c] * scales[r, c / group], as float32.
void int4_dequantize(const int8_t* q, const float* scales, int group, int64_t rows, int64_t cols,
                     float* out);

// ModelOpt packing (rows must be even): out [rows/2, cols] bytes,
// byte[i, k] = (q[2i, k] & 0xF) | (q[2i+1, k] & 0xF) << 4.
void int4_pack_row_pairs(const int8_t* q, int64_t rows, int64_t cols, uint8_t* out);
// compressed-tensors `pack-quantized` (cols % 8 == 0): out [rows, cols/8] int32, element 8j+i
// stored as the unsigned nibble q+8 at bits 4i of word j.
void int4_pack_int32(const int8_t* q, int64_t rows, int64_t cols, int32_t* out);

}  // namespace qf

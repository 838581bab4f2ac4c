// llm-compressor's round to nearest for the formats with float scales (FP8, INT4, INT8), which
// the compressed-tensors target writes. Read in compressed-tensors 0.19 (quantization/utils/
// helpers.py calculate_qparams, lifecycle/forward_helpers.py _quantize) and checked byte for
// byte against llm-compressor 0.14 by scripts/interop. With T the weight's dtype:
//   scale  s = T(amax / half_range)  IEEE division of the float32 amax of the unit, rounded to T
//                                    (half_range: INT4 7.5, INT8 127.5, FP8 448); a zero scale
//                                    becomes T's machine epsilon, as compressed-tensors does
//   code   encode(T(x / s))          the division in T as well, then round half to even and
//                                    clamp (INT) or clamp to +-448 and cast to E4M3 (FP8)
// ModelOpt's scales differ: amax * fl32(1/7), 1/127, 1/448 in float32 (formats/fake_quant.h).
//
// NVFP4 (compressed-tensors 0.19 generate_gparam, calculate_qparams, NVFP4PackedCompressor):
//   global G = T(T(1/amax) * 2688)         torch's 2688 / t is reciprocal(t) * 2688, each step
//                                          rounded to T; stored as float32; an amax of 0 (or a
//                                          G that overflows) gives 1.0 (nan_to_num)
//   block  s = e4m3(G * T(bamax / 6))      the product in float32; a zero s becomes 0.125
//   code   e2m1(x / (s / G))               both divisions in float32 (the scale parameter is
//                                          float32 next to the weight), round half to even
#pragma once

#include "formats/quantized_tensor.h"
#include "formats/weight_rows.h"

namespace qf {

class ThreadPool;

// Fills q.codes (one code per element: int8 for INT4/INT8, E4M3 for FP8) and q.scales (one per
// `q.block` elements along a row; per row for FP8 and INT8) from w. q arrives with format, rows,
// cols, block and scale_dtype set; scale_dtype must be w's dtype (compressed-tensors stores the
// scales in the model dtype). Throws qf::Error for another format or a bad shape.
void quantize_llm_compressor(const WeightRows& w, QuantizedTensor& q, ThreadPool& pool);

// NVFP4 by llm-compressor's rounding (above) for a (fused-group) amax: fills q.codes,
// q.block_scales, q.global_scale (= 1 / G, for the dequantizer) and q.global_scale_reciprocal
// (= G, the value compressed-tensors stores). q arrives with rows, cols and block 16 set.
// Throws qf::Error for a bad shape or a negative or non-finite amax.
void nvfp4_quantize_llm_compressor(const WeightRows& w, float amax, QuantizedTensor& q,
                                   ThreadPool& pool);

// llm-compressor's NVFP4 global scale G for an amax, the weight's dtype `dtype`.
float nvfp4_llm_compressor_global(float amax, DType dtype);

// The scale llm-compressor gives an all-zero unit: the machine epsilon of `dtype`.
float llm_compressor_zero_scale(DType dtype);

}  // namespace qf

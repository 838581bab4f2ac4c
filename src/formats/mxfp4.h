// MXFP4 (OCP microscaling): E2M1 values in blocks of 32 along each row with one E8M0 scale per
// block, no tensor scale. Scale choice and rounding follow compressed-tensors'
// `mxfp4-pack-quantized` (shared/specs/engine-formats.md §2.5).
//
// The rules, as read in vllm-project/compressed-tensors (quantization/utils/mxfp_utils.py
// round_to_power_2 / generate_mx_scales, quantization/utils/helpers.py calculate_qparams,
// quantization/quant_args.py round_to_quantized_type_dtype, lifecycle/forward_helpers.py
// _quantize, quantization/utils/fp4_utils.py cast_to_fp4, compressors/nvfp4/helpers.py
// pack_fp4_to_uint8, compressors/mx_utils.py compress_mx_scale):
//  1. Block amax a = max |x| over the 32 elements (exact in float32).
//  2. Power of two: add a quarter of the mantissa range to a's bit pattern and keep the exponent
//     (bits + 0x200000, mask 0x7F800000), so a mantissa fraction >= 0.75 rounds up:
//     a in [1.75 * 2^k, 2^(k+1)) becomes 2^(k+1); otherwise 2^k. With E = that biased exponent,
//     the E8M0 code is 127 + (E - 127) - 2 = E - 2 (2 = floor(log2 6), the E2M1 max exponent).
//  3. CT clamps the code to [0, 255] (uint8 rounding): an all-zero block (log2 0 = -inf), a
//     subnormal amax and any amax below 2^-124 get code 0, scale 2^-127, and encode to zeros.
//     Deviation: CT turns an amax >= 1.75 * 2^127 into +inf and code 255 (E8M0 NaN); we cap the
//     code at 252 (scale 2^125), the largest scale whose products stay finite: such a block's q
//     lands in [7, 8) and saturates to 6, dequantizing to 6 * 2^125, the largest finite value
//     near it (code 253 would give 4 * 2^126 = +inf). No real weight comes near.
//  4. Elements: q = x / 2^(code - 127), exact (a power of two), then E2M1 round to nearest with
//     ties to even (thresholds <=0.25 -> 0, <0.75 -> 0.5, <=1.25 -> 1, <1.75 -> 1.5, <=2.5 -> 2,
//     <3.5 -> 3, <=5 -> 4, else 6; CT clamps to +-6 first, which the rounding already implies).
//  5. Sign: CT multiplies the rounded magnitude by torch.sign(q) and packs torch.signbit of the
//     result, so a negative q that rounds to zero is -0.0 -> code 0x8, while q = -0.0 gives
//     sign(-0.0) = 0 -> +0.0 -> code 0x0 (and the zero point CT adds turns -0.0 into +0.0 anyway).
//     That is exactly "sign bit iff q < 0", the same nibble rule as NVFP4
//     (core e2m1_from_f32_modelopt). ModelOpt's own MXFP4 export differs (ties toward zero,
//     every zero as 0x8, ceil(log2(amax/6)) exponents): mxfp4_quantize_modelopt below.
//  6. Rounding happens on the exact float32 value of the input, whatever its dtype. (CT computes
//     in the model dtype; for BF16 and F32 weights that is the same result, for F16 weights CT's
//     F16 scale arithmetic would flush scales below 2^-24 to its eps fallback, which we do not
//     copy.) Packing: element 2j in the low nibble.
// Inputs must be finite; NaN/Inf give unspecified codes (check weight_amax().nonfinite first).
#pragma once

#include "formats/weight_rows.h"

#include <cstdint>

namespace qf {

class ThreadPool;

inline constexpr int kMxfp4Block = 32;

// E8M0 code (value 2^(code-127)) for a block amax >= 0, finite: rules 2 and 3 above.
uint8_t mxfp4_scale_code(float block_amax);

// Quantizes w (cols % 32 == 0):
//   packed: [rows, cols/2] bytes, element 2j in the low nibble;
//   scales: [rows, cols/32] E8M0 codes (value 2^(code-127)).
// Throws qf::Error for a bad dtype or shape.
void mxfp4_quantize_reference(const WeightRows& w, uint8_t* packed, uint8_t* scales);
// Same bytes as the reference, SIMD with runtime dispatch, split by blocks over the pool.
void mxfp4_quantize(const WeightRows& w, uint8_t* packed, uint8_t* scales, ThreadPool& pool);
// ModelOpt's own MXFP4 export (qtensor/mxfp4_tensor.py MXFP4QTensor.quantize, specs
// modelopt-nvfp4 §3.3), which the ModelOpt target writes:
//  - per 32-block, k = ceil(max(log2(amax / 6), -127)) in float32, code = k + 127, where
//    amax / 6 is div_by_constant (formats/weight_rows.h: amax * fl32(1/6) as on CUDA, or exact
//    as on a CPU);
//  - x' = x / 2^k, nibble index = #{E2M1 midpoints < |x'|}, so ties round toward zero
//    (0.75 -> 0.5, 5 -> 4), and the sign bit is (2 - sign(x)) / 2, so every exact zero is 0x8.
uint8_t mxfp4_scale_code_modelopt(float block_amax);
uint8_t e2m1_from_f32_modelopt_mx(float x_scaled);
// Same layout as mxfp4_quantize; split by rows over the pool.
void mxfp4_quantize_modelopt(const WeightRows& w, uint8_t* packed, uint8_t* scales,
                             ThreadPool* pool);

// out[r, c] = e2m1(code) * 2^(scale - 127), as float32.
void mxfp4_dequantize(const uint8_t* packed, const uint8_t* scales, int64_t rows, int64_t cols,
                      float* out);

}  // namespace qf

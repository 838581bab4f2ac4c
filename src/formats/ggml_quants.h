// ggml's block formats, with reference quantizers that give exactly the bytes of ggml's
// `quantize_row_*_ref` (ggml/src/ggml-quants.c; shared/specs/engine-formats.md §3.2-3.5, §4) and
// its dequantizers. All functions take n elements, n a multiple of the type's block size, and
// write n / block_size blocks; inputs must be finite. The layouts (bytes per block):
//   Q4_0  (32, 18): fp16 d, qs[16]: element j low nibble, j+16 high; x = (q - 8) d
//   Q8_0  (32, 34): fp16 d, int8 qs[32]; x = q d
//   MXFP4 (32, 17): E8M0 e, qs[16] split halves; x = E2M1(q) 2^(e-127)
//   NVFP4 (64, 36): UE4M3 d[4] (one per 16), qs[32]: sub-block s uses qs[8s..8s+7], element
//                   16s+j low nibble, 16s+j+8 high; x = E2M1(q) E4M3(d[s])
//   Q4_K (256, 144), Q5_K (256, 176), Q6_K (256, 210): ggml's k-quant super-blocks.
#pragma once

#include <cstdint>
#include <cstring>

namespace qf {

// ggml's kvalues for FP4 nibbles: twice the E2M1 value ({0,1,2,3,4,6,8,12} and negatives), so
// that they are small integers; the scale decoders below return half the scale to match.
inline constexpr int8_t kGgmlFp4Values[16] = {0, 1, 2, 3, 4, 6, 8, 12,
                                               0, -1, -2, -3, -4, -6, -8, -12};

// ggml_ue4m3_to_fp32: HALF the E4M3 value of code x (the sign bit is not masked, so 0x80..0xFE
// decode as large positives; 0x00 and 0x7F decode as 0).
float ggml_ue4m3_to_f32_half(uint8_t x);
// ggml_fp32_to_ue4m3, which is not IEEE rounding (spec §4.1): x <= 0 or NaN -> 0; clamped at
// 448; normal mantissas round half up; a result whose exponent reaches 15 saturates to 0x7E, so
// [248, 448] -> 0x7E; below 2^-6, code = min(7, (int)(x*512 + 0.5)), 0 when that is < 1.
uint8_t ggml_f32_to_ue4m3(float x);
// 2^(e-128): half the E8M0 value (GGML_E8M0_TO_FP32_HALF), exact for every e (0xFF included).
float ggml_e8m0_to_f32_half(uint8_t e);
// best_index_mxfp4: the nibble whose kvalue * d is nearest to x, the first (lowest) index on
// ties, so ties go to the smaller magnitude and a negative that rounds to 0 gets code 0, not 8.
uint8_t ggml_fp4_best_index(float x, float d);

// The 6-bit scale and min of sub-block j (0..7) of a Q4_K / Q5_K super-block from its 12
// packed scale bytes (ggml's get_scale_min_k4).
void ggml_k4_scale_min(int j, const uint8_t* scales12, uint8_t* scale, uint8_t* min);
// All 8 at once, as ggml's x86 kernels unpack them (three 32-bit words through masks and
// shifts): out[0..7] the scales, out[8..15] the mins; the same values as ggml_k4_scale_min.
inline void ggml_k4_scales_mins(const uint8_t* scales12, uint8_t* out16) {
  constexpr uint32_t kLow6 = 0x3f3f3f3f, kLow4 = 0x0f0f0f0f, kLow2 = 0x03030303;
  uint32_t u[4];
  std::memcpy(u, scales12, 12);
  u[3] = ((u[2] >> 4) & kLow4) | (((u[1] >> 6) & kLow2) << 4);  // mins 4..7
  const uint32_t mins03 = u[1] & kLow6;
  u[1] = (u[2] & kLow4) | (((u[0] >> 6) & kLow2) << 4);  // scales 4..7
  u[2] = mins03;
  u[0] &= kLow6;  // scales 0..3
  std::memcpy(out16, u, 16);
}

void ggml_quantize_q4_0(const float* x, uint8_t* out, int64_t n);
void ggml_quantize_q8_0(const float* x, uint8_t* out, int64_t n);
// e = floor(log2 amax) - 2 + 127 per block, 0 for an all-zero block. Deviation from ggml: an
// amax below 2^-125 (where ggml's float-to-uint8 cast is undefined and gives 0xFF on x86, a
// code its own validator rejects) gets e = 0.
void ggml_quantize_mxfp4(const float* x, uint8_t* out, int64_t n);
// Per 16: d = ggml_f32_to_ue4m3(amax / 6), codes by ggml_fp4_best_index against the half
// scale. No tensor scale (see formats/ggml_fp4_repack.h for the two-level ModelOpt path).
void ggml_quantize_nvfp4(const float* x, uint8_t* out, int64_t n);
void ggml_quantize_q4_k(const float* x, uint8_t* out, int64_t n);
void ggml_quantize_q5_k(const float* x, uint8_t* out, int64_t n);
void ggml_quantize_q6_k(const float* x, uint8_t* out, int64_t n);

void ggml_dequantize_q4_0(const uint8_t* in, float* y, int64_t n);
void ggml_dequantize_q8_0(const uint8_t* in, float* y, int64_t n);
void ggml_dequantize_mxfp4(const uint8_t* in, float* y, int64_t n);
void ggml_dequantize_nvfp4(const uint8_t* in, float* y, int64_t n);
void ggml_dequantize_q4_k(const uint8_t* in, float* y, int64_t n);
void ggml_dequantize_q5_k(const uint8_t* in, float* y, int64_t n);
void ggml_dequantize_q6_k(const uint8_t* in, float* y, int64_t n);

// The float types as ggml converts them: F16 and BF16 round to nearest even.
void ggml_quantize_f32(const float* x, uint8_t* out, int64_t n);
void ggml_quantize_f16(const float* x, uint8_t* out, int64_t n);
void ggml_quantize_bf16(const float* x, uint8_t* out, int64_t n);
void ggml_dequantize_f32(const uint8_t* in, float* y, int64_t n);
void ggml_dequantize_f16(const uint8_t* in, float* y, int64_t n);
void ggml_dequantize_bf16(const uint8_t* in, float* y, int64_t n);

}  // namespace qf

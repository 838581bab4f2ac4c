// Scalar numeric types: conversions between float32 and BF16, FP16, FP8 (E4M3FN, E5M2), E8M0
// and E2M1 codes, with exactly the rounding and saturation of the reference producers
// (PyTorch casts and ModelOpt's export path; see shared/specs/modelopt-nvfp4.md §0).
// These are the scalar references; SIMD code elsewhere is tested bit-identical to them.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>

namespace qf {

inline uint32_t f32_bits(float x) { return std::bit_cast<uint32_t>(x); }
inline float f32_from_bits(uint32_t b) { return std::bit_cast<float>(b); }

// ---- BF16 -------------------------------------------------------------------------------
inline float bf16_to_f32(uint16_t h) { return f32_from_bits(uint32_t(h) << 16); }
// Round to nearest even; NaN stays NaN (quiet, sign kept); overflow becomes infinity.
inline uint16_t f32_to_bf16(float x) {
  uint32_t u = f32_bits(x);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return uint16_t((u >> 16) | 0x0040u);
  u += 0x7FFFu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}

// ---- FP16 (IEEE binary16) ---------------------------------------------------------------
float f16_to_f32(uint16_t h);
// Round to nearest even, subnormals kept, overflow to infinity, NaN stays NaN.
uint16_t f32_to_f16(float x);

// ---- FP8 E4M3FN: bias 7, no infinities, 0x7F/0xFF are NaN, max 448 ------------------------
float e4m3_to_f32(uint8_t code);
// PyTorch's `.to(torch.float8_e4m3fn)`: round to nearest even with subnormals (step 2^-9),
// NOT saturating: magnitudes that round above 448 (and Inf, NaN) give NaN (0x7F | sign).
uint8_t f32_to_e4m3(float x);
// Same rounding, but saturating to +-448 (CUDA __nv_fp8_e4m3, Triton satfinite). NaN -> NaN.
uint8_t f32_to_e4m3_satfinite(float x);

// ---- FP8 E5M2: bias 15, IEEE-like with infinities ---------------------------------------
float e5m2_to_f32(uint8_t code);
// PyTorch's `.to(torch.float8_e5m2)`: round to nearest even, overflow to infinity.
uint8_t f32_to_e5m2(float x);

// ---- E8M0: a biased exponent, value 2^(code-127); 0xFF is NaN -----------------------------
inline float e8m0_to_f32(uint8_t code) {
  if (code == 0xFF) return std::nanf("");
  if (code == 0) return f32_from_bits(0x00400000u);  // 2^-127 is a float32 subnormal
  return f32_from_bits(uint32_t(code) << 23);
}

// ---- E2M1 (FP4): nibble = sign<<3 | index, magnitudes {0,.5,1,1.5,2,3,4,6} ---------------
inline constexpr float kE2M1Values[16] = {0.f,  0.5f,  1.f,  1.5f,  2.f,  3.f,  4.f,  6.f,
                                          -0.f, -0.5f, -1.f, -1.5f, -2.f, -3.f, -4.f, -6.f};
inline float e2m1_to_f32(uint8_t nibble) { return kE2M1Values[nibble & 0xF]; }

// Magnitude index 0..7 of |q| rounded to the E2M1 grid, ties to even mantissa, saturating at
// 6 (ModelOpt `_cast_fp4`, compressed-tensors `cast_to_fp4`): 0.25->0, 0.75->1, 1.25->1,
// 1.75->2, 2.5->2, 3.5->4, 5->4, >5 -> 6. Argument must be >= 0 and not NaN.
inline uint8_t e2m1_index_rne(float a) {
  uint8_t idx = uint8_t((a > 0.25f) + (a > 0.75f) + (a > 1.25f) + (a > 1.75f) + (a > 2.5f) +
                        (a > 3.5f) + (a > 5.0f));
  idx += uint8_t((a == 0.75f) | (a == 1.75f) | (a == 3.5f));
  return idx;
}
// Magnitude index with ties toward zero (ModelOpt's MXFP4 export): 0.75->0.5, 5->4, ...
inline uint8_t e2m1_index_rtz_ties(float a) {
  return uint8_t((a > 0.25f) + (a > 0.75f) + (a > 1.25f) + (a > 1.75f) + (a > 2.5f) + (a > 3.5f) +
                 (a > 5.0f));
}
// ModelOpt NVFP4 export: sign bit set iff q < 0, so a negative q that rounds to zero gives 0x8
// while -0.0 gives 0x0.
inline uint8_t e2m1_from_f32_modelopt(float q) {
  return uint8_t(((q < 0.f) ? 8u : 0u) | e2m1_index_rne(std::fabs(q)));
}

}  // namespace qf

// Byte helpers shared by the ggml block codecs (not a public interface): blocks are packed
// little-endian structs, read and written byte by byte so no alignment is assumed.
#pragma once

#include "core/numeric.h"

#include <cstdint>

namespace qf {

inline uint16_t ggml_load_u16(const uint8_t* p) { return uint16_t(p[0] | (p[1] << 8)); }
inline void ggml_store_u16(uint8_t* p, uint16_t v) {
  p[0] = uint8_t(v);
  p[1] = uint8_t(v >> 8);
}
// ggml stores block scales as IEEE fp16, rounded to nearest even (GGML_FP32_TO_FP16).
inline void ggml_store_f16(uint8_t* p, float v) { ggml_store_u16(p, f32_to_f16(v)); }
inline float ggml_load_f16(const uint8_t* p) { return f16_to_f32(ggml_load_u16(p)); }

// ggml's nearest_int: round half to even through the 1.5*2^23 trick, valid for |x| < 2^22.
inline int ggml_nearest_int(float x) {
  const float v = x + 12582912.f;
  return int(f32_bits(v) & 0x007FFFFF) - 0x00400000;
}

// ggml's make_qx_quants with rmse_type 1: a signed scale for x ~ scale * (L - nmax), L in
// [0, 2 nmax), the best of 19 candidate scales around -nmax / max by the least-squares fit
// weighted by qw (the importance), or by x^2 when qw is null (the reference quantizers). Returns
// the scale; L holds the levels of the best fit (not re-derived from the rounded scale: ggml
// keeps them).
float ggml_make_qx(int n, int nmax, const float* x, int8_t* L, const float* qw);

// A scale and min for x ~ scale * L + min with L in [0, nmax], minimising the weighted squared
// error over nstep + 1 candidate scales around nmax / (max - min). Returns the scale, stores -min
// (>= 0) in *neg_min. ggml's make_qkx2_quants and make_qkx3_quants with use_mad = false (the
// same search; they differ only in the weights their callers pass). Laux: n bytes of scratch.
float ggml_make_scale_min(int n, int nmax, const float* x, const float* weights, uint8_t* L,
                          float* neg_min, uint8_t* Laux, float rmin, float rdelta, int nstep);

// The levels L[256] of one super-block into its code bytes, as ggml lays them out: Q4_K
// (nibbles at blk + 16; L in [0, 15]), Q5_K (high bits at blk + 16, nibbles at blk + 48; L in
// [0, 31]), Q6_K (low nibbles at blk, high 2 bits at blk + 128; L in [0, 63]). Scales untouched.
void ggml_pack_q4_k_levels(const uint8_t* L, uint8_t* blk);
void ggml_pack_q5_k_levels(const uint8_t* L, uint8_t* blk);
void ggml_pack_q6_k_levels(const uint8_t* L, uint8_t* blk);
// One Q6_K super-block (210 bytes) of x[256]: ggml's quantize_row_q6_K_ref when qw is null,
// its importance-weighted quantize_q6_K with qw[256] otherwise.
void ggml_quantize_q6_k_block(const float* x, const float* qw, uint8_t* out);
// Q4_K / Q5_K super-block header: stores the eight 6-bit sub-block scales `ls` and mins `lm`
// (each <= 63) in the 12 scale bytes at sc (ggml's packing, read by ggml_k4_scale_min).
void ggml_k4_pack_scale_min(const uint8_t* ls, const uint8_t* lm, uint8_t* sc);
// The final levels L[256] in [0, nmax] of x against the scales already stored in the
// super-block header at `block` (fp16 d, fp16 dmin, 12 scale bytes), as ggml re-derives them;
// a sub-block whose scale is 0 keeps the levels L already holds (ggml does the same).
void ggml_k4_levels(const float* x, const uint8_t* block, int nmax, uint8_t* L);

}  // namespace qf

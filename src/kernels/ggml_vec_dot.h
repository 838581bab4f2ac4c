// Products of GGUF weights in ggml blocks with activations quantized the way ggml-cpu quantizes
// them (the type's vec_dot_type), computed as integer sums per block combined in float, as
// llama.cpp's CPU backend does:
//   Q4_0, Q8_0, MXFP4, NVFP4 x Q8_0 (32 int8 and an fp16 scale per 32 activations)
//   Q4_K, Q5_K, Q6_K         x Q8_K (256 int8, a float scale and 16 sums of 16 per 256)
// The fast mode of linear_forward uses them for those types (kernels/linear.cpp). Internal to
// kernels/ (and its tests).
#pragma once

#include "kernels/linear.h"

#include <cstdint>
#include <vector>

namespace qf::kernels {

// ggml-cpu's x86 quantize_row_q8_0 (not quantize_row_q8_0_ref): per 32 values, amax; the stored
// scale d = fp16(amax / 127) (returned as its float value) and q = round-half-even(x * (127 /
// amax)), 0 for an all-zero block. n is a multiple of 32; q[n], d[n / 32].
void ggml_quantize_act_q8_0(const float* x, int64_t n, int8_t* q, float* d);

// The same with AVX-512 where the CPU has it (the same bytes); false (and nothing written)
// otherwise. ggml_quantize_activations uses it.
bool ggml_quantize_act_q8_0_simd(const float* x, int64_t n, int8_t* q, float* d);

// ggml's quantize_row_q8_K (the reference, which is what ggml-cpu runs on x86): per 256 values
// the signed value `max` of largest magnitude (the first one), iscale = -127 / max, q =
// min(127, nearest_int(iscale * x)), d = 1 / iscale, and bsums = the sums of each 16 q's; all
// zero for an all-zero block. n is a multiple of 256; q[n], d[n / 256], bsums[n / 16].
void ggml_quantize_act_q8_k(const float* x, int64_t n, int8_t* q, float* d, int16_t* bsums);

// Which activation quantization a weight's fast product uses (its ggml vec_dot_type), or none
// when the fast integer product does not apply (not ggml, another type, cols not a multiple of
// the blocks).
enum class GgmlActKind : uint8_t { none, q8_0, q8_k };
GgmlActKind ggml_act_kind(const LinearWeight& w);

// The activations of `tokens` tokens quantized for one weight type, each token's arrays padded
// to a multiple of 128 (Q8_0) or 256 (Q8_K), padding zero, so that the SIMD kernels read whole
// vectors.
struct GgmlActivations {
  GgmlActKind kind = GgmlActKind::none;
  int64_t cols = 0, padded = 0, tokens = 0;
  std::vector<int8_t> q;        // [tokens, padded]
  std::vector<float> d;         // [tokens, padded / 32] (Q8_0) or [tokens, padded / 256] (Q8_K)
  std::vector<int16_t> bsums;   // Q8_K: [tokens, padded / 16]
  // Q8_0 against repacked Q4_0 rows (LinearWeight::ggml_rows8): 8 x each 32-element block's sum
  // of activation bytes (the Q4_0 offset's share), [tokens, padded / 32].
  std::vector<int32_t> block_sum8;
  // For the Q8_0 SIMD kernels (ggml_prepare_simd): q in the kernel's element order, and per
  // 32-bit lane (16 per 128 or 64 activations, the kernel's chunk) -offset * the sum of the
  // lane's activation bytes (offset: what the kernel adds to the weights to make them unsigned)
  // and the lane's activation scale d.
  std::vector<int8_t> simd_q;      // [tokens, padded]
  std::vector<int32_t> lane_bias;  // [tokens, lanes]
  std::vector<float> lane_scale;   // [tokens, lanes]
  int64_t d_stride() const { return kind == GgmlActKind::q8_0 ? padded / 32 : padded / 256; }
};
void ggml_quantize_activations(GgmlActKind kind, const float* x, int64_t tokens, int64_t cols,
                               GgmlActivations& out);

// The scalar model of ggml's arithmetic for one row and one token: integer sums per block
// (per 16-element sub-block for NVFP4), each times its weight and activation scales in float
// (ggml's generic order: (d_w * d_x) * isum, accumulated in block order), minus the K-quants'
// min terms (dmin * d_x * sum_j m_j * bsum_j); not yet times LinearWeight::global_scale. It is
// also the portable fallback of the fast product.
float ggml_vec_dot_scalar(const LinearWeight& w, int64_t row, const GgmlActivations& a,
                          int64_t token);

// y[t, r] = row r . token t of x (float), x quantized once per call as ggml_act_kind(w) says
// (which must not be none), times global_scale; AVX-512 VNNI where the CPU has it, else AVX2
// for the types it has, else the scalar model. Each output is computed the same way whatever the pool, the token count and the
// row grouping, so prefill gives the bytes of token-by-token decode.
void matmul_ggml_int8(const LinearWeight& w, const float* x, int64_t tokens, float* y,
                      ThreadPool* pool);

// The SIMD kernel of one type on this CPU, if any (matvec_ggml_avx512vnni.cpp): rows [r0, r1)
// against tokens [t0, t1) of `a`, y[t * rows + r] = dot * factor. Returns false (and does
// nothing) where it has no kernel for the type.
bool ggml_rows_simd(const LinearWeight& w, const GgmlActivations& a, int64_t r0, int64_t r1,
                    int64_t t0, int64_t t1, float factor, float* y);
// Fills a.lane_bias / a.lane_scale for w's kernel; once per product, before ggml_rows_simd.
void ggml_prepare_simd(const LinearWeight& w, GgmlActivations& a);
// Whether ggml_rows_simd has a kernel for w's type on this CPU.
bool ggml_has_simd(const LinearWeight& w);

// The AVX2 kernels (matvec_ggml_avx2.cpp) of CPUs without AVX-512 VNNI: Q4_0, Q8_0, MXFP4, NVFP4
// (the scalar model's results to float rounding) and Q4_K, Q6_K (its results bit for bit). Read
// a.q / a.d / a.bsums as ggml_quantize_activations leaves them (no ggml_prepare_simd). The
// driver uses them where ggml_has_simd is false; tests call them directly. For repacked Q4_0
// (w.ggml_rows8) r0 must be a multiple of 8 or lie in the stored tail (r0 >= rows / 8 * 8), and
// a.block_sum8 must be filled; otherwise qf::Error.
bool ggml_has_avx2_kernel(const LinearWeight& w);
void ggml_rows_avx2(const LinearWeight& w, const GgmlActivations& a, int64_t r0, int64_t r1,
                    int64_t t0, int64_t t1, float factor, float* y);

}  // namespace qf::kernels

// Shared between the kernel files: per-format entry points chosen by linear.cpp, row-task
// splitting, and small decode tables. Not part of the public kernels interface.
#pragma once

#include "kernels/linear.h"

#include <algorithm>
#include <cstdint>
#include <functional>
#include <span>

namespace qf::kernels {

// Runs fn(r0, r1) over [0, rows) in tasks of `rows_per_task` rows (the last may be shorter).
// The split depends only on the arguments, never on the pool's size.
void for_row_tasks(ThreadPool* pool, int64_t rows, int64_t rows_per_task,
                   const std::function<void(int64_t, int64_t)>& fn);

// Rows per matrix-vector task: about 64 KiB of weights, a multiple of `multiple`.
int64_t matvec_rows_per_task(const LinearWeight& w, int64_t multiple);

// The L2 software-prefetch distance of the matrix-vector kernels that read 4 contiguous rows at
// a time: a whole number of 4-row blocks, at least kPrefetchAheadBytes. While a block is read,
// the same columns of a later block are prefetched, so the 4 interleaved row streams become one
// sequential stream well ahead of the loads; the hardware prefetchers alone keep too few lines
// in flight for one core to read at the memory's rate (BF16 on one Zen 4 core: 63-65% -> 75-78%
// of a STREAM read in alternation with it, KernelVsStreamBf16/1).
inline constexpr int64_t kPrefetchAheadBytes = 8192;
inline int64_t prefetch_ahead_bytes(int64_t row_bytes) {
  const int64_t block = 4 * row_bytes;
  return block * std::max<int64_t>(1, (kPrefetchAheadBytes + block - 1) / block);
}

// The same kernels' L2 prefetch target for rows longer than kRowPrefetchBytes, as an offset from
// the byte `at` of each of the 4 rows being read: kRowPrefetchBytes further along the same row,
// and past its end the matching place in the same row of the next block, so each row's stream
// is prefetched a steady 4 KB (16 KB of the 4 streams together) ahead. A whole block ahead (what
// prefetch_ahead_bytes gives, and still gives for shorter rows) was too far for long rows:
// Emerald Rapids, 4096 x 14336 BF16 (114 KB blocks), 2 threads: 0.83-0.87 of a STREAM read,
// 0.98-1.02 with this. `distance` replaces the 4 KB where a kernel measured better with another.
inline constexpr int64_t kRowPrefetchBytes = 4096;
inline int64_t row_prefetch_offset(int64_t at, int64_t row_bytes,
                                   int64_t distance = kRowPrefetchBytes) {
  if (at + distance < row_bytes) return distance;
  if (row_bytes >= distance) return distance + 3 * row_bytes;
  return prefetch_ahead_bytes(row_bytes);
}

// E4M3 code -> float32, all 256 codes (NaN codes give NaN).
const float* e4m3_table();
// E8M0 code -> float32.
const float* e8m0_table();

// Matrix-vector products y[rows] = W x, one per format family (the matvec_*.cpp files).
void matvec_f32(const LinearWeight& w, const float* x, float* y, ThreadPool* pool);
void matvec_f16(const LinearWeight& w, const float* x, float* y, ThreadPool* pool);
void matvec_bf16(const LinearWeight& w, const float* x, float* y, ThreadPool* pool);
// y [tokens, rows] = x [tokens, cols] W^T for a float weight stored transposed
// (LinearWeight::transposed), streaming its stored rows once for all tokens; partial outputs of
// tokens x rows floats per task, so for a few tokens: at most kTransposedStreamTokens (qf::Error
// beyond).
void matmul_float_transposed(const LinearWeight& w, const float* x, int64_t tokens, float* y,
                             ThreadPool* pool);
inline constexpr int64_t kTransposedStreamTokens = 16;
// y [tokens, rows] = x [tokens, cols] W^T for F32/F16/BF16 weights in rows, float32 throughout,
// the weights read once per group of up to 8 tokens (batched decode: fast mode up to
// kSmallBatchTokens).
void matvec_float_tokens(const LinearWeight& w, const float* x, int64_t tokens, float* y,
                         ThreadPool* pool);
// x [tokens, K] rounded to BF16 pairs (AVX512-BF16 only): out[t * kp + i] = bf16(x[t, 2i]) |
// bf16(x[t, 2i+1]) << 16, kp = ceil(K / 2), an odd K padded with 0 (matmul_bf16_avx512bf16.cpp).
void x_to_bf16_pairs(const float* x, int64_t tokens, int64_t K, uint32_t* out);
// The same for BF16 weights on AVX512-BF16 (cpu_has_avx512bf16()), the activations rounded to
// BF16 as in the prefill product (matvec_bf16_tokens_avx512bf16.cpp).
void matvec_bf16_tokens_avx512bf16(const LinearWeight& w, const float* x, int64_t tokens,
                                   float* y, ThreadPool* pool);
// Fast-mode BF16 prompts up to this many tokens take it rather than the matrix product (whose
// panel packing the few tokens do not amortise): llama-1b, 2 threads, Zen 4, prefill tok/s of
// the matrix product vs this kernel, 16 tokens 92-95 vs 116-120, 32: 128-131 vs 127-140.
inline constexpr int64_t kBf16TokensPrefill = 16;
// The same on AMX-BF16 tiles (matvec_bf16_tokens_amx.cpp: the same roundings, another summation
// order), for BF16 rows of a multiple of 32 elements, at least 32 rows, on CPUs with AMX-BF16.
bool fits_bf16_tokens_amx(const LinearWeight& w);
void matvec_bf16_tokens_amx(const LinearWeight& w, const float* x, int64_t tokens, float* y,
                            ThreadPool* pool);

// NVFP4, MXFP4 and INT4 (below), also repacked 16 rows at a time (each row gathered back: the
// same bits).
void matvec_nvfp4(const LinearWeight& w, const float* x, float* y, ThreadPool* pool);
void matvec_mxfp4(const LinearWeight& w, const float* x, float* y, ThreadPool* pool);
void matvec_fp8(const LinearWeight& w, const float* x, float* y, ThreadPool* pool);
void matvec_int8(const LinearWeight& w, const float* x, float* y, ThreadPool* pool);
void matvec_int4_row_pairs(const LinearWeight& w, const float* x, float* y, ThreadPool* pool);
void matvec_int4_packed32(const LinearWeight& w, const float* x, float* y, ThreadPool* pool);

// ---- Int8-activation matrix-vector products (AVX-512 VNNI or AVX2) ------------------------
// The activation is quantized once per call to int8 per kActBlock elements (scale = amax / 127,
// q = round-to-nearest-even(x * (127 / amax))); 4-bit weights become unsigned bytes
// (value + offset) and vpdpbusd (AVX2: vpmaddubsw + vpmaddwd) forms exact integer dot products. quantize_activation_int8 is
// the scalar model of that quantization (natural order), shared with the reference.
constexpr int64_t kActBlock = 16;
// n is a multiple of kActBlock; q[n], scales[n / kActBlock].
void quantize_activation_int8(const float* x, int64_t n, int8_t* q, float* scales);

// Whether a fast-mode linear_forward of up to kSmallBatchTokens tokens of w takes the
// int8-activation path: w's row has the path and its shape fits the kernels this CPU runs. The
// path decodes each weight chunk once for up to 8 tokens (batched decode), where the BF16
// matrix-matrix kernel's panel packing would cost more than the products.
bool use_int8_matvec(const LinearWeight& w);
inline constexpr int64_t kSmallBatchTokens = 8;
// Whether linear_forward of `tokens` tokens of w in `mode` takes the int8-activation products:
// fast mode and use_int8_matvec(w), and either up to kSmallBatchTokens tokens; or up to
// kVnniInt8PrefillTokens on CPUs with AVX-512 VNNI or the AVX512-BF16 matrix product but where
// AMX would not take w (the matrix product's panel packing costs more than it saves on short
// prompts: llama-1b, 2 threads, prefill tok/s of the BF16
// matrix product vs the int8 kernels, NVFP4 16 tokens 83 vs 143, 32: 113 vs 145, 64: 136 vs
// 155, 128: 163 vs 161; MXFP4 32: 107 vs 130, 64: 152 vs 148; row-pair INT4 32: 89 vs 97, 64:
// 132 vs 93; AMX's products, ~8x faster, are not measured against them); or a prefill on
// a CPU that runs the AVX2 int8 kernels (no AVX-512 VNNI, no BF16 matrix-matrix kernels), where
// the float path would decode every weight to float32 tiles: there the int8 kernels, reading
// each 4-bit chunk once per group of 8 tokens (row-pair INT4: 4), were faster at every prompt
// length measured (AVX2, llama-1b, 2 threads: NVFP4 16 tokens 21.6 -> 50.9 tok/s, 64: 31 ->
// 80, 512: 70 -> 84), except the row-pair INT4 layout beyond kRowPairInt8PrefillTokens (its
// 4-token groups cost twice NVFP4's per token; tiles vs int8 kernels: 16 tokens 33 vs 39 tok/s,
// 32: 47 vs 40, 64: 63 vs 39).
bool takes_int8_activations(const LinearWeight& w, int64_t tokens, KernelMode mode);
inline constexpr int64_t kRowPairInt8PrefillTokens = 24;
inline constexpr int64_t kVnniInt8PrefillTokens = 32;
bool cpu_has_avx512vnni();
// AVX-512 VBMI (vpermb: the 4-bit kernels' one-instruction nibble decode).
bool cpu_has_avx512vbmi();
// AVX2 with FMA and F16C (the AVX2 kernels of matvec_q4_avx2.cpp and matvec_ggml_avx2.cpp).
bool cpu_has_avx2();
// Whether a product of one token over a weight repacked into one sequential stream (the 16-row
// 4-bit and 8-row Q4_0 layouts; the 8-row kernel's 4-token groups too) should issue software L2
// prefetches kOneStreamPrefetchBytes ahead: not on AMD, whose hardware prefetchers follow the
// stream across 4 KB pages (Zen 4: 5-10% faster without them), yes elsewhere: Intel's L2
// streamer stops at each 4 KB page (Emerald Rapids, 4096 x 14336 NVFP4 repacked: 0.58 of a
// STREAM read without them, 0.96 with; 2 / 4 / 16 KB ahead: 0.76 / 0.92 / 0.92).
bool one_stream_wants_prefetch();
inline constexpr int64_t kOneStreamPrefetchBytes = 8192;
// The int8-activation products per 4-bit layout, x [tokens, cols] -> y [tokens, rows]: on
// AVX-512 VNNI (BW, VL, F16C; matvec_q4_avx512vnni.cpp), else on AVX2 + FMA + F16C
// (matvec_q4_avx2.cpp), both in q4_int8_activation.cpp's activation layout. fits_int8act_* say
// whether w's shape suits the kernels of this CPU (false where it runs neither); call a product
// only if it holds.
bool fits_int8act_nvfp4(const LinearWeight& w);
// NVFP4, MXFP4 and INT4 repacked 16 rows at a time (kernels/q4_rows16.h): AVX-512 VNNI and
// VBMI only (matvec_q4_rows16_avx512vnni.cpp).
bool fits_int8act_q4_rows16(const LinearWeight& w);
void matvec_q4_rows16_int8act(const LinearWeight& w, const float* x, int64_t tokens, float* y,
                               ThreadPool* pool);
// Several repacked products over the same input x [tokens, cols] (q/k/v, gate/up): the same
// values as one matvec_q4_rows16_int8act each, x quantized once and all rows in one pool loop.
// Only where q4_rows16_can_share_input(ws): every weight fits the kernel, one format, the same
// cols and block.
bool q4_rows16_can_share_input(std::span<const LinearWeight* const> ws);
void matvec_q4_rows16_int8act_shared(std::span<const LinearWeight* const> ws, const float* x,
                                     int64_t tokens, std::span<float* const> ys, ThreadPool* pool);
bool fits_int8act_mxfp4(const LinearWeight& w);
bool fits_int8act_int4_row_pairs(const LinearWeight& w);
bool fits_int8act_int4_packed32(const LinearWeight& w);
void matvec_nvfp4_int8act(const LinearWeight& w, const float* x, int64_t tokens, float* y,
                          ThreadPool* pool);
void matvec_mxfp4_int8act(const LinearWeight& w, const float* x, int64_t tokens, float* y,
                          ThreadPool* pool);
void matvec_int4_row_pairs_int8act(const LinearWeight& w, const float* x, int64_t tokens,
                                   float* y, ThreadPool* pool);
void matvec_int4_packed32_int8act(const LinearWeight& w, const float* x, int64_t tokens,
                                  float* y, ThreadPool* pool);
// The VNNI kernels themselves (only where cpu_has_avx512vnni()).
void matvec_nvfp4_avx512vnni(const LinearWeight& w, const float* x, int64_t tokens, float* y,
                             ThreadPool* pool);
void matvec_mxfp4_avx512vnni(const LinearWeight& w, const float* x, int64_t tokens, float* y,
                             ThreadPool* pool);
void matvec_int4_row_pairs_avx512vnni(const LinearWeight& w, const float* x, int64_t tokens,
                                      float* y, ThreadPool* pool);
void matvec_int4_packed32_avx512vnni(const LinearWeight& w, const float* x, int64_t tokens,
                                     float* y, ThreadPool* pool);

// BF16 matrix-matrix product (AVX512-BF16) for BF16 and quantized weights
// (matmul_bf16_avx512bf16.cpp); a fast-mode linear_forward uses it when use_bf16_matmul(w).
bool cpu_has_avx512bf16();
bool use_bf16_matmul(const LinearWeight& w);
void matmul_bf16_avx512bf16(const LinearWeight& w, const float* x, int64_t tokens, float* y,
                            ThreadPool* pool);

// The same product on AMX-BF16 tiles (matmul_bf16_amx.cpp): the same roundings (activations to
// BF16, weights decoded exactly, float32 sums), ~10x the multiply-adds per cycle. Taken by a
// fast-mode linear_forward instead of matmul_bf16_avx512bf16 when the CPU has AMX-BF16, the OS
// grants the tile state, the environment does not set QFORGE_NO_AMX (to anything but 0), and
// fits_amx_bf16(w) (the format's block and 32 share a K-block).
bool cpu_has_amx_bf16();
bool fits_amx_bf16(const LinearWeight& w);
void matmul_bf16_amx(const LinearWeight& w, const float* x, int64_t tokens, float* y,
                     ThreadPool* pool);
// The AMX products of several weights over the same x (ys[i] = x ws[i]^T): x laid out once,
// every product's row tasks in one parallel loop. Only when amx_can_share_input(ws): each fits
// the AMX kernel, all have x's columns and the same K-blocks.
bool amx_can_share_input(std::span<const LinearWeight* const> ws);
void matmul_bf16_amx_shared_input(std::span<const LinearWeight* const> ws, const float* x,
                                  int64_t tokens, std::span<float* const> ys, ThreadPool* pool);
// y = silu(x gate^T) * (x up^T) (gate and up of the same shape, amx_can_share_input({gate,
// up})): both accumulated per task and combined in its output stage by silu_mul_fast, so the
// two [tokens, rows] products never travel through memory.
void matmul_bf16_amx_gated_silu(const LinearWeight& gate, const LinearWeight& up, const float* x,
                                int64_t tokens, float* y, ThreadPool* pool);

// Matrix-matrix product for every format: row tiles decoded to float32 a K-block at a time,
// then a register-blocked product (matmul.cpp).
void matmul_decoded(const LinearWeight& w, const float* x, int64_t tokens, float* y,
                    ThreadPool* pool);

// Decodes W[r0 .. r0+nr, c0 .. c0+nc) to float32 `out` with row stride `ld` through the
// layout's row (weight_formats.h): identical values to dequantize_weight_rows. c0 and nc are
// multiples of the format's block; r0 and nr are even for int4_row_pairs.
void decode_tile(const LinearWeight& w, int64_t r0, int64_t nr, int64_t c0, int64_t nc,
                 float* out, int64_t ld);

}  // namespace qf::kernels

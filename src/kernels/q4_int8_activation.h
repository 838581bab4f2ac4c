// The activation side of the 4-bit int8-activation products, shared by the AVX-512 VNNI
// kernels (matvec_q4_avx512vnni.cpp) and the AVX2 ones (matvec_q4_avx2.cpp) so that both
// quantize x identically (quantize_activation_int8's arithmetic) and read one layout; and the
// per-CPU choice between them. Internal to kernels/.
#pragma once

#include "kernels/kernels_internal.h"

#include <algorithm>
#include <cstdint>
#include <vector>

namespace qf::kernels::q4 {

constexpr int64_t kChunk = 128;  // elements per 64 bytes of nibbles
constexpr int kLanes = 16;       // 32-bit lanes per chunk; lane L covers elements 8L .. 8L+7

// One activation in kernel layout. Per chunk c: bytes [128c, 128c+64) hold q of the even
// elements, [128c+64, 128c+128) the odd ones (the order nibbles come out of a byte: low = even);
// per lane, the float scale of its 16-element block and the int32 bias -offset * (sum of its 8
// bytes), which turns an unsigned product with weights stored as value + offset into the signed
// one. Padding past n is q = 0, scale 0, bias 0.
struct QuantizedX {
  int64_t chunks = 0;
  std::vector<int8_t> q;
  std::vector<float> lane_scale;
  std::vector<int32_t> lane_bias;
  // Per pair of chunks (2p, 2p+1), the 16 block scales in the lane order of the VNNI kernel's
  // pair_dot: lane 4q + j holds block 2q + j of chunk 2p (j < 2), block 2q + j - 2 of chunk
  // 2p + 1 (j >= 2).
  std::vector<float> pair_scale;
  // The VNNI kernels' few-token chunk-pair path (whose weights are then the signed side): per
  // pair of chunks and token, 256 bytes of q + 128 (vpdpbusd's unsigned operand) in four
  // quarters A_lo, A_hi, B_lo, B_hi, where 32-bit lane L of each covers the 16-element block of
  // pair_scale's lane L: A_lo its elements 0, 2, 4, 6, A_hi 1, 3, 5, 7, B_lo 8, 10, 12, 14, B_hi
  // 9, 11, 13, 15. Filled by interleave_tokens, on CPUs with AVX-512 VNNI only.
  std::vector<uint8_t> pair_q_unsigned;
  // Natural order (quantize_x_natural) only, on CPUs with AVX-512 VNNI: per 4 chunks of 64 (256
  // elements), the 16 block scales with lane 4m + k holding block m of chunk k (the VNNI
  // row-pair kernel's order).
  std::vector<float> quad_scale;
  // Per chunk, its 8 block scales and block biases (the sums of the block's two lane biases) in
  // the order the AVX2 NVFP4 kernel's vphaddw + vpmaddwd leave blocks in: 0, 1, 4, 5, 2, 3, 6, 7.
  std::vector<float> block_scale;
  std::vector<int32_t> block_bias;
};

// block_scale lane j of a chunk holds block kHaddBlock[j].
inline constexpr int kHaddBlock[8] = {0, 1, 4, 5, 2, 3, 6, 7};

// x [n] (any n) in that layout, for weights stored as value + `offset`. Requires AVX2, FMA and
// F16C (cpu_has_avx2).
void quantize_x(const float* x, int64_t n, int offset, QuantizedX& out);

// The same quantization in natural order (the row-pair INT4 layout, whose byte holds one column
// of two rows): chunks of 64 elements, lane L covering elements 4L .. 4L+3; q, lane_scale and
// lane_bias only.
void quantize_x_natural(const float* x, int64_t n, int offset, QuantizedX& out);

// T tokens' activations in one QuantizedX, interleaved per chunk: chunk c of token t at
// (c * T + t) * kChunk in q, (c * T + t) * kLanes in lane_scale / lane_bias, (c * T + t) * 8 in
// block_scale / block_bias, and pair p of token t at (p * T + t) * kLanes in pair_scale and
// (p * T + t) * 2 * kChunk in pair_q_unsigned. With T = 1 that is QuantizedX's own layout; the
// kernels address token t of chunk c with a constant offset from one base.
void interleave_tokens(const std::vector<QuantizedX>& xs, QuantizedX& out);

// x [tokens, cols] in groups of 8, 4, 2 and 1 tokens (in that order of preference), each
// quantized and interleaved: a kernel reads the weights once per group. token_group_size: the
// size of the next group when `left` tokens remain (left >= 1).
inline int64_t token_group_size(int64_t left) {
  return left >= 8 ? 8 : left >= 4 ? 4 : left >= 2 ? 2 : 1;
}
struct TokenGroup {
  int64_t t0, size;
  QuantizedX qx;
};
std::vector<TokenGroup> quantize_token_groups(const float* x, int64_t tokens, int64_t cols,
                                              int offset);

// Software prefetch. Rows are processed 4 at a time (rows of at most 2 KB one at a time for one
// token: matvec_q4_avx2.cpp), and 4 rows are contiguous in memory: while
// a block of rows is read, the same columns of a later block (whole blocks, at least 8 KB ahead)
// are prefetched to L2, so the loads see one sequential stream well ahead; and 8 lines ahead in
// each row to L1. The hardware prefetchers alone left the 4 interleaved row streams well short
// of one core's bandwidth. One thread streaming NVFP4 from memory, GB/s of CPU time on a shared
// machine: 4096 x 14336 16.9 (L1 prefetch only) -> ~22; 8192 x 2048 (short rows: one block is
// only 4 KB, too close) 14.5 with one block ahead -> ~23.5 with 8 KB. Prefetches never fault, so
// those past the matrix's end are harmless. The NVFP4 scale codes (1/8 of the weight bytes, 4
// more streams) get the same L2 prefetch: +10% per core.
constexpr int64_t kPrefetchBytes = 512;  // L1; the L2 distance: prefetch_ahead_bytes

// Rows of at most this many bytes of codes (up to 4096 columns: Llama-3.2-1B's every product but
// down_proj, and its head) are read one row at a time by the one-token kernels (AVX2: by every
// token group): 4 such rows at a time are 4 streams inside one or two 4 KB pages, which the
// prefetchers follow worse than one sequential stream. Measured per ISA in its run(); a row's
// arithmetic is the same either way (the same bits).
constexpr int64_t kShortRowBytes = 2048;

// Rows per task: about 512 KB of weights (8x the usual matrix-vector task), at least 4 tasks
// (an MoE expert's 768 x 2048 in 4 tasks of 221 KB, not 16 of 55 KB, streamed 7% faster with
// 2 threads: each task starts its prefetch stream cold).
// The L2 lookahead runs past a task's end into rows that the other core may take (tasks are
// handed out in turn), where it is wasted and leaves that core's first rows unprefetched; long
// tasks make that rare. With 64 KB tasks two threads streamed 4096 x 14336 at ~27 GB/s while a
// STREAM read reached 44-47 in the same minutes; with 512 KB tasks 34 GB/s (STREAM 31 then).
inline int64_t q4_rows_per_task(const LinearWeight& w) {
  return std::min(matvec_rows_per_task(w, 4) * 8, std::max<int64_t>(4, w.rows / 4 / 4 * 4));
}

// The products' driver: x quantized in token groups once, then for each row task [r0, r1) and
// each group g, row_range(r0, r1, g, y + g.t0 * w.rows) (the CPU's kernels: y[t * rows + r] for
// its rows r and the group's tokens t), then the per-tensor factor on the task's outputs.
template <class RowRange>
void run_row_tasks(const LinearWeight& w, const float* x, int64_t tokens, float* y,
                   ThreadPool* pool, int offset, float factor, const RowRange& row_range) {
  const std::vector<TokenGroup> groups = quantize_token_groups(x, tokens, w.cols, offset);
  const int64_t rows = w.rows;
  for_row_tasks(pool, rows, q4_rows_per_task(w), [&](int64_t r0, int64_t r1) {
    for (const TokenGroup& g : groups) row_range(r0, r1, g, y + g.t0 * rows);
    for (int64_t t = 0; t < tokens; ++t)
      for (int64_t i = r0; i < r1; ++i) y[t * rows + i] *= factor;
  });
}

// The row-pair INT4 layout's driver: each token's activation quantized in natural order (offset
// 8), then for each row task and each group of `group` tokens (the rest one at a time), the
// task's rows 2 at a time for a group, 4 then 2 for one token:
// rows_dot(qx, T, r, pairs, ahead, y + t0 * rows + r) for tokens t0 .. t0+T-1 (qx: their
// activations, consecutive), `pairs` = 2 or 1 pairs of rows from row r, outputs y[t * rows + i].
// With `group` 1 the weights are read once per token.
template <class RowsDot>
void run_row_pair_tasks(const LinearWeight& w, const float* x, int64_t tokens, float* y,
                        ThreadPool* pool, int group, const RowsDot& rows_dot) {
  // 4 rows are 2 * cols bytes, as 4 rows of cols / 2 bytes in the nibble layouts.
  const int64_t ahead = prefetch_ahead_bytes(w.cols / 2);
  std::vector<QuantizedX> qx(static_cast<size_t>(tokens));
  for (int64_t t = 0; t < tokens; ++t) quantize_x_natural(x + t * w.cols, w.cols, 8, qx[size_t(t)]);
  for_row_tasks(pool, w.rows, q4_rows_per_task(w), [&](int64_t r0, int64_t r1) {
    for (int64_t t0 = 0; t0 < tokens;) {
      const int T = tokens - t0 >= group ? group : 1;
      float* yt = y + t0 * w.rows;
      int64_t r = r0;
      if (T == 1)
        for (; r + 4 <= r1; r += 4) rows_dot(&qx[size_t(t0)], 1, r, 2, ahead, yt + r);
      for (; r < r1; r += 2) rows_dot(&qx[size_t(t0)], T, r, 1, ahead, yt + r);
      t0 += T;
    }
  });
}

// The AVX2 products (matvec_q4_avx2.cpp), for CPUs without AVX-512 VNNI where cpu_has_avx2();
// the same shapes as the VNNI ones. x [tokens, cols] -> y [tokens, rows].
void matvec_nvfp4_avx2(const LinearWeight& w, const float* x, int64_t tokens, float* y,
                       ThreadPool* pool);
void matvec_mxfp4_avx2(const LinearWeight& w, const float* x, int64_t tokens, float* y,
                       ThreadPool* pool);
void matvec_int4_packed32_avx2(const LinearWeight& w, const float* x, int64_t tokens, float* y,
                               ThreadPool* pool);
void matvec_int4_row_pairs_avx2(const LinearWeight& w, const float* x, int64_t tokens, float* y,
                                ThreadPool* pool);

}  // namespace qf::kernels::q4

// NVFP4 and MXFP4 weights repacked 16 rows at a time (WeightFormat::nvfp4_rows16,
// mxfp4_rows16) for the AVX-512 VNNI one-stream kernel (matvec_fp4_rows16_avx512vnni.cpp). The
// stored layout is read row by row (or 4 rows at a time: 4 streams) with the scales in a
// separate stream, and each 64-byte load of codes covers 128 elements of one row, whose per-lane
// sums then need shuffles to meet their scales; here one block holds a scale block of 16 rows
// with their 16 scales, so a 32-bit lane is one row from the load to the accumulator: 4 vpdpbusd
// per 16 x 16 weights with the activation's 4 bytes broadcast, one scale conversion for 16
// rows, no reduction at the end.
#pragma once

#include "kernels/linear.h"

#include <cstdint>
#include <vector>

namespace qf::kernels {

inline constexpr int64_t kRows16 = 16;

// Whether f is one of the repacked layouts.
bool is_fp4_rows16(WeightFormat f);

// Elements per scale block (NVFP4 16, MXFP4 32) of a stored or repacked E2M1 format.
int64_t fp4_rows16_block(WeightFormat f);

// One scale block of 16 rows (B = 16 or 32 elements): B / 8 registers of 64 bytes, where
// register j's lane k (4 bytes) holds row k's code bytes 4j .. 4j+3 of the block (elements 8j ..
// 8j+7; element 2i in the low nibble), then the 16 rows' scale codes (E4M3 or E8M0): 144 or 272
// bytes. A group of 16 rows is its blocks one after another (cols / B of them); groups follow in
// row order.
inline constexpr int64_t fp4_rows16_block_bytes(int64_t block) { return 8 * block + 16; }

// Whether w, NVFP4 or MXFP4 in its stored layout, can be repacked and this CPU has the kernel
// that reads the repacked layout (AVX-512 VNNI and VBMI): rows a multiple of 16, cols of the
// block.
bool fp4_rows16_wanted(const LinearWeight& w);

// Bytes of w repacked: its codes and its block scales.
uint64_t fp4_rows16_bytes(const LinearWeight& w);

// dst (fp4_rows16_bytes(w)) <- w in the layout above. The caller then points a copy of w at dst
// with fp4_rows16_weight.
void fp4_repack_rows16(const LinearWeight& w, uint8_t* dst);

// w (stored NVFP4 / MXFP4) as the repacked weight whose bytes are at `repacked`: format
// nvfp4_rows16 / mxfp4_rows16, data = repacked, block_scales null (the scales are in the blocks).
LinearWeight fp4_rows16_weight(const LinearWeight& w, const void* repacked);

// Rows [r0, r0 + nr), columns [c0, c0 + nc) (multiples of the block) of a repacked weight as a
// stored NVFP4 / MXFP4 weight of nr x nc (same global scale) whose codes and scales live in
// `scratch` (resized; the view is valid while scratch is unchanged): how every reader but the
// repacked kernel reads it, with the stored layout's own code.
LinearWeight fp4_rows16_view(const LinearWeight& w, int64_t r0, int64_t nr, int64_t c0,
                             int64_t nc, std::vector<uint8_t>& scratch);

}  // namespace qf::kernels

// 4-bit weights repacked 16 rows at a time (WeightFormat::nvfp4_rows16, mxfp4_rows16,
// int4_row_pairs_rows16, int4_packed32_rows16) for the AVX-512 VNNI one-stream kernel
// (matvec_q4_rows16_avx512vnni.cpp). The stored layouts are read row by row (or 4 rows at a
// time: 4 streams) with the scales in a separate stream, and each 64-byte load of codes covers
// 128 elements of one row, whose per-lane sums then need shuffles to meet their scales; here one
// block holds a scale block of 16 rows with their 16 scales, so a 32-bit lane is one row from the
// load to the accumulator: 4 vpdpbusd per 16 x 16 weights with the activation's 4 bytes
// broadcast, one scale conversion for 16 rows, no reduction at the end.
#pragma once

#include "kernels/linear.h"

#include <cstdint>
#include <vector>

namespace qf::kernels {

inline constexpr int64_t kRows16 = 16;

// Whether f is one of the repacked layouts.
bool is_q4_rows16(WeightFormat f);

// The stored layout a repacked one comes from (f itself for the others).
WeightFormat q4_rows16_source(WeightFormat f);

// Elements per scale block of a stored or repacked 4-bit weight: NVFP4 16, MXFP4 32, INT4 its
// group.
int64_t q4_rows16_block(const LinearWeight& w);

// Bytes per scale of the repacked layout: 1 (E4M3, E8M0 codes) or 4 (INT4's float scales).
int q4_rows16_scale_bytes(WeightFormat f);

// One scale block of 16 rows (B elements, a multiple of 16): B / 8 registers of 64 bytes, where
// register j's lane k (4 bytes) holds row k's code bytes 4j .. 4j+3 of the block (elements 8j ..
// 8j+7; element 2i in the low nibble), then the 16 rows' scales (`scale_bytes` each): NVFP4 144
// bytes, MXFP4 272, INT4 with groups of 128 1088. Codes are E2M1 as stored; INT4 q + 8
// (unsigned, compressed-tensors' nibbles; ModelOpt's signed ones with bit 3 flipped). A group of
// 16 rows is its blocks one after another (cols / B of them); groups follow in row order.
inline constexpr int64_t q4_rows16_block_bytes(int64_t block, int scale_bytes) {
  return 8 * block + 16 * scale_bytes;
}
int64_t q4_rows16_block_bytes(const LinearWeight& w);
// Bytes of one group of 16 rows (its cols / block scale blocks) of a stored or repacked weight.
int64_t q4_rows16_group_bytes(const LinearWeight& w);

// Whether w, NVFP4, MXFP4 or INT4 (either layout) as stored, can be repacked and this CPU has
// the kernel that reads the repacked layout (AVX-512 VNNI and VBMI): rows a multiple of 16, cols
// of the block, INT4 groups a multiple of 16.
bool q4_rows16_wanted(const LinearWeight& w);

// Bytes of w (stored or repacked) in the repacked layout: its codes and its scales.
uint64_t q4_rows16_bytes(const LinearWeight& w);

// dst (q4_rows16_bytes(w)) <- w in the layout above. The caller then points a copy of w at dst
// with q4_rows16_weight.
void q4_repack_rows16(const LinearWeight& w, uint8_t* dst);

// w (stored) as the repacked weight whose bytes are at `repacked`: the repacked format, data =
// repacked, block_scales / scales null (the scales are in the blocks; owned_scales released).
LinearWeight q4_rows16_weight(const LinearWeight& w, const void* repacked);

// Rows [r0, r0 + nr) of a repacked weight, over the whole scale blocks that cover columns
// [c0, c0 + nc), as a stored weight (same global scale and group) whose codes and scales live in
// `scratch` (resized; the view is valid while scratch is unchanged); `offset` (out) is where
// column c0 lies in it (c0 mod the block). How every reader but the repacked kernel reads it,
// with a stored layout's own code. NVFP4 and MXFP4 come back as stored; INT4 as
// compressed-tensors' int32 words (int4_packed32) whatever it was stored as: the same values
// (matvec_int4_row_pairs turns them back into row pairs for its summation order).
LinearWeight q4_rows16_view(const LinearWeight& w, int64_t r0, int64_t nr, int64_t c0,
                            int64_t nc, std::vector<uint8_t>& scratch, int64_t& offset);
// The same for whole rows (offset 0).
LinearWeight q4_rows16_view(const LinearWeight& w, int64_t r0, int64_t nr,
                            std::vector<uint8_t>& scratch);

}  // namespace qf::kernels

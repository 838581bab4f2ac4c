// NVFP4 weights repacked 16 rows at a time (WeightFormat::nvfp4_rows16) for the AVX-512 VNNI
// one-stream kernel (matvec_nvfp4_rows16_avx512vnni.cpp). The stored layout is read row by
// row (or 4 rows at a time: 4 streams) with the scales in a separate stream, and each 64-byte
// load of codes covers 128 elements of one row, whose per-lane sums then need shuffles to meet
// their scales; here one 144-byte block holds 16 elements of 16 rows with their 16 scales, so a
// 32-bit lane is one row from the load to the accumulator: 4 vpdpbusd per 16 x 16 weights with
// the activation's 4 bytes broadcast, one scale conversion for 16 rows, no reduction at the end.
#pragma once

#include "kernels/linear.h"

#include <cstdint>
#include <vector>

namespace qf::kernels {

inline constexpr int64_t kNvfp4Rows16 = 16;
// One 16-element block of 16 rows: bytes [0, 64) hold in lane k (4 bytes) row k's code bytes
// 0-3 of the block (elements 0-7; element 2j in the low nibble), bytes [64, 128) its code bytes
// 4-7 (elements 8-15), bytes [128, 144) the 16 rows' E4M3 block scales. A group of 16 rows is
// its blocks one after another (cols / 16 x 144 bytes); groups follow in row order.
inline constexpr int64_t kNvfp4Rows16BlockBytes = 144;

// Whether w, NVFP4 in its stored layout, can be repacked and this CPU has the kernel that reads
// the repacked layout (AVX-512 VNNI and VBMI): rows a multiple of 16, cols of 16.
bool nvfp4_rows16_wanted(const LinearWeight& w);

// dst (rows x cols / 2 + rows x cols / 16 bytes: the codes and block scales) <- w in the layout
// above. The caller then points a copy of w at dst with nvfp4_rows16_weight.
void nvfp4_repack_rows16(const LinearWeight& w, uint8_t* dst);

// w (stored NVFP4) as the repacked weight whose bytes are at `repacked`: format nvfp4_rows16,
// data = repacked, block_scales null (the scales are inside the blocks).
LinearWeight nvfp4_rows16_weight(const LinearWeight& w, const void* repacked);

// Rows [r0, r0 + nr), columns [c0, c0 + nc) (multiples of 16) of a repacked weight as a stored
// NVFP4 weight of nr x nc (same global scale) whose codes and scales live in `scratch` (resized;
// the view is valid while scratch is unchanged): how every reader but the repacked kernel
// reads it, with the stored layout's own code.
LinearWeight nvfp4_rows16_view(const LinearWeight& w, int64_t r0, int64_t nr, int64_t c0,
                               int64_t nc, std::vector<uint8_t>& scratch);

}  // namespace qf::kernels

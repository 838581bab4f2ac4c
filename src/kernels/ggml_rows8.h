// GGUF Q4_0 weights repacked 8 rows at a time for the AVX2 kernel (kernels/matvec_ggml_avx2.cpp):
// the one-row kernel converts one f16 scale and unpacks 16 nibble bytes per 32 weights per row,
// and is compute-bound at about half the memory's rate on AVX2 CPUs; 8 rows interleaved share the
// scale conversion (one vcvtph2ps for 8 rows), the activation loads and the multiply-add.
#pragma once

#include "kernels/linear.h"

#include <cstdint>
#include <vector>

namespace qf::kernels {

inline constexpr int64_t kGgmlRows8 = 8;
// Bytes of one 32-element block of 8 rows: their 8 f16 scales, then 4 x 32 bytes where vector v,
// lane k (4 bytes) holds row k's quant bytes 4v .. 4v+3 (elements 4v..4v+3 in the low nibbles,
// 16+4v .. 16+4v+3 in the high ones).
inline constexpr int64_t kGgmlRows8BlockBytes = 16 + 4 * 32;

// Whether w, a ggml Q4_0 weight in its stored layout, has at least 8 rows and this CPU has the
// AVX2 kernel: then ggml_repack_rows8 pays. AVX-512 VNNI CPUs too: their Q4_0 kernel
// (matvec_ggml_avx512vnni.cpp) reads the stored 18-byte blocks of 4 rows at a time, 4 streams,
// while the 8 rows' blocks are one stream with the scale conversion shared (Zen 4, llama-1b
// Q4_0 GGUF decode, 2 threads: 39-41 -> 60-62 tok/s in alternating runs).
bool ggml_rows8_wanted(const LinearWeight& w);

// dst (w.stored_bytes() bytes) <- w's blocks with rows [0, rows / 8 * 8) in groups of 8 (group g
// at g * 8 * row bytes, its blocks one after another in the layout above), the remaining rows as
// stored. The caller then sets w.data = dst and w.ggml_rows8 = true.
void ggml_repack_rows8(const LinearWeight& w, uint8_t* dst);

// Row r's blocks in the stored layout: a pointer into w.data, or, for a repacked row, into
// scratch (resized as needed) rebuilt from the groups.
const uint8_t* ggml_stored_row(const LinearWeight& w, int64_t r, std::vector<uint8_t>& scratch);

}  // namespace qf::kernels

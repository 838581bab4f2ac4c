// Lossless repacking between qforge's NVFP4 / MXFP4 tensors (formats/nvfp4.h, mxfp4.h: codes in
// the "pairs" order, element 2k low nibble and 2k+1 high; one scale byte per block in a separate
// [rows, cols/block] tensor) and ggml's NVFP4 / MXFP4 blocks (formats/ggml_quants.h:
// "split-halves" nibbles, scales inside each block). This is what llama.cpp's
// convert_hf_to_gguf does to a ModelOpt checkpoint (shared/specs/engine-formats.md §3.8): the
// codes and the E4M3 bits are kept as they are, and NVFP4's per-tensor weight_scale_2 stays
// outside the blocks, written as the F32 `<name>.scale` tensor llama.cpp multiplies the matmul
// output by. ggml decodes kvalue * half-scale = E2M1 * scale, so the values are unchanged:
// ggml's dequantized block times weight_scale_2 equals nvfp4_dequantize bit for bit.
#pragma once

#include <cstdint>

namespace qf {

// packed: [rows, cols/2] pairs codes; scales: [rows, cols/16] E4M3 -> out: rows * cols/64 ggml
// NVFP4 blocks (36 bytes each). cols % 64 == 0 (ggml's block is 64 wide). Throws qf::Error for a
// bad shape or a scale byte ggml cannot hold: the sign bit set or 0x7F (NaN), which the
// converter would silently turn into a different value.
void nvfp4_to_ggml(const uint8_t* packed, const uint8_t* scales, int64_t rows, int64_t cols,
                   uint8_t* out);
// The inverse: ggml NVFP4 blocks -> pairs codes and E4M3 scales (scale bytes copied).
void ggml_to_nvfp4(const uint8_t* blocks, int64_t rows, int64_t cols, uint8_t* packed,
                   uint8_t* scales);

// packed: [rows, cols/2] pairs codes; scales: [rows, cols/32] E8M0 -> out: rows * cols/32 ggml
// MXFP4 blocks (17 bytes each). cols % 32 == 0. Throws qf::Error for a bad shape or a 0xFF
// (NaN) scale, which ggml's validator rejects.
void mxfp4_to_ggml(const uint8_t* packed, const uint8_t* scales, int64_t rows, int64_t cols,
                   uint8_t* out);
void ggml_to_mxfp4(const uint8_t* blocks, int64_t rows, int64_t cols, uint8_t* packed,
                   uint8_t* scales);

}  // namespace qf

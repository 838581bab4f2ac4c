// Importance-weighted quantization into ggml's block types, and the frozen-scale grid that
// GPTQ rounds to.
//
// ggml_quantize_row_weighted gives exactly the bytes of ggml's
// `quantize_<type>(src, dst, 1, n_per_row, quant_weights)` (ggml/src/ggml-quants.c), which is
// what llama-quantize calls with an importance matrix: Q4_0 (make_qx_quants over 19 scales,
// weights qw * sqrt(sigma2 + x^2), sigma2 the row's mean square), Q4_K / Q5_K (make_qkx3_quants
// per 32 with the same weights, super-scales by make_qp_quants weighted by each sub-block's
// weight sum), Q6_K (make_qx_quants per 16 weighted by qw alone). ggml ignores the weights of
// Q8_0, MXFP4 and NVFP4: for those it gives the reference bytes, as ggml does.
//
// qforge_quantize_*_weighted are qforge's own searches for the FP4 types (ggml has none):
// per block, among the scales the format can store, the one with the least importance-weighted
// squared error.
#pragma once

#include "formats/ggml_types.h"

#include <cstdint>
#include <vector>

namespace qf {

// Whether ggml's quantize_<type> reads the importance (Q4_0, Q4_K, Q5_K, Q6_K among the types
// qforge writes).
bool ggml_type_uses_importance(GgmlType type);

// One row of n_per_row floats (a multiple of the block) to its blocks, weighted by
// `importance` [n_per_row] (>= 0, finite) when the type uses it; null importance gives the
// reference quantizer's bytes (as ggml's quantize_<type> with null weights). Float types and
// types without a quantizer throw qf::Error.
void ggml_quantize_row_weighted(GgmlType type, const float* x, uint8_t* out, int64_t n_per_row,
                                const float* importance);

// MXFP4 (blocks of 32): per block the E8M0 exponent among ggml's choice e0 and e0 - 1, e0 + 1
// (tried in that order, strict improvement wins) minimising sum_i w_i (x_i - q_i)^2; nibbles by
// ggml's nearest rule. With every w_i equal the error can only match or beat ggml's.
void qforge_quantize_mxfp4_weighted(const float* x, uint8_t* out, int64_t n, const float* w);

// NVFP4 as ggml stores it (blocks of 64, UE4M3 per 16) with a tensor scale g (the `.scale`
// tensor; the value is E2M1 * E4M3(d) * g): per 16 the E4M3 code among the 126 finite positive
// ones minimising dw^T H dw, dw = x - q, where H is the 16x16 block Hessian `h` ([n/16][256],
// row-major) when given, else diag(w) (`w` [n]); the first minimum wins. An all-zero block
// gets code 0. `w` may be null when h is given.
void qforge_quantize_nvfp4_weighted(const float* x, uint8_t* out, int64_t n, float g,
                                    const float* w, const float* h);

// The grid a quantized row is frozen to: element i may take the values
// scale[i] * level(L) - offset[i] for codes L in [0, levels), where level is the code itself
// (integer types, offsets fold in Q4_0's -8 and Q6_K's -32) or ggml's FP4 kvalue (MXFP4,
// NVFP4: `fp4`). GPTQ rounds each column to it, then ggml_pack_codes writes the chosen codes
// into the blocks, whose scale bytes stay as they are.
struct GgmlFrozenRow {
  GgmlType type = GgmlType::Q4_0;
  bool fp4 = false;
  int levels = 0;
  std::vector<float> scale, offset;  // [n]
  std::vector<uint8_t> codes;        // [n] the codes chosen so far (initially the row's own)
};

// Reads the scales (and the current codes) of one quantized row of n elements. For NVFP4, g
// is the tensor scale the row's values are multiplied by (1 for other types).
void ggml_frozen_row(GgmlType type, const uint8_t* row, int64_t n, float g, GgmlFrozenRow& out);
// The code of element i nearest to x (first on ties) and its value.
uint8_t ggml_frozen_round(const GgmlFrozenRow& r, int64_t i, float x, float* value);
// Writes r.codes into the row's blocks, keeping their scale bytes.
void ggml_pack_codes(const GgmlFrozenRow& r, uint8_t* row);

}  // namespace qf

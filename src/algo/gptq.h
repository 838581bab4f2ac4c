// GPTQ (ModelOpt `gptq`, llm-compressor GPTQModifier; specs modelopt-nvfp4 §5.7,
// engine-formats §2.7): quantizes a weight column by column, pushing each column's rounding
// error onto the columns not yet quantized through the inverse Hessian of the layer's inputs.
#pragma once

#include "algo/layer_stats.h"
#include "algo/round_to_nearest.h"
#include "formats/quantized_tensor.h"
#include "formats/weight_rows.h"

#include <cstdint>
#include <vector>

namespace qf {

class ThreadPool;

struct GptqOptions {
  RtnOptions format;         // nvfp4, mxfp4, int4 (group = block, default 128) or fp8
  int block_size = 128;      // columns per lazy-update block
  double damp = 0.01;        // fraction of mean(diag H) added to the diagonal
};

struct GptqResult {
  QuantizedTensor tensor;        // same layout and scales as quantize_rtn would give
  bool fell_back_to_rtn = false; // H not positive definite after damping: plain RTN codes
  int64_t dead_columns = 0;      // inputs with zero variance or all-zero weight columns
};

// Quantizes w [out, in] with the Hessian H = 2 XtX / tokens built from stats.xtx ([in*in],
// row-major) and stats.tokens (> 0); no other field is read.
// Scales are frozen before the sweep: they are exactly quantize_rtn's scales of the original w
// (NVFP4: block scales under the global scale of `tensor_amax`, the fused group's amax). Then:
//   dead columns (H[i,i] == 0 or W[:,i] all zero): H row/col i zeroed, H[i,i] = 1;
//   H += damp * mean(diag H) * I;  U = upper Cholesky factor of H^-1 (double precision);
//   for each block of block_size columns, for each column j: q = Q(w_j) with the frozen scales,
//   err = (w_j - q) / U[j,j], w_k -= err * U[j,k] for the later columns of the block, then the
//   block's errors update all later columns at once.
// Rows are independent, so the sweep is split by row tiles: the bytes do not depend on the
// thread count. Memory: 8 in^2 bytes (H, double) + 4 in^2 (U) + 4 out*in (float weights).
// With a diagonal H the result equals quantize_rtn bit for bit.
// Throws qf::Error for a bad shape or missing statistics.
GptqResult quantize_gptq(const WeightRows& w, const LinearStats& stats, const GptqOptions& options,
                         float tensor_amax, ThreadPool& pool);

// GPTQ's Hessian of w [rows, n] (row-major float32): H = 2 XtX / tokens, dead columns (H[i,i]
// == 0 or W[:,i] all zero) zeroed with H[i,i] = 1 and counted in *dead_columns, then
// H += damp * mean(diag H) * I. Shared by every GPTQ sweep (qforge's formats and ggml's).
std::vector<double> gptq_damped_hessian(const std::vector<float>& w, int64_t rows, int64_t n,
                                        const std::vector<double>& xtx, int64_t tokens,
                                        double damp, int64_t* dead_columns);

// The same sweep over a float32 weight [rows, cols] against given frozen scales (`frozen`:
// format, shape, block and scales set; its codes are replaced), with XtX and the token count.
// Used by quantize_gptq and by AWQ-then-GPTQ (scaled weights, scaled statistics).
GptqResult gptq_with_scales(std::vector<float> w, QuantizedTensor frozen,
                            const std::vector<double>& xtx, int64_t tokens,
                            const GptqOptions& options, ThreadPool& pool);

}  // namespace qf

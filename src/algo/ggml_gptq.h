// GPTQ onto ggml's block types with frozen scales: the scales (and Q4_K/Q5_K mins) of an
// already quantized GGUF tensor stay, and each column's codes are chosen in turn on that frozen
// grid (formats/ggml_weighted.h GgmlFrozenRow: Q4_0 (L-8)d, Q8_0 Ld, Q4_K/Q5_K scale*L - min
// per 32, Q6_K (L-32)d per 16, MXFP4 and NVFP4 E2M1 x scale), the rounding error of each column
// pushed onto the columns not yet quantized through the inverse Hessian of the layer's inputs
// (the same sweep as algo/gptq.h, whose frozen grids are qforge's own formats).
#pragma once

#include "formats/ggml_types.h"

#include <cstdint>
#include <vector>

namespace qf {

class ThreadPool;

struct GgmlGptqOptions {
  int block_size = 128;  // columns per lazy-update block
  double damp = 0.01;    // fraction of mean(diag H) added to the diagonal
};

struct GgmlGptqReport {
  bool fell_back = false;     // H not positive definite after damping: `bytes` left as given
  int64_t dead_columns = 0;   // inputs with zero variance or all-zero weight columns
};

// w: the float weight [rows, cols] in the row order of `bytes` (GGUF order); bytes: rows
// quantized rows of `type` whose scale bytes are kept and whose codes are replaced. g: NVFP4's
// tensor scale (1 otherwise). H = 2 xtx / tokens (xtx [cols * cols] row-major, tokens > 0).
// Rows are independent: split by row tiles, the bytes do not depend on the thread count.
// Memory: 8 cols^2 (H) + 4 cols^2 (U) + the weight. Throws qf::Error for bad shapes.
GgmlGptqReport ggml_gptq(GgmlType type, std::vector<float> w, int64_t rows, int64_t cols,
                         uint8_t* bytes, float g, const std::vector<double>& xtx, int64_t tokens,
                         const GgmlGptqOptions& options, ThreadPool& pool);

}  // namespace qf

// ModelOpt `local_hessian` (specs modelopt-nvfp4 §5 table, §5.3): the static NVFP4 per-block FP8
// scale sweep weighted by each 16-column block's input Hessian instead of plain squared error.
#pragma once

#include "algo/layer_stats.h"
#include "formats/quantized_tensor.h"
#include "formats/weight_rows.h"

#include <cstdint>
#include <vector>

namespace qf {

class ThreadPool;

// The sweep's choice for one block of 16 values x (signed) under the 16x16 block Hessian h
// (row-major, symmetric): among the 126 finite positive E4M3 codes (ascending), c = v / 448,
// scale = c * global_amax / 6, minimise dw^T h dw with dw = x - sign(x) e2m1(|x| / scale) scale
// (float32; strict < keeps the first). With h = I this is nvfp4_fp8_sweep_block bit for bit.
uint8_t nvfp4_local_hessian_block(const float* x, const float* h, float global_amax);

// Quantizes w [out, in] (in % 16 == 0) to NVFP4 through the static-block path (specs §1.2):
// each block's code from nvfp4_local_hessian_block with H_b = the diagonal 16x16 block of
// stats.xtx / stats.tokens (only xtx and tokens are read), block amax = global_amax * c, then
// nvfp4_static_quantize. A block whose H_b diagonal is all zero (inputs never active) has no
// output error to weigh and falls back to the plain FP8 sweep. global_amax: the fused group's
// max |w| (> 0, finite). block_amax (optional out): [rows, in/16]. Deterministic; split by rows.
// Cost: 126 * 16 * 16 multiply-adds per block. Throws qf::Error for a bad shape or statistics.
QuantizedTensor quantize_nvfp4_local_hessian(const WeightRows& w, const LinearStats& stats,
                                             float global_amax, ThreadPool& pool,
                                             std::vector<float>* block_amax = nullptr);

}  // namespace qf

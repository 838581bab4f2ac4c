// MSE amax search (ModelOpt `mse`, specs modelopt-nvfp4 §5.2) and the static NVFP4 per-block FP8
// scale sweep (`mse` with fp8_scale_sweep, §5.3): weight-only, no calibration data needed.
#pragma once

#include "algo/round_to_nearest.h"
#include "formats/quantized_tensor.h"
#include "formats/weight_rows.h"

#include <cstdint>
#include <vector>

namespace qf {

class ThreadPool;

struct MseOptions {
  // ModelOpt's grid: linspace(start, stop, ceil((stop - start) / step) + 1) = 39 multipliers of
  // the max amax from 0.25 to 4 (float32, as torch.linspace computes them).
  float start = 0.25f;
  float stop = 4.0f;
  float step = 0.1f;
  // ModelOpt's 39-point grid misses 1.0 (0.9408, 1.0395), so its mse can lose to max. We add
  // 1.0 in sorted position (deviation, on by default): mse is then never worse than max.
  bool include_one = true;
};

// The candidate multipliers in ascending order (ties in the search go to the earlier one).
std::vector<float> mse_multipliers(const MseOptions& options);

// NVFP4 dynamic-block: the per-tensor (global) amax among multiplier * amax0 minimising
// sum (W - Q(W))^2, the block scales recomputed dynamically for each candidate (first minimum
// wins). amax0 is the tensor's max |w|. For a fused group, take the max of the members' results
// and pass it to quantize_rtn as the group amax (ModelOpt unifies after calibration).
float nvfp4_mse_global_amax(const WeightRows& w, float amax0, const MseOptions& options,
                            ThreadPool& pool, float* chosen_multiplier = nullptr);

// MSE-calibrated quantization of one tensor in any format:
//   nvfp4: quantize_rtn with the global amax nvfp4_mse_global_amax chose (group_amax > 0
//          overrides it: the group's unified amax);
//   int4 / mxfp4: each block's amax searched on its own (candidate scale from
//          multiplier * block amax), fp8: each row's amax; then codes with those scales.
// Deterministic; split by rows.
QuantizedTensor quantize_mse(const WeightRows& w, const RtnOptions& format,
                             const MseOptions& options, ThreadPool& pool, float group_amax = 0.f);

// NVFP4 static-block FP8 scale sweep: for each 16-block, among the 126 finite positive E4M3
// values v (codes 1..126, ascending), c = v / 448, scale = c * global_amax / 6, minimise
// sum (|w| - e2m1(|w| / scale) * scale)^2 (float32; strict < keeps the first). The block amax is
// then global_amax * c_best and the tensor is exported through the static path (specs §1.2,
// nvfp4_static_quantize), which reconstructs code c_best. global_amax: the group's max |w|.
// block_amax (optional out): [rows, cols/16].
QuantizedTensor quantize_nvfp4_fp8_sweep(const WeightRows& w, float global_amax, ThreadPool& pool,
                                         std::vector<float>* block_amax = nullptr);

// The sweep's choice for one block of 16 values (the E4M3 code 1..126), for tests.
uint8_t nvfp4_fp8_sweep_block(const float* x, float global_amax);

}  // namespace qf

// Four Over Six ("4/6") NVFP4 weights (ModelOpt 0.46 `NVFP4_FOUR_OVER_SIX_CFG`, arXiv:2512.02010;
// specs moe-hybrid §1): each 16-block either keeps its largest magnitude mapped to 6 (M=6, the
// block amax x 1.0) or maps it to 4 (M=4, x 1.5), whichever fake-quantizes the block with the
// smaller squared error. The FP8 block scales are normalised to 256 instead of 448, so an M=4
// block holding the tensor's amax gets code 1.5 * 256 = 384 and is never clipped, and
// weight_scale_2 = global_amax / 1536. Weight-only and data-free; the checkpoint is an ordinary
// NVFP4 one (nothing marks 4/6 but the scales' range).
#pragma once

#include "formats/quantized_tensor.h"
#include "formats/weight_rows.h"

#include <cstdint>
#include <vector>

namespace qf {

class ThreadPool;

// ModelOpt's candidate multipliers: linspace(1.0, 1.5, 2), tried in this order.
inline constexpr float kFourOverSixM6 = 1.0f;
inline constexpr float kFourOverSixM4 = 1.5f;

// The selection's squared error of one block x[0, 16) fake-quantized with block amax
// `cand_amax` under the (group) `global_amax`, as ModelOpt's calibration computes it
// (fp4_kernel.py `static_blockwise_fp4_fake_quant` with fp8_max_for_normalization 256, then
// F.mse_loss summed over the block), all in float32:
//   s  = cand_amax / 6,  A = (global_amax * 1.75) / 6    (div_by_constant; A <= 2^-24 -> 1)
//   sc = 448 / A  (gpu: IEEE, the CUDA extension's fake_e4m3fy; cpu: fl(1/A) * 448, fp8_eager)
//   s' = float(e4m3(min(s * sc, 448))) * fl(1 / sc)     (a scale that flushes to 0 zeroes x)
//   xq = sign(x) * e2m1_rne(|x| / s') * s'             (IEEE division; Triton's div.full is
//                                                        within 2 ulp of it)
//   err = sum_k (x_k - xq_k)^2: lanes k and k + 8 added first, then the 8 lanes in order
//         (the order of PyTorch's CPU sum over a row of 16 floats).
float four_over_six_block_error(const float* x, float cand_amax, float global_amax);

// Whether block x[0, 16) takes M=4: four_over_six_block_error at 1.5 * bamax is strictly below
// the one at bamax (torch.argmin keeps the first candidate on ties, so ties and all-zero blocks
// keep M=6). bamax = max |x|.
bool four_over_six_block_m4(const float* x, float global_amax);

struct FourOverSixCounts {
  int64_t blocks = 0;
  int64_t m4_blocks = 0;  // blocks that chose M=4
};

// Quantizes w [out, in] (in % 16 == 0) with Four Over Six: per block the choice above, block
// amax = bamax or fl(1.5 * bamax), then the static-block export with FP8 normalisation 256
// (specs moe-hybrid §1.3): weight_scale_2 = global_amax / 1536, s8 = e4m3(clamp((amax/6 * 256) /
// (global_amax/6), 2^-9, 448)), codes x / (s8 * weight_scale_2) in E2M1 round-half-even.
// global_amax: the fused group's max |w| (q/k/v, gate/up share it), >= every block's amax; 0
// (an all-zero tensor) gives weight_scale_2 1.0, block scales 1.0 and zero codes, as the plain
// NVFP4 path does, where ModelOpt would write NaN. Deterministic, split by rows.
// block_amax (optional out): [out, in/16]. Throws qf::Error for a bad shape or a global amax
// that is negative or not finite.
QuantizedTensor quantize_nvfp4_four_over_six(const WeightRows& w, float global_amax,
                                             ThreadPool& pool,
                                             std::vector<float>* block_amax = nullptr,
                                             FourOverSixCounts* counts = nullptr);

}  // namespace qf

// AWQ (ModelOpt awq_lite + awq_clip = awq_full, specs modelopt-nvfp4 §5.4-5.5; llm-compressor's
// AWQModifier, engine-formats §2.8): per-input-channel scales s that move quantization error
// away from the channels with large activations, then an optional clipping search.
// The Linear computes y = (x * pqs) Q(W s)^T with pqs = 1/s; pqs is exported as
// `pre_quant_scale` or folded into the norm that produces x.
#pragma once

#include "algo/layer_stats.h"
#include "algo/round_to_nearest.h"
#include "formats/quantized_tensor.h"
#include "formats/weight_rows.h"

#include <cstdint>
#include <span>
#include <vector>

namespace qf {

class ThreadPool;

struct AwqOptions {
  RtnOptions format;           // nvfp4 (NVFP4_AWQ), int4 (W4A16_AWQ, group 128), mxfp4, fp8
  float alpha_step = 0.1f;     // alpha grid 0, step, ..., 1 (11 values)
  bool clip = true;            // awq_clip after the scale search (ModelOpt awq_full)
  float min_clip_ratio = 0.5f; // clip ratios min, min + step, ..., < 1, then 1.0
  float clip_step = 0.05f;
  int64_t clip_max_samples = 64;  // sample rows the per-block clip search uses (ModelOpt: 64)
  // pre_quant_scale is rounded to this dtype (ModelOpt stores it in the weight dtype) before the
  // weights are scaled by its reciprocal, so the stored scale is exactly the one applied.
  DType pre_quant_scale_dtype = DType::F32;
};

struct AwqResult {
  std::vector<float> pre_quant_scale;          // [in] = 1/s (x_new = x * pqs)
  float alpha = 0.f;                           // the chosen alpha
  std::vector<double> alpha_losses;            // loss per alpha on the grid
  std::vector<std::vector<float>> scaled_weights;  // per member: W * s, float32 [rows, in]
  std::vector<QuantizedTensor> tensors;        // per member: W * s quantized (after clipping)
  float clip_ratio = 1.f;                      // nvfp4: chosen ratio of the group amax
  float group_amax = 0.f;                      // nvfp4: global amax the tensors were made with
  float input_amax = 0.f;                      // max_c channel_amax[c] * pqs[c]
};

// AWQ for the Linears in `members`, which all read the same input (q/k/v, or gate/up; one member
// for a lone Linear) and so share one s (llm-compressor searches per mapping like this; ModelOpt
// searches per module and then averages the pqs of the group, §4.3). All members have the same
// in = cols. Reads stats.channel_mean_abs, stats.channel_amax, stats.samples (>= 1 row).
//   w_scale[c] = mean over all members' rows of |W[r,c]| / (amax of W's quantization block
//                containing (r,c) + FLT_MIN)  (fp8: the row);  act[c] = channel_mean_abs[c];
//   s_a = clamp(act^a / (w_scale^(1-a) + FLT_MIN), 1e-4, 1e4) / sqrt(max(s_a) * min(s_a));
//   loss(a) = mean over samples and outputs of (x (Q(W s) / s - W)^T)^2, with Q the format's
//   max quantizer (nvfp4: the global scale of the group's max |W s|); the first minimum wins.
// Clip (if options.clip): nvfp4: the group's global amax times each ratio, same loss; other
// formats: per (row, block) (fp8: per row), loss = sum over the first clip_max_samples samples
// of (x_s . (Q_ratio(w_block) - w_block))^2, x_s = x * pqs.
// Deterministic, independent of the thread count. Throws qf::Error for missing statistics or
// mismatched shapes.
AwqResult quantize_awq(std::span<const WeightRows> members, const LinearStats& stats,
                       const AwqOptions& options, ThreadPool& pool);

// The AWQ-scaled inputs' statistics (x' = x * pqs): channel amax / mean |x| times pqs, XtX as
// diag(pqs) XtX diag(pqs), samples scaled, input_amax recomputed. For GPTQ after AWQ: run
// quantize_awq with clip = false, then quantize_gptq on each scaled weight with these
// statistics and the group amax max|W s| (AWQ clipping is not combined with GPTQ: GPTQ freezes
// max scales, as ModelOpt's and llm-compressor's recipes do).
LinearStats scale_linear_stats(const LinearStats& stats, std::span<const float> pqs);

// Folds pqs into the norm that produces the Linear's input, so no pre_quant_scale is exported:
// w_ln *= pqs and b_ln *= pqs (bias may be null); one_plus: norms computing x * (1 + w)
// (Gemma, LayerNorm1P): w' = (w + 1) * pqs - 1.
void fold_pre_quant_scale_into_norm(float* norm_weight, float* norm_bias, std::span<const float> pqs,
                                    bool one_plus = false);

}  // namespace qf

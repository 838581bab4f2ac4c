// SmoothQuant for INT8 W8A8 (ModelOpt `smoothquant`, specs modelopt-nvfp4 §5 table and §3
// `int8_sq`): per-input-channel scales that move activation outliers into the weights.
#pragma once

#include "algo/layer_stats.h"
#include "core/dtype.h"
#include "formats/int8.h"
#include "formats/weight_rows.h"

#include <span>
#include <vector>

namespace qf {

class ThreadPool;

struct SmoothQuantOptions {
  float alpha = 1.0f;             // ModelOpt's default (not the paper's 0.5)
  DType scale_dtype = DType::F32; // dtype the INT8 weight scales are stored in
  // dtype pre_quant_scale is stored in: s is rounded to it before the weights are divided by
  // it, so the stored s is exactly the one the smoothed weights assume (F32, BF16, F16).
  DType pre_quant_scale_dtype = DType::F32;
};

struct SmoothQuantResult {
  std::vector<float> pre_quant_scale;           // [in] s: the kernel computes x * s
  std::vector<std::vector<float>> smoothed;     // per member: W[:, c] / s_c, float32 [rows, in]
  std::vector<Int8ChannelTensor> tensors;       // per member: INT8 per-channel of `smoothed`
  float input_amax = 0.f;                       // max_c channel_amax[c] * s_c
  float input_scale = 0.f;                      // input_amax * fl32(1/127) (`input_scale`)
};

// SmoothQuant for the Linears in `members`, which all read the same input (q/k/v, gate/up, or
// one Linear) and so share s. Reads stats.channel_amax ([in]).
//   w_max[c] = max over all members' rows of |W[r, c]|;  a_max[c] = channel_amax[c];
//   s_c = clamp(w_max^(1-alpha) / a_max^alpha, 1e-4, 1e4), and s_c = 1 where a_max <= 2^-31,
//   then rounded to options.pre_quant_scale_dtype;
//   pre_quant_scale = s, W[:, c] /= s_c, so (x * s) (W / s)^T = x W^T up to float rounding.
// Throws qf::Error for mismatched shapes or missing statistics.
SmoothQuantResult smoothquant(std::span<const WeightRows> members, const LinearStats& stats,
                              const SmoothQuantOptions& options, ThreadPool& pool);

}  // namespace qf

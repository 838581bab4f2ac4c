// Data-free quantization of one planned Linear straight from the checkpoint: round to nearest
// (max), the MSE amax search or Four Over Six's NVFP4 block scales, with the tensor scale shared
// across a fused group (the largest amax of q/k/v or gate/up). Used by the write step for every
// module nothing precomputed, and by calibration for modules whose algorithm falls back to its
// data-free part.
#pragma once

#include "algo/four_over_six.h"
#include "core/thread_pool.h"
#include "formats/mxfp4_nvfp4_cast.h"
#include "formats/quantized_tensor.h"
#include "formats/weight_rows.h"
#include "pipeline/module_plan.h"

#include <map>
#include <vector>

namespace qf {

// A stored tensor as rows for the quantizers (a view into the mapping).
WeightRows weight_rows(const TensorView& v);
// The same from read_tensor: a view, or the [out, in] copy of a transposed tensor, which the
// rows then own.
WeightRows weight_rows(const TensorData& d);
// A weight as float32 (the algorithms that rescale or sweep need it).
std::vector<float> to_float(const WeightRows& w);

class LinearQuantizer {
 public:
  // All references must outlive this object.
  LinearQuantizer(const SourceModel& model, const ModulePlan& plan, const QuantizeOptions& options,
                  const Exporter& exporter, ThreadPool& pool);

  // The weight of linear `i` as stored ([out, in]; a weight stored transposed is copied here,
  // one Linear at a time, and the copy lives as long as the rows returned).
  WeightRows rows(size_t i) const;
  // max |w| of linear `i`. Throws qf::Error naming the file and tensor if it holds NaN or Inf.
  float tensor_amax(size_t i);
  // The amax that sets linear `i`'s tensor scale: its own, or the largest of its scale group
  // (ModulePlan::scale_groups: a fused group, or the experts of one fused tensor).
  float amax_for(size_t i);
  // Linear `i` quantized with its data-free algorithm (max, mse, or Four Over Six where
  // ModulePlan::four_over_six says so); an expert of the MXFP4 release (ModulePlan::mxfp4_cast)
  // is cast to NVFP4 instead, with its scale group's tensor scale.
  QuantizedTensor data_free(size_t i);
  // w quantized to NVFP4 by Four Over Six under `global_amax` (a group's max |w|), counted in
  // four_over_six_counts().
  QuantizedTensor four_over_six(const WeightRows& w, float global_amax);
  // What the MXFP4 casts so far did.
  const Mxfp4CastStats& cast_stats() const { return cast_stats_; }
  // Blocks Four Over Six chose for so far, and those that took M=4.
  const FourOverSixCounts& four_over_six_counts() const { return four_over_six_counts_; }
  // FP8 per-tensor weights whose amax Four Over Six chose, and how many took 1.5x the max.
  int fp8_four_over_six_tensors() const { return fp8_four_over_six_tensors_; }
  int fp8_four_over_six_wide() const { return fp8_four_over_six_wide_; }

 private:
  const SourceModel& model_;
  const ModulePlan& plan_;
  const QuantizeOptions& options_;
  const Exporter& exporter_;
  ThreadPool& pool_;
  std::map<int, float> group_amax_, group_mse_amax_;  // by scale group
  std::map<int, int> group_cast_exponent_;           // by scale group
  Mxfp4CastStats cast_stats_;
  FourOverSixCounts four_over_six_counts_;
  int fp8_four_over_six_tensors_ = 0, fp8_four_over_six_wide_ = 0;

  // The MXFP4 codes and E8M0 scales of expert `i` of the MXFP4 release.
  std::pair<TensorView, TensorView> mxfp4_parts(size_t i) const;
  int cast_exponent(size_t i);
};

}  // namespace qf

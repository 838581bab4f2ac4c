#include "pipeline/linear_quantizer.h"

#include "algo/mse.h"
#include "algo/round_to_nearest.h"
#include "core/convert.h"
#include "core/error.h"
#include "formats/fake_quant.h"

#include <algorithm>

namespace qf {

WeightRows weight_rows(const TensorView& v) {
  return WeightRows{v.data, v.dtype, v.rows(), v.cols()};
}

std::vector<float> to_float(const WeightRows& w) {
  std::vector<float> out(size_t(w.rows * w.cols));
  convert_to_f32(w.dtype, w.data, out.data(), out.size());
  return out;
}

LinearQuantizer::LinearQuantizer(const SourceModel& model, const ModulePlan& plan,
                                 const QuantizeOptions& options, const Exporter& exporter,
                                 ThreadPool& pool)
    : model_(model), plan_(plan), options_(options), exporter_(exporter), pool_(pool) {}

WeightRows LinearQuantizer::rows(size_t i) const {
  const CheckpointTensor& t = *plan_.weights[i];
  return weight_rows(t.file->view(*t.entry));
}

float LinearQuantizer::tensor_amax(size_t i) {
  const CheckpointTensor& t = *plan_.weights[i];
  const AmaxResult r = weight_amax(rows(i), pool_);
  if (r.nonfinite > 0)
    fail("{}: tensor '{}' has {} NaN or Inf values", t.file->path().string(), t.name, r.nonfinite);
  return r.amax;
}

float LinearQuantizer::amax_for(size_t i) {
  const Architecture& arch = model_.arch;
  const int g = arch.linears[i].group;
  if (g < 0) return tensor_amax(i);
  if (auto it = group_amax_.find(g); it != group_amax_.end()) return it->second;
  float a = 0.f;
  for (size_t member : arch.fused_groups[size_t(g)]) a = std::max(a, tensor_amax(member));
  group_amax_[g] = a;
  return a;
}

QuantizedTensor LinearQuantizer::max_or_mse(size_t i) {
  const Architecture& arch = model_.arch;
  const ExportedLinear& l = plan_.exported[i];
  const WeightRows w = rows(i);
  RtnOptions rtn{l.format, l.block, exporter_.scale_dtype(l), exporter_.numerics()};
  if (l.per_tensor) {
    // FP8 W8A8: one scale from the tensor's own amax (FP8 per-tensor is not group-unified).
    const float amax = tensor_amax(i);
    std::vector<float> amaxes(size_t(l.rows), amax);
    QuantizedTensor q = scales_from_amax(Format::fp8, l.rows, l.cols, 0, amaxes.data(), 0.f,
                                         rtn.scale_dtype);
    const std::vector<float> f = to_float(w);
    encode_with_scales(q, f.data(), pool_);
    return q;
  }
  if (options_.algo == WeightAlgo::mse) {
    if (options_.format != Format::nvfp4) return quantize_mse(w, rtn, MseOptions{}, pool_);
    const int g = arch.linears[i].group;
    auto searched = [&](size_t m) {
      return nvfp4_mse_global_amax(rows(m), tensor_amax(m), MseOptions{}, pool_);
    };
    float ga = 0.f;
    if (g < 0) {
      ga = searched(i);
    } else if (auto it = group_mse_amax_.find(g); it != group_mse_amax_.end()) {
      ga = it->second;
    } else {
      for (size_t m : arch.fused_groups[size_t(g)]) ga = std::max(ga, searched(m));
      group_mse_amax_[g] = ga;
    }
    return quantize_mse(w, rtn, MseOptions{}, pool_, ga);
  }
  return quantize_rtn(w, rtn, amax_for(i), pool_);
}

}  // namespace qf

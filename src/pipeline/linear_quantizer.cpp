#include "pipeline/linear_quantizer.h"

#include "algo/mse.h"
#include "algo/round_to_nearest.h"
#include "core/convert.h"
#include "core/error.h"
#include "core/numeric.h"
#include "formats/fake_quant.h"
#include "formats/llm_compressor_rtn.h"

#include <algorithm>

namespace qf {

WeightRows weight_rows(const TensorView& v) {
  return WeightRows{v.data, v.dtype, v.rows(), v.cols()};
}

WeightRows weight_rows(const TensorData& d) {
  WeightRows w = weight_rows(d.view);
  w.owner = d.owned;
  return w;
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
  return weight_rows(read_tensor(t));
}

float LinearQuantizer::tensor_amax(size_t i) {
  const CheckpointTensor& t = *plan_.weights[i];
  const AmaxResult r = weight_amax(rows(i), pool_);
  if (r.nonfinite > 0)
    fail("{}: tensor '{}' has {} NaN or Inf values", t.file->path().string(), t.name, r.nonfinite);
  return r.amax;
}

float LinearQuantizer::amax_for(size_t i) {
  const int g = plan_.scale_group[i];
  if (g < 0) return tensor_amax(i);
  if (auto it = group_amax_.find(g); it != group_amax_.end()) return it->second;
  float a = 0.f;
  for (size_t member : plan_.scale_groups[size_t(g)]) a = std::max(a, tensor_amax(member));
  group_amax_[g] = a;
  return a;
}

std::pair<TensorView, TensorView> LinearQuantizer::mxfp4_parts(size_t i) const {
  const ExportedLinear& l = plan_.exported[i];
  const CheckpointTensor& codes = *plan_.weights[i];
  const CheckpointTensor* scales = model_.checkpoint->find(l.module + ".weight_scale");
  if (!scales) fail("{}: tensor '{}.weight_scale' is missing", codes.file->path().string(), l.module);
  return {codes.file->view(*codes.entry), scales->file->view(*scales->entry)};
}

int LinearQuantizer::cast_exponent(size_t i) {
  auto max_code = [&](size_t m) {
    const auto [codes, scales] = mxfp4_parts(m);
    const ExportedLinear& l = plan_.exported[m];
    try {
      return mxfp4_max_scale_code(reinterpret_cast<const uint8_t*>(codes.data),
                                  reinterpret_cast<const uint8_t*>(scales.data), l.rows, l.cols);
    } catch (const Error& e) {
      fail("{}: tensor '{}.weight_scale': {}", plan_.weights[m]->file->path().string(), l.module,
           e.what());
    }
  };
  const int g = plan_.scale_group[i];
  if (g < 0) return mxfp4_cast_exponent(max_code(i));
  if (auto it = group_cast_exponent_.find(g); it != group_cast_exponent_.end()) return it->second;
  int code = -1;
  for (size_t member : plan_.scale_groups[size_t(g)]) code = std::max(code, max_code(member));
  return group_cast_exponent_[g] = mxfp4_cast_exponent(code);
}

QuantizedTensor LinearQuantizer::four_over_six(const WeightRows& w, float global_amax) {
  return quantize_nvfp4_four_over_six(w, global_amax, pool_, nullptr, &four_over_six_counts_);
}

QuantizedTensor LinearQuantizer::data_free(size_t i) {
  const ExportedLinear& l = plan_.exported[i];
  if (plan_.mxfp4_cast && l.fused_expert != FusedExpert::none) {
    const auto [codes, scales] = mxfp4_parts(i);
    return mxfp4_to_nvfp4(reinterpret_cast<const uint8_t*>(codes.data),
                          reinterpret_cast<const uint8_t*>(scales.data), l.rows, l.cols,
                          cast_exponent(i), pool_, cast_stats_);
  }
  const WeightRows w = rows(i);
  RtnOptions rtn{l.format, l.block, exporter_.scale_dtype(l), exporter_.numerics()};
  if (l.per_tensor) {
    // FP8 W8A8: one scale from the tensor's own amax (FP8 per-tensor is not group-unified),
    // or from all experts of a fused tensor (one quantizer per tensor).
    const bool fused = l.fused_expert != FusedExpert::none && exporter_.fuses_experts();
    const float max = fused ? amax_for(i) : tensor_amax(i);
    auto encode = [&](float amax) {
      std::vector<float> amaxes(size_t(l.rows), amax);
      QuantizedTensor q = scales_from_amax(Format::fp8, l.rows, l.cols, 0, amaxes.data(), 0.f,
                                           rtn.scale_dtype);
      if (rtn.numerics == ExportNumerics::llm_compressor) {
        // llm-compressor: T(amax / 448) by exact division, T the weight dtype (zero -> T's eps).
        float s = round_through(w.dtype, amax / 448.0f);
        if (s == 0.f) s = llm_compressor_zero_scale(w.dtype);
        q.scales.assign(size_t(l.rows), s);
      }
      // Both tools divide the weight by the 0-dim scale in the weight's dtype (ModelOpt
      // quant_utils.py, llm-compressor forward_helpers.py), so x / s is rounded to that dtype
      // before the E4M3 cast; for F32 weights this is the plain float32 quotient.
      const float s = q.scales[0];
      q.codes.resize(size_t(w.rows * w.cols));
      std::vector<double> row_error(size_t(w.rows));
      pool_.parallel_for(w.rows, [&](int64_t r) {
        std::vector<float> f(size_t(w.cols));
        convert_to_f32(w.dtype, static_cast<const std::byte*>(w.data) + r * w.cols * int64_t(dtype_size(w.dtype)),
                       f.data(), f.size());
        float err = 0.f;
        for (int64_t c = 0; c < w.cols; ++c) {
          // ModelOpt's fused gpt-oss experts keep the float32 quotient (ModelOpt 0.47's export
          // of _QuantGptOssExperts, compared byte for byte).
          const float v = fused ? f[size_t(c)] / s : round_through(w.dtype, f[size_t(c)] / s);
          const uint8_t code = f32_to_e4m3(std::clamp(v, -448.f, 448.f));
          q.codes[size_t(r * w.cols + c)] = code;
          const float d = f[size_t(c)] - e4m3_to_f32(code) * s;
          err += d * d;
        }
        row_error[size_t(r)] = err;
      });
      double total = 0;
      for (double e : row_error) total += e;
      return std::pair{std::move(q), total};
    };
    // Four Over Six on an FP8 per-tensor weight (ModelOpt's MSE multiplier search in the same
    // recipes, ../shared/specs/moe-hybrid.md §1.6): the amax is 1.0x or 1.5x the max, whichever
    // gives the lower whole-tensor squared error (ties: 1.0).
    auto [q, error] = encode(max);
    if (plan_.four_over_six[i]) {
      auto [q15, error15] = encode(1.5f * max);
      ++fp8_four_over_six_tensors_;
      if (error15 < error) {
        ++fp8_four_over_six_wide_;
        return std::move(q15);
      }
    }
    return std::move(q);
  }
  if (plan_.four_over_six[i]) return four_over_six(w, amax_for(i));
  if (options_.algo == WeightAlgo::mse) {
    if (options_.format != Format::nvfp4) return quantize_mse(w, rtn, MseOptions{}, pool_);
    const int g = plan_.scale_group[i];
    auto searched = [&](size_t m) {
      return nvfp4_mse_global_amax(rows(m), tensor_amax(m), MseOptions{}, pool_);
    };
    float ga = 0.f;
    if (g < 0) {
      ga = searched(i);
    } else if (auto it = group_mse_amax_.find(g); it != group_mse_amax_.end()) {
      ga = it->second;
    } else {
      for (size_t m : plan_.scale_groups[size_t(g)]) ga = std::max(ga, searched(m));
      group_mse_amax_[g] = ga;
    }
    return quantize_mse(w, rtn, MseOptions{}, pool_, ga);
  }
  return quantize_rtn(w, rtn, amax_for(i), pool_);
}

}  // namespace qf

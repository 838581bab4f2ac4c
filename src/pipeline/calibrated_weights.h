// Step 2 of quantization, "calibrate": runs the model one decoder layer at a time over the
// calibration windows, collects the input statistics every planned module needs, and runs the
// data-driven weight algorithms (AWQ, GPTQ, local_hessian, SmoothQuant and their combinations)
// as each layer's statistics are complete. Results wait in an unnamed spill file in the output's
// staging directory until the write step takes them, so memory holds one layer's results.
#pragma once

#include "io/spill_file.h"
#include "pipeline/linear_quantizer.h"
#include "pipeline/module_plan.h"

#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace qf {

// A Linear quantized during calibration (algorithms that need data, or quantized inputs).
struct Precomputed {
  QuantizedTensor q;
  std::vector<float> pre_quant_scale;  // exported when non-empty
  float input_amax = -1.f;             // the input amax after AWQ scaling; -1: the captured one
  std::optional<SpillFile::Extent> spilled;  // q and pre_quant_scale, moved out of memory
};

struct CalibrationOutcome {
  std::vector<float> act_amax;                       // per linear: its input's amax
  std::vector<std::pair<float, float>> kv_amax;      // per layer: post-RoPE K and V amax
  std::map<size_t, Precomputed> precomputed;         // by linear
  std::unique_ptr<SpillFile> spill_file;  // results of the layers already done
  std::map<std::string, std::vector<float>> norm_override;  // norms that absorbed AWQ/SQ scales
  std::map<size_t, float> input_amax;  // linear -> amax after AWQ scaling, where it changed

  // Linear `i`'s precomputed result, read back from the spill file and removed; nullopt when
  // the write step must quantize it itself.
  std::optional<Precomputed> take(size_t i);
  // The static input scale of linear `i` (amax / the format's largest value; NVFP4 and INT8
  // unify the amax over a fused group, FP8 per tensor does not). Throws qf::Error when
  // calibration saw only zeros.
  float input_scale(size_t i, const Architecture& arch, ActQuant activations,
                    const std::filesystem::path& model_dir) const;
};

// Runs calibration when `plan.modes.calibrate` (otherwise returns empty statistics). The spill
// file goes into `staging_dir`. Fills report's calibration fields and warnings.
CalibrationOutcome calibrate(const SourceModel& model, const ModulePlan& plan,
                             const QuantizeOptions& options, const Exporter& exporter,
                             LinearQuantizer& quantizer, ThreadPool& pool,
                             const std::filesystem::path& staging_dir, QuantizeReport& report);

}  // namespace qf

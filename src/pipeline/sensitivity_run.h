// Sensitivity of a checkpoint to quantizing each decision unit: one layer-by-layer calibration
// pass (no X^T X) that scores every unit's candidates with the proxy (mean squared output error
// on proxy_rows sampled calibration rows per Linear input, one matrix product per candidate,
// divided by the energy E||h||^2 of the residual stream the unit's layer writes), optionally
// the exact measure (KL of the final logits with only that unit fake-quantized), and the KL of
// any assignment.
#pragma once

#include "calib/calibration_data.h"
#include "engine/model.h"
#include "pipeline/source_model.h"
#include "plan/candidates.h"
#include "plan/sensitivity.h"
#include "plan/sensitivity_report.h"

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace qf {

struct SensitivityOptions {
  CalibrationOptions calib;            // --calib files, samples, seq, seed (required)
  std::vector<FormatChoice> formats;   // candidates scored (keep is added by decision_units)
  // Stored bytes of a candidate as the export will write it (CandidateOptions::stored_bytes).
  std::function<uint64_t(const LinearModule&, const FormatChoice&)> stored_bytes;
  // Modules that must stay unquantized (--exclude): their units are offered keep only and are
  // not scored (CandidateOptions::excluded). Empty: none.
  std::function<bool(const LinearModule&)> excluded;
  bool exact = false;                  // also the exact measure (one model run per candidate)
  bool experts_per_layer = true;       // MoE units (CandidateOptions::experts_per_layer)
  int64_t proxy_rows = 256;            // calibration rows sampled per Linear input for the proxy
  int threads = 0;                     // 0 = all hardware threads
  KernelMode kernels = KernelMode::exact;  // the model's Linear products (the proxy is BF16 by design)
  bool progress = false;               // progress on stderr
};

struct SensitivityResult {
  Architecture arch;
  DType original_dtype = DType::BF16;
  std::vector<DecisionUnit> units;     // decision_units(arch, formats)
  UnitScores proxy;                    // raw proxy, [unit][candidate]: sampled output error /
                                       // E||h_{l+1}||^2 of the unit's layer l
  UnitScores exact;                    // raw exact KL, empty unless options.exact
  UnitScores monotone;                 // monotonized scores for the planner (exact if computed, else proxy)
  SensitivityReport report;            // rows from the raw scores, Spearman(proxy, exact)
  int64_t calib_tokens = 0;
  double calib_seconds = 0;            // layer forwards and statistics (as any calibration pass)
  double proxy_seconds = 0;            // proxy scoring inside the calibration callback
  double exact_seconds = 0;
};

// Runs the sensitivity analysis of the float checkpoint `model_dir`. Throws qf::Error (naming
// the file or module) for a quantized or unreadable checkpoint, missing calibration files, or a
// format list with no format.
SensitivityResult run_sensitivity(const SourceModel& source,
                                  const SensitivityOptions& options);

// Mean KL(original || fake-quantized) of the final logits over fixed token windows, for any
// assignment of formats to Linears (RTN max calibration; NVFP4 fused groups share the tensor
// scale). The original log-probabilities are computed once, at construction.
class AssignmentKl {
 public:
  // `model` must hold the float checkpoint; windows must share one length <= model.max_seq().
  AssignmentKl(Model& model, std::vector<std::vector<int32_t>> windows);
  // Mean over all window positions of sum_v p(v) (log p(v) - log q(v)).
  double operator()(const Assignment& assignment);

 private:
  Model& model_;
  std::vector<std::vector<int32_t>> windows_;
  std::vector<std::vector<float>> log_p_;  // per window [seq, vocab]
};

}  // namespace qf

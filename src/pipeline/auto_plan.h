// `quantize --auto`: sensitivity proxy scores, candidate bytes and the user's target turned into
// a per-module assignment by the exact multiple-choice knapsack (plan/budget_solver.h).
#pragma once

#include "pipeline/sensitivity_run.h"
#include "plan/budget_solver.h"

#include <filesystem>
#include <string>
#include <vector>

namespace qf {

// The budget facts of a real checkpoint: the Linears of `units` against everything else it
// stores. fixed_bytes = bytes of every stored tensor that is not one of those Linears' weights
// (embeddings, head, norms, biases); overhead_bytes = an upper bound of the output's
// safetensors headers (what --target-size measures besides tensor data: the shard file sizes).
ModelBudgetInfo checkpoint_budget_info(const std::filesystem::path& model_dir,
                                       const Architecture& arch,
                                       const std::vector<DecisionUnit>& units);

struct AutoPlanOptions {
  SensitivityOptions sensitivity;  // calibration and candidate formats (proxy only unless exact)
  Target target;
};

struct AutoPlan {
  Assignment assignment;
  std::vector<DecisionUnit> units;
  KnapsackResult result;
  ModelBudgetInfo info;
  int64_t budget = 0;          // target_budget(target, info)
  double achieved = 0;         // target_value of the chosen bytes
  double bits_per_weight = 0;  // average over the units' weights, scales included
  std::string summary;         // one line per chosen format: units, weights, bytes
};

// Runs the sensitivity proxy and solves for the target. Throws qf::Error with
// infeasible_message (the closest achievable value) when the target cannot be met.
AutoPlan plan_auto(const std::filesystem::path& model_dir, const AutoPlanOptions& options);

}  // namespace qf

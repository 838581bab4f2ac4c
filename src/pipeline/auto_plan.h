// `quantize --auto`: sensitivity proxy scores, candidate bytes and the user's target turned into
// a per-module assignment by the exact multiple-choice knapsack (plan/budget_solver.h).
#pragma once

#include "pipeline/quantize_checkpoint.h"
#include "pipeline/sensitivity_run.h"
#include "plan/budget_solver.h"

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

namespace qf {

// The budget facts of a real checkpoint: the Linears of `units` against everything else it
// stores. fixed_bytes = bytes of every stored tensor that is not one of those Linears' weights
// (embeddings, head, norms, biases); overhead_bytes = an upper bound of the output's
// safetensors headers (what --target-size measures besides tensor data: the shard file sizes).
ModelBudgetInfo checkpoint_budget_info(const Checkpoint& checkpoint, const Architecture& arch,
                                       const std::vector<DecisionUnit>& units);

struct AutoPlanOptions {
  SensitivityOptions sensitivity;  // calibration and candidate formats (proxy only unless exact)
  Target target;
  // Formats added to sensitivity.formats when the target cannot be met with those alone
  // (e.g. mxfp4, int4, int4:channel below NVFP4's 4.5 bits). Empty: none.
  std::vector<FormatChoice> fallback_formats;
  // Whether a module may take a candidate (keep is always allowed): false for modules the user
  // excluded and for formats the exporter cannot write for that module. Empty: all allowed.
  std::function<bool(const LinearModule&, const FormatChoice&)> allowed;
  // Bytes the export adds whatever the plan (the FP8 KV-cache scales of --kv-cache fp8, on
  // every attention layer's k_proj / v_proj, kept or quantized): counted as fixed.
  uint64_t added_fixed_bytes = 0;
};

struct AutoPlan {
  Assignment assignment;
  std::vector<DecisionUnit> units;
  std::vector<FormatChoice> formats;  // the candidate formats scored (with any fallback added)
  KnapsackResult result;
  ModelBudgetInfo info;
  int64_t budget = 0;          // target_budget(target, info)
  // What the budget counted of the chosen plan: result.total_bytes (stored), or for a speedup
  // target the bytes read per decoded token (routed experts: top_k / num_experts of theirs).
  uint64_t budgeted_bytes = 0;
  double achieved = 0;         // target_value of the chosen bytes
  double bits_per_weight = 0;  // average over the units' weights, scales included
  std::string summary;         // one line per chosen format: units, weights, bytes
  std::vector<double> chosen_error;  // per unit, the raw score (proxy or exact) of its choice
  bool exact_measure = false;        // scored by the exact KL (--auto-exact), not the proxy
  Target target;
  // What the solver was given, per unit its allowed candidates (bytes, monotonised score), so
  // that other budgets can be solved the same way (auto_plan_report's curve).
  std::vector<KnapsackUnit> knapsack;
  SensitivityReport sensitivity;     // the scores, for reports
};

// The plan in the words of the quantize summary: what was solved, and per unit its choice.
AutoPlanSummary auto_plan_summary(const AutoPlan& plan);

// The --auto HTML page's data: the plan (units in model order), the sensitivity scores, and
// the error-vs-bits curve: `curve_points` budgets spaced evenly in log(bits per weight) from the
// smallest choice to the largest, each solved by solve_knapsack on plan.knapsack (with a coarser
// size resolution than the plan's own solve, so a point may sit slightly above the exact optimum
// at its budget), plus the chosen plan itself. `kept` is left empty for the caller (the
// quantize report knows every module left unquantized and why).
AutoPlanReport auto_plan_report(const AutoPlan& plan, int curve_points = 40);

// Runs the sensitivity proxy and solves for the target over the allowed candidates (adding
// fallback_formats first when the asked ones cannot meet it). Throws qf::Error with
// infeasible_message (the closest achievable value with the candidates tried, which it names)
// when the target cannot be met.
AutoPlan plan_auto(const SourceModel& model, const AutoPlanOptions& options);

}  // namespace qf

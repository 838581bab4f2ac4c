// The automatic mixed-precision plan: proxy scores (monotonised) and exact stored bytes per
// candidate go to the knapsack; the chosen candidates become the pipeline's assignment.
#include "pipeline/auto_plan.h"

#include "core/error.h"
#include "io/checkpoint.h"

#include <fmt/format.h>

#include <array>
#include <map>
#include <set>

namespace qf {

ModelBudgetInfo checkpoint_budget_info(const std::filesystem::path& model_dir,
                                       const Architecture& arch,
                                       const std::vector<DecisionUnit>& units) {
  const Checkpoint ck = Checkpoint::open(model_dir);
  uint64_t numel = 0;
  std::set<std::string> searched;
  for (const DecisionUnit& u : units) {
    numel += u.numel;
    for (size_t i : u.linears) searched.insert(arch.linears[i].weight_name());
  }
  int linear_dtype_size = 2;
  uint64_t original = 0, fixed = 0, header = 4096;
  for (const auto& t : ck.tensors()) {
    const uint64_t bytes = t.entry->end - t.entry->begin;
    if (searched.count(t.name)) {
      original += bytes;
      linear_dtype_size = int(dtype_size(t.entry->dtype));
      // weight (or weight_packed), weight_scale, weight_scale_2 / global scale, and their
      // JSON entries ({"dtype","shape","data_offsets"} is under 100 characters).
      header += 4 * (t.name.size() + 24 + 100);
    } else {
      fixed += bytes;
      header += t.name.size() + 100;
    }
  }
  ModelBudgetInfo info = ModelBudgetInfo::from_architecture(arch, numel, linear_dtype_size);
  info.original_linear_bytes = original;
  info.fixed_bytes = fixed;
  info.overhead_bytes = header;
  return info;
}

AutoPlan plan_auto(const std::filesystem::path& model_dir, const AutoPlanOptions& options) {
  const SensitivityResult s = run_sensitivity(model_dir, options.sensitivity);
  AutoPlan p;
  p.units = s.units;
  p.info = checkpoint_budget_info(model_dir, s.arch, s.units);
  std::vector<KnapsackUnit> ku(s.units.size());
  for (size_t u = 0; u < s.units.size(); ++u)
    for (size_t c = 0; c < s.units[u].candidates.size(); ++c) {
      ku[u].cost.push_back(s.units[u].candidates[c].bytes);
      ku[u].score.push_back(s.monotone[u][c]);
    }
  p.budget = target_budget(options.target, p.info);
  p.result = solve_knapsack(ku, p.budget < 0 ? 0 : uint64_t(p.budget));
  if (p.budget < 0 || !p.result.feasible)
    fail("{}", infeasible_message(options.target, p.info, p.result.min_bytes));
  p.assignment = assignment_from_choices(s.arch, s.units, p.result.choice);
  p.achieved = target_value(options.target, p.info, p.result.total_bytes);
  p.bits_per_weight = p.info.quantizable_numel
                          ? double(p.result.total_bytes) * 8.0 / double(p.info.quantizable_numel)
                          : 0.0;
  // Per chosen format: units, weights, bytes.
  std::map<std::string, std::array<uint64_t, 3>> by_format;
  for (size_t u = 0; u < s.units.size(); ++u) {
    const Candidate& c = s.units[u].candidates[size_t(p.result.choice[u])];
    auto& e = by_format[c.choice.name()];
    e[0] += 1;
    e[1] += s.units[u].numel;
    e[2] += c.bytes;
  }
  for (const auto& [name, e] : by_format)
    p.summary += fmt::format("  {:<8} {:>4} units {:>12} weights {:>12} bytes\n", name, e[0], e[1],
                             e[2]);
  return p;
}

}  // namespace qf

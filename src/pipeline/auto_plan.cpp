// The automatic mixed-precision plan: proxy scores (monotonised) and exact stored bytes per
// candidate go to the knapsack; the chosen candidates become the pipeline's assignment.
#include "pipeline/auto_plan.h"

#include "core/error.h"
#include "core/progress.h"
#include "io/checkpoint.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <climits>
#include <cmath>
#include <cstdint>
#include <map>
#include <set>

namespace qf {

ModelBudgetInfo checkpoint_budget_info(const Checkpoint& ck, const Architecture& arch,
                                       const std::vector<DecisionUnit>& units) {
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
  double read = 0;
  for (const DecisionUnit& u : units) read += double(u.numel) * 2.0 * u.read_fraction;
  info.bf16_linear_read_bytes = uint64_t(std::llround(read));
  info.original_linear_bytes = original;
  info.fixed_bytes = fixed;
  info.overhead_bytes = header;
  return info;
}

namespace {

// What candidate `c` of unit `u` costs against the target: its stored bytes, or for a speedup
// target the bytes one decoded token reads of it (routed experts: top_k / num_experts of them).
uint64_t target_cost(const Target& t, const DecisionUnit& u, size_t c) {
  const uint64_t bytes = u.candidates[c].bytes;
  if (t.kind != TargetKind::speedup || u.read_fraction == 1.0) return bytes;
  return uint64_t(std::ceil(double(bytes) * u.read_fraction));
}

// Whether every member of unit `u` may take candidate `c`.
bool unit_allows(const Architecture& arch, const DecisionUnit& u, const Candidate& c,
                 const AutoPlanOptions& o) {
  if (c.choice.is_keep() || !o.allowed) return true;
  for (size_t i : u.linears)
    if (!o.allowed(arch.linears[i], c.choice)) return false;
  return true;
}

// Per unit, the indices of its allowed candidates.
std::vector<std::vector<int>> allowed_candidates(const Architecture& arch,
                                                 const std::vector<DecisionUnit>& units,
                                                 const AutoPlanOptions& o) {
  std::vector<std::vector<int>> out(units.size());
  for (size_t u = 0; u < units.size(); ++u)
    for (size_t c = 0; c < units[u].candidates.size(); ++c)
      if (unit_allows(arch, units[u], units[u].candidates[c], o)) out[u].push_back(int(c));
  return out;
}

std::string format_list(const std::vector<FormatChoice>& formats) {
  std::vector<std::string> names;
  for (const FormatChoice& f : formats) names.push_back(f.name());
  return fmt::format("{}", fmt::join(names, ","));
}

// The smallest bytes `formats` (plus keep) reach over the allowed candidates, from the stored
// bytes alone (no calibration), against the target's budget.
struct Reach {
  ModelBudgetInfo info;
  uint64_t min_bytes = 0;
  bool feasible = false;
};

Reach formats_reach(const SourceModel& model, const AutoPlanOptions& o,
                    const std::vector<FormatChoice>& formats) {
  const Checkpoint& ck = *model.checkpoint;
  const Architecture& arch = model.arch;
  CandidateOptions co;
  co.formats = formats;
  co.stored_bytes = o.sensitivity.stored_bytes;
  co.excluded = o.sensitivity.excluded;
  co.experts_per_layer = o.sensitivity.experts_per_layer;
  if (!arch.linears.empty())
    if (const CheckpointTensor* t = ck.find(arch.linears[0].weight_name()))
      co.original_dtype = t->entry->dtype;
  const std::vector<DecisionUnit> units = decision_units(arch, co);
  Reach r;
  r.info = checkpoint_budget_info(ck, arch, units);
  r.info.fixed_bytes += o.added_fixed_bytes;
  const auto allowed = allowed_candidates(arch, units, o);
  for (size_t u = 0; u < units.size(); ++u) {
    uint64_t m = UINT64_MAX;
    for (int c : allowed[u]) m = std::min(m, target_cost(o.target, units[u], size_t(c)));
    r.min_bytes += m;
  }
  const int64_t budget = target_budget(o.target, r.info);
  r.feasible = budget >= 0 && r.min_bytes <= uint64_t(budget);
  return r;
}

}  // namespace

AutoPlan plan_auto(const SourceModel& model, const AutoPlanOptions& options) {
  AutoPlanOptions o = options;
  Reach reach = formats_reach(model, o, o.sensitivity.formats);
  if (!reach.feasible && !o.fallback_formats.empty()) {
    for (const FormatChoice& f : o.fallback_formats)
      if (std::find(o.sensitivity.formats.begin(), o.sensitivity.formats.end(), f) ==
          o.sensitivity.formats.end())
        o.sensitivity.formats.push_back(f);
    reach = formats_reach(model, o, o.sensitivity.formats);
  }
  // An unreachable target fails before any calibration.
  if (!reach.feasible)
    fail("{} (candidates {} and keep)", infeasible_message(o.target, reach.info, reach.min_bytes),
         format_list(o.sensitivity.formats));
  const SensitivityResult s = run_sensitivity(model, o.sensitivity);
  AutoPlan p;
  p.units = s.units;
  p.formats = o.sensitivity.formats;
  p.info = checkpoint_budget_info(*model.checkpoint, s.arch, s.units);
  p.info.fixed_bytes += o.added_fixed_bytes;
  const auto allowed = allowed_candidates(s.arch, s.units, o);
  std::vector<KnapsackUnit> ku(s.units.size());
  for (size_t u = 0; u < s.units.size(); ++u)
    for (int c : allowed[u]) {
      ku[u].cost.push_back(target_cost(o.target, s.units[u], size_t(c)));
      ku[u].score.push_back(s.monotone[u][size_t(c)]);
    }
  p.budget = target_budget(o.target, p.info);
  p.result = solve_knapsack(ku, p.budget < 0 ? 0 : uint64_t(p.budget));
  if (p.budget < 0 || !p.result.feasible)
    fail("{} (candidates {} and keep)", infeasible_message(o.target, p.info, p.result.min_bytes),
         format_list(o.sensitivity.formats));
  // Back to indices into each unit's candidates.
  for (size_t u = 0; u < s.units.size(); ++u)
    p.result.choice[u] = allowed[u][size_t(p.result.choice[u])];
  p.assignment = assignment_from_choices(s.arch, s.units, p.result.choice);
  p.achieved = target_value(options.target, p.info, p.result.total_bytes);
  p.budgeted_bytes = p.result.total_bytes;
  // The knapsack counted bytes read per token for a speedup target; from here on total_bytes
  // is what the Linears store.
  if (o.target.kind == TargetKind::speedup) {
    p.result.total_bytes = 0;
    for (size_t u = 0; u < s.units.size(); ++u)
      p.result.total_bytes += s.units[u].candidates[size_t(p.result.choice[u])].bytes;
  }
  p.bits_per_weight = p.info.quantizable_numel
                          ? double(p.result.total_bytes) * 8.0 / double(p.info.quantizable_numel)
                          : 0.0;
  p.knapsack = std::move(ku);
  p.sensitivity = s.report;
  p.exact_measure = o.sensitivity.exact;
  p.target = options.target;
  const UnitScores& raw = o.sensitivity.exact ? s.exact : s.proxy;
  for (size_t u = 0; u < s.units.size(); ++u) {
    const size_t c = size_t(p.result.choice[u]);
    p.chosen_error.push_back(s.units[u].candidates[c].choice.is_keep() || c >= raw[u].size()
                                 ? 0.0
                                 : raw[u][c]);
  }
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
    p.summary += fmt::format("  {:<11} {:>4} units {:>12} weights {:>12} bytes\n", name, e[0], e[1],
                             e[2]);
  return p;
}

namespace {

// The target as a constraint in words, and the value reached, e.g. "the Linears at most 5 bits
// per weight" / "4.996 bits per weight".
std::pair<std::string, std::string> target_words(const Target& t, double achieved) {
  switch (t.kind) {
    case TargetKind::bits:
      return {fmt::format("the Linear weights averaging at most {} bits per weight", t.value),
              fmt::format("{:.3f} bits per weight", achieved)};
    case TargetKind::size:
      return {fmt::format("the output's safetensors files at most {}", human_bytes(t.value)),
              fmt::format("a predicted {}", human_bytes(achieved))};
    case TargetKind::memory:
      return {fmt::format("weights plus a {} KV cache of {} tokens x {} at most {}",
                          t.kv_dtype_size == 1 ? "FP8" : "BF16", t.context, t.batch,
                          human_bytes(t.value)),
              fmt::format("a predicted {}", human_bytes(achieved))};
    case TargetKind::speedup:
      return {t.context > 0
                  ? fmt::format("an estimated decode throughput over BF16 of at least {}x ({} "
                                "sequences per step, each reading a {} KV cache of {} tokens)",
                                t.value, t.batch, t.kv_dtype_size == 1 ? "FP8" : "BF16",
                                t.context)
                  : fmt::format("an estimated decode speedup over BF16 of at least {}x", t.value),
              fmt::format("an estimated {:.2f}x", achieved)};
  }
  return {describe_target(t), fmt::format("{:.4g}", achieved)};
}

}  // namespace

AutoPlanSummary auto_plan_summary(const AutoPlan& p) {
  AutoPlanSummary a;
  a.target = describe_target(p.target);
  a.measure = p.exact_measure
                  ? "KL divergence of the final logits with only that unit quantized "
                    "(--auto-exact)"
                  : "the unit's output error on calibration rows relative to the residual "
                    "stream (proxy; compare within a run)";
  a.achieved = p.achieved;
  a.bits_per_weight = p.bits_per_weight;
  a.linear_bytes = p.result.total_bytes;
  a.budget_bytes = p.budget < 0 ? 0 : uint64_t(p.budget);
  a.exact_solve = p.result.exact();
  const auto [constraint, reached] = target_words(p.target, p.achieved);
  a.solved = fmt::format(
      "least total predicted error over {} units with {}; chosen: {} ({} of Linears{} within a "
      "budget of {})",
      p.units.size(), constraint, reached, human_bytes(double(p.result.total_bytes)),
      p.target.kind == TargetKind::speedup
          ? fmt::format(", {} read per decode step", human_bytes(double(p.budgeted_bytes)))
          : std::string(),
      human_bytes(double(a.budget_bytes)));
  if (!a.exact_solve)
    a.solved += fmt::format(
        "; sizes were rounded to steps of {} bytes to keep the search small, so a slightly "
        "better choice may exist in the last {} of the budget",
        p.result.granularity, human_bytes(double(p.result.rounding_bound_bytes)));
  for (size_t u = 0; u < p.units.size(); ++u) {
    const Candidate& c = p.units[u].candidates[size_t(p.result.choice[u])];
    AutoPlanUnit row;
    row.unit = p.units[u].name;
    row.format = c.choice.name();
    row.bytes = c.bytes;
    row.bits = p.units[u].numel ? double(c.bytes) * 8.0 / double(p.units[u].numel) : 0.0;
    row.predicted_error = u < p.chosen_error.size() ? p.chosen_error[u] : 0.0;
    a.units.push_back(std::move(row));
  }
  return a;
}

}  // namespace qf

namespace qf {

AutoPlanReport auto_plan_report(const AutoPlan& p, int curve_points) {
  const AutoPlanSummary s = auto_plan_summary(p);
  AutoPlanReport r;
  r.sensitivity = p.sensitivity;
  r.target = s.target;
  r.solved = s.solved;
  r.measure = s.measure;
  const double numel = double(std::max<uint64_t>(1, p.info.quantizable_numel));
  auto bits_of = [&](uint64_t bytes) { return double(bytes) * 8.0 / numel; };
  r.target_bits = p.target.kind == TargetKind::bits ? p.target.value : bits_of(uint64_t(std::max<int64_t>(0, p.budget)));
  r.chosen = {p.bits_per_weight, p.result.total_bytes, p.result.total_score};
  for (const AutoPlanUnit& u : s.units)
    r.units.push_back({u.unit, u.format, u.bits, u.bytes, u.predicted_error});

  uint64_t lo = 0, hi = 0;
  for (const KnapsackUnit& u : p.knapsack) {
    lo += *std::min_element(u.cost.begin(), u.cost.end());
    hi += *std::max_element(u.cost.begin(), u.cost.end());
  }
  // Points by bytes; the chosen plan's own (exact) solve wins over a sweep point of equal size.
  std::map<uint64_t, ErrorCurvePoint> points;
  if (!p.knapsack.empty() && curve_points > 1 && lo > 0) {
    const double llo = std::log(bits_of(lo)), lhi = std::log(bits_of(hi));
    for (int k = 0; k < curve_points; ++k) {
      const double bits = std::exp(llo + (lhi - llo) * double(k) / double(curve_points - 1));
      // The ends exactly: rounding must not cost the largest choice its last bytes.
      const uint64_t budget = k == 0                   ? lo
                              : k == curve_points - 1 ? hi
                                                      : std::clamp(uint64_t(bits * numel / 8.0), lo, hi);
      // A coarser table than the plan's (2^14 buckets instead of 2^19): 40 solves must stay
      // cheap on an 8B model, and a curve point off by a rounding step is still readable.
      const KnapsackResult k_r = solve_knapsack(p.knapsack, budget, uint64_t(1) << 14);
      if (!k_r.feasible) continue;
      auto [it, inserted] = points.emplace(
          k_r.total_bytes, ErrorCurvePoint{bits_of(k_r.total_bytes), k_r.total_bytes, k_r.total_score});
      if (!inserted) it->second.error = std::min(it->second.error, k_r.total_score);
    }
  }
  points[r.chosen.bytes] = r.chosen;
  for (const auto& [bytes, pt] : points) r.curve.push_back(pt);
  return r;
}

}  // namespace qf

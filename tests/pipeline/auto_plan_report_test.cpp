// The --auto report's data: the error-vs-bits curve swept with the plan's own solver, the chosen
// point on it, the target as bits, one plan row per unit.
#include "pipeline/auto_plan.h"

#include "plan/plan_test_util.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace qf {
namespace {

AutoPlan tiny_plan(double target_bits) {
  const Architecture arch = test::tiny_llama(2);
  CandidateOptions co;
  co.formats = {FormatChoice::of(Format::nvfp4), FormatChoice::of(Format::fp8)};
  AutoPlan p;
  p.units = decision_units(arch, co);
  UnitScores proxy;
  uint64_t numel = 0;
  for (size_t u = 0; u < p.units.size(); ++u) {
    numel += p.units[u].numel;
    proxy.push_back({double(u + 1), double(u + 1) / 10, 0});  // nvfp4, fp8, keep
    KnapsackUnit k;
    for (size_t c = 0; c < p.units[u].candidates.size(); ++c) {
      k.cost.push_back(p.units[u].candidates[c].bytes);
      k.score.push_back(proxy[u][c]);
    }
    p.knapsack.push_back(k);
  }
  p.sensitivity = build_sensitivity_report("tiny", p.units, proxy, {});
  p.info = ModelBudgetInfo::from_architecture(arch, numel, 4);
  p.target = {TargetKind::bits, target_bits};
  p.budget = target_budget(p.target, p.info);
  p.result = solve_knapsack(p.knapsack, uint64_t(p.budget));
  p.bits_per_weight = double(p.result.total_bytes) * 8.0 / double(numel);
  p.achieved = p.bits_per_weight;
  for (size_t u = 0; u < p.units.size(); ++u)
    p.chosen_error.push_back(proxy[u][size_t(p.result.choice[u])]);
  return p;
}

TEST(AutoPlanReport, CurveSpansTheChoicesAndPassesThroughTheChosenPlan) {
  const AutoPlan p = tiny_plan(6);
  ASSERT_TRUE(p.result.feasible);
  const AutoPlanReport r = auto_plan_report(p, 12);
  EXPECT_DOUBLE_EQ(r.target_bits, 6.0);
  EXPECT_EQ(r.units.size(), p.units.size());
  EXPECT_EQ(r.sensitivity.rows.size(), p.sensitivity.rows.size());
  ASSERT_GE(r.curve.size(), 3u);
  EXPECT_LE(r.curve.size(), 13u);
  // Smallest choice (all NVFP4: the highest error) to largest (all kept: zero error).
  double total_nvfp4 = 0;
  for (size_t u = 0; u < p.units.size(); ++u) total_nvfp4 += double(u + 1);
  EXPECT_DOUBLE_EQ(r.curve.front().error, total_nvfp4);
  uint64_t largest = 0;
  for (const KnapsackUnit& k : p.knapsack) largest += *std::max_element(k.cost.begin(), k.cost.end());
  EXPECT_EQ(r.curve.back().bytes, largest);
  EXPECT_EQ(r.curve.back().error, 0.0);
  for (size_t i = 1; i < r.curve.size(); ++i) {
    EXPECT_GT(r.curve[i].bits, r.curve[i - 1].bits);
    EXPECT_LE(r.curve[i].error, r.curve[i - 1].error);  // a larger budget never does worse
  }
  EXPECT_LE(r.chosen.bits, 6.0);
  EXPECT_EQ(r.chosen.bytes, p.result.total_bytes);
  EXPECT_EQ(r.chosen.error, p.result.total_score);
  EXPECT_TRUE(std::any_of(r.curve.begin(), r.curve.end(), [&](const ErrorCurvePoint& c) {
    return c.bytes == r.chosen.bytes && c.error == r.chosen.error;
  }));
  EXPECT_NE(r.target.find("--target-bits 6"), std::string::npos);
  EXPECT_TRUE(r.kept.empty());
}

TEST(AutoPlanReport, SizeTargetsAreDrawnAtTheirBudgetInBits) {
  AutoPlan p = tiny_plan(6);
  p.target = {TargetKind::size, 1e6};
  p.budget = 100000;
  const AutoPlanReport r = auto_plan_report(p, 8);
  EXPECT_NEAR(r.target_bits, 100000 * 8.0 / double(p.info.quantizable_numel), 1e-9);
}

}  // namespace
}  // namespace qf

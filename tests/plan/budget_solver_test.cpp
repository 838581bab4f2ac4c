// The budget solver against brute force, bucketing bounds, infeasible targets and the targets'
// byte budgets.
#include "plan/budget_solver.h"

#include "core/error.h"
#include "plan_test_util.h"

#include <gtest/gtest.h>

#include <limits>
#include <random>

namespace qf {
namespace {

struct Brute {
  bool feasible = false;
  double score = std::numeric_limits<double>::infinity();
};

Brute brute_force(const std::vector<KnapsackUnit>& units, uint64_t budget) {
  Brute best;
  std::vector<size_t> idx(units.size(), 0);
  while (true) {
    uint64_t cost = 0;
    double score = 0;
    for (size_t u = 0; u < units.size(); ++u) {
      cost += units[u].cost[idx[u]];
      score += units[u].score[idx[u]];
    }
    if (cost <= budget && score < best.score) {
      best.feasible = true;
      best.score = score;
    }
    size_t u = 0;
    while (u < units.size() && ++idx[u] == units[u].cost.size()) idx[u++] = 0;
    if (u == units.size()) break;
  }
  return best;
}

std::vector<KnapsackUnit> random_units(std::mt19937& rng, uint64_t max_cost) {
  std::uniform_int_distribution<int> nu(1, 6), nc(1, 4);
  std::uniform_int_distribution<uint64_t> cost(1, max_cost);
  std::uniform_real_distribution<double> score(0.0, 10.0);
  std::vector<KnapsackUnit> units(size_t(nu(rng)));
  for (auto& u : units) {
    const int n = nc(rng);
    for (int c = 0; c < n; ++c) {
      u.cost.push_back(cost(rng));
      u.score.push_back(score(rng));
    }
  }
  return units;
}

void check_result(const std::vector<KnapsackUnit>& units, const KnapsackResult& r) {
  ASSERT_EQ(r.choice.size(), units.size());
  uint64_t bytes = 0;
  double score = 0;
  for (size_t u = 0; u < units.size(); ++u) {
    bytes += units[u].cost[size_t(r.choice[u])];
    score += units[u].score[size_t(r.choice[u])];
  }
  EXPECT_EQ(bytes, r.total_bytes);
  EXPECT_DOUBLE_EQ(score, r.total_score);
}

TEST(BudgetSolver, OptimalAgainstBruteForce) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 400; ++trial) {
    const auto units = random_units(rng, trial % 2 ? 60 : 5000);
    uint64_t lo = 0, hi = 0;
    for (const auto& u : units) {
      lo += *std::min_element(u.cost.begin(), u.cost.end());
      hi += *std::max_element(u.cost.begin(), u.cost.end());
    }
    const uint64_t budget = std::uniform_int_distribution<uint64_t>(lo > 10 ? lo - 10 : 0, hi + 5)(rng);
    const KnapsackResult r = solve_knapsack(units, budget);
    const Brute b = brute_force(units, budget);
    ASSERT_EQ(r.feasible, b.feasible) << "trial " << trial;
    check_result(units, r);
    EXPECT_EQ(r.min_bytes, lo);
    if (!b.feasible) continue;
    EXPECT_TRUE(r.exact()) << "trial " << trial;
    EXPECT_LE(r.total_bytes, budget);
    EXPECT_NEAR(r.total_score, b.score, 1e-9) << "trial " << trial;
  }
}

TEST(BudgetSolver, BucketedResultIsFeasibleAndWithinTheBound) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 300; ++trial) {
    const auto units = random_units(rng, 1'000'000'007ull);
    uint64_t lo = 0, hi = 0;
    for (const auto& u : units) {
      lo += *std::min_element(u.cost.begin(), u.cost.end());
      hi += *std::max_element(u.cost.begin(), u.cost.end());
    }
    const uint64_t budget = std::uniform_int_distribution<uint64_t>(lo, hi)(rng);
    const KnapsackResult r = solve_knapsack(units, budget, 64);
    ASSERT_TRUE(r.feasible);
    check_result(units, r);
    EXPECT_LE(r.total_bytes, budget);
    // At least as good as the exact optimum of the budget less the reported bound.
    if (r.rounding_bound_bytes <= budget) {
      const Brute tight = brute_force(units, budget - r.rounding_bound_bytes);
      if (tight.feasible) {
        EXPECT_LE(r.total_score, tight.score + 1e-9) << "trial " << trial;
      }
    }
    EXPECT_LE(r.total_score, brute_force(units, lo).score + 1e-9);  // never worse than min bytes
  }
}

TEST(BudgetSolver, InfeasibleReportsTheSmallestChoice) {
  std::vector<KnapsackUnit> units = {{{10, 20}, {5, 0}}, {{7, 3, 3}, {0, 2, 1}}};
  const KnapsackResult r = solve_knapsack(units, 12);
  EXPECT_FALSE(r.feasible);
  EXPECT_EQ(r.min_bytes, 13u);
  EXPECT_EQ(r.total_bytes, 13u);
  EXPECT_EQ(r.choice, (std::vector<int>{0, 2}));  // among the cheapest, the lower score
}

TEST(BudgetSolver, LooseBudgetTakesBestScoresAndTiesTakeFewerBytes) {
  std::vector<KnapsackUnit> units = {{{10, 20, 30}, {1, 0, 0}}, {{4, 8}, {0, 0}}};
  const KnapsackResult r = solve_knapsack(units, 1000);
  EXPECT_TRUE(r.feasible);
  EXPECT_EQ(r.choice, (std::vector<int>{1, 0}));
  const KnapsackResult t = solve_knapsack(units, 25);  // the DP path
  EXPECT_EQ(t.choice, (std::vector<int>{1, 0}));
  EXPECT_EQ(t.total_bytes, 24u);
}

TEST(BudgetSolver, RejectsBadInput) {
  EXPECT_THROW(solve_knapsack({{{}, {}}}, 10), Error);
  EXPECT_THROW(solve_knapsack({{{1, 2}, {0}}}, 10), Error);
  EXPECT_THROW(solve_knapsack({{{1}, {std::numeric_limits<double>::infinity()}}}, 10), Error);
}

TEST(BudgetTarget, BudgetsFromTargets) {
  ModelBudgetInfo info;
  info.quantizable_numel = 1000;
  info.bf16_linear_bytes = 2000;
  info.bf16_linear_read_bytes = 2000;  // a dense model reads every Linear per token
  info.fixed_bytes = 300;
  info.overhead_bytes = 50;
  info.fixed_read_bytes_per_token = 100;
  info.bf16_fixed_read_bytes_per_token = 100;
  info.layers = 2;
  info.kv_heads = 2;
  info.head_dim = 4;
  EXPECT_EQ(target_budget({TargetKind::bits, 4.5}, info), 562);
  EXPECT_DOUBLE_EQ(target_value({TargetKind::bits, 4.5}, info, 562), 4.496);
  EXPECT_EQ(target_budget({TargetKind::size, 1000}, info), 650);
  EXPECT_DOUBLE_EQ(target_value({TargetKind::size, 1000}, info, 650), 1000);
  Target mem{TargetKind::memory, 2000, 10, 2, 2};
  EXPECT_EQ(kv_cache_bytes(2, 2, 4, 10, 2, 2), 1280u);  // 2 * 2 * 2 * 4 * 10 * 2 * 2
  EXPECT_EQ(target_budget(mem, info), 2000 - 300 - 1280);
  EXPECT_EQ(target_budget({TargetKind::speedup, 3.0}, info), 700 - 100);
  EXPECT_DOUBLE_EQ(target_value({TargetKind::speedup, 3.0}, info, 600), 3.0);
  // Mixtures of experts: the speedup counts the bytes a token reads (1100 of the 2000: top_k of
  // the routed experts), and the budget is for the units' read bytes.
  ModelBudgetInfo moe = info;
  moe.bf16_linear_read_bytes = 1100;
  EXPECT_EQ(target_budget({TargetKind::speedup, 3.0}, moe), 400 - 100);
  EXPECT_DOUBLE_EQ(target_value({TargetKind::speedup, 3.0}, moe, 300), 3.0);
  // Batched decode: 2 sequences of 10 cached tokens each read their KV cache every step (1280
  // bytes in BF16, 640 in FP8) while the weights are read once for both. BF16 step: 2000 + 100
  // + 1280 = 3380; at 3x: 1126 bytes, less the fixed 100 and the FP8 caches' 640.
  const Target batched{TargetKind::speedup, 3.0, 10, 2, 1};
  EXPECT_EQ(target_budget(batched, info), 1126 - 100 - 640);
  EXPECT_NEAR(target_value(batched, info, 386), 3380.0 / 1126.0, 1e-12);
  // The same caches in BF16 leave less for the weights; with no context, batch is moot.
  EXPECT_EQ(target_budget({TargetKind::speedup, 3.0, 10, 2, 2}, info), 1126 - 100 - 1280);
  EXPECT_EQ(target_budget({TargetKind::speedup, 3.0, 0, 4, 2}, info), 700 - 100);
  EXPECT_THROW(target_budget({TargetKind::speedup, 3.0, 10, 0, 2}, info), Error);
  EXPECT_LT(target_budget({TargetKind::size, 100}, info), 0);
  EXPECT_THROW(target_budget({TargetKind::bits, 0}, info), Error);
  EXPECT_THROW(target_budget({TargetKind::memory, 10, 0}, info), Error);
}

TEST(BudgetTarget, KvCacheOfLlama8b) {
  // 32 layers, 8 KV heads of 128, 32k context, BF16: 4 GiB.
  EXPECT_EQ(kv_cache_bytes(32, 8, 128, 32768, 1, 2), uint64_t(4) << 30);
}

TEST(BudgetTarget, InfeasibleMessageNamesTheClosest) {
  const Architecture arch = test::tiny_llama(2);
  ModelBudgetInfo info = ModelBudgetInfo::from_architecture(arch, 10000);
  EXPECT_EQ(info.fixed_bytes, (256u * 64 * 2 + 5 * 64) * 2);
  const std::string m = infeasible_message({TargetKind::bits, 3.0}, info, 5625);
  EXPECT_EQ(m, "--target-bits 3 cannot be met: the smallest choice gives 4.500 bits per weight");
  const std::string s = infeasible_message({TargetKind::speedup, 9.0}, info, 5625);
  EXPECT_NE(s.find("--min-speedup 9 cannot be met"), std::string::npos) << s;
}

}  // namespace
}  // namespace qf

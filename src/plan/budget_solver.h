// The budget solver: an exact multiple-choice knapsack (one candidate per decision unit,
// minimum total score, total bytes within a budget) by dynamic programming, and the functions
// that turn a user's target (bits per weight, checkpoint size, memory with a KV cache, decode
// speedup) into a byte budget for the quantizable Linears.
#pragma once

#include "model/architecture.h"

#include <cstdint>
#include <string>
#include <vector>

namespace qf {

// One unit's options for the solver: costs in bytes and scores (lower is better), same length,
// at least one entry. Scores must be finite.
struct KnapsackUnit {
  std::vector<uint64_t> cost;
  std::vector<double> score;
};

struct KnapsackResult {
  bool feasible = false;    // some choice fits the budget
  std::vector<int> choice;  // per unit, index of the chosen candidate. When infeasible: the
                            // smallest-bytes choice (the closest achievable)
  uint64_t total_bytes = 0;  // bytes of `choice`
  double total_score = 0;    // score of `choice`
  uint64_t min_bytes = 0;    // the smallest total any choice reaches
  uint64_t budget = 0;
  // DP resolution: costs above each unit's minimum are counted in buckets of `granularity`
  // bytes, rounded up. granularity = the gcd of those costs when that keeps the table within
  // max_buckets (then the result is exactly optimal); otherwise larger, and the result is
  // feasible and at least as good as the exact optimum under budget - rounding_bound_bytes.
  uint64_t granularity = 1;
  uint64_t rounding_bound_bytes = 0;  // 0 when exact
  bool exact() const { return rounding_bound_bytes == 0; }
};

// Minimises the sum of scores subject to sum of costs <= budget, one candidate per unit.
// Ties go to the smaller total cost, then to lower candidate indices. Memory: units x buckets
// bytes (max_buckets bounds the buckets). Throws qf::Error for an empty unit, mismatched
// lengths or a non-finite score.
KnapsackResult solve_knapsack(const std::vector<KnapsackUnit>& units, uint64_t budget,
                              uint64_t max_buckets = uint64_t(1) << 19);

// ---- targets ------------------------------------------------------------------------------
// What the targets need to know about the model beyond the searched Linears. All bytes.
struct ModelBudgetInfo {
  uint64_t quantizable_numel = 0;  // weights of all decision units (the --target-bits base)
  uint64_t original_linear_bytes = 0;  // the units' Linears in the checkpoint's dtype
  uint64_t bf16_linear_bytes = 0;      // the same Linears at 2 bytes per weight
  // What one decoded token reads of them in BF16 (speedup base): bf16_linear_bytes, less the
  // routed experts a token does not use (DecisionUnit::read_fraction).
  uint64_t bf16_linear_read_bytes = 0;
  uint64_t fixed_bytes = 0;        // stored tensors never quantized: embeddings, head, norms, biases
  uint64_t overhead_bytes = 0;     // headers, index, configs, tokenizer (the --target-size slack)
  uint64_t fixed_read_bytes_per_token = 0;       // per decoded token, as stored: head + one embedding row + norms
  uint64_t bf16_fixed_read_bytes_per_token = 0;  // the same read in BF16
  // KV cache shape (for --fit-memory)
  int64_t layers = 0;
  int64_t kv_heads = 0;
  int64_t head_dim = 0;

  // Estimates every field from the architecture with weights stored as `dtype`: fixed tensors
  // (embedding, lm_head unless tied, norms, q/k norms, attention biases) and the per-token read
  // (the whole head, one embedding row, the norms); overhead_bytes = 1 MiB (safetensors
  // headers, index, config and tokenizer files are well below it for the supported models;
  // callers that know the real sizes overwrite it).
  static ModelBudgetInfo from_architecture(const Architecture& arch, uint64_t quantizable_numel,
                                           int dtype_size = 2);
};

// Bytes of a KV cache: 2 (K and V) * layers * kv_heads * head_dim * context * batch * dtype_size.
uint64_t kv_cache_bytes(int64_t layers, int64_t kv_heads, int64_t head_dim, int64_t context,
                        int64_t batch, int kv_dtype_size);

enum class TargetKind { bits, size, memory, speedup };

struct Target {
  TargetKind kind = TargetKind::bits;
  double value = 0;        // bits per weight; bytes (size, memory); speedup factor (> 0)
  int64_t context = 0;     // memory, speedup: tokens of KV cache per sequence (speedup: 0 = none)
  int64_t batch = 1;       // memory, speedup: sequences (decoded together: one weight read per step)
  int kv_dtype_size = 2;   // memory, speedup: bytes per cached element (2 = BF16/F16, 1 = FP8)
};

// The byte budget for the units' Linears; negative when even zero Linear bytes would not meet
// the target:
//   bits:    floor(B * quantizable_numel / 8)
//   size:    SIZE - fixed_bytes - overhead_bytes
//   memory:  SIZE - fixed_bytes - kv_cache_bytes(...)
//   speedup: floor((bf16_linear_read_bytes + bf16_fixed_read + KV_bf16) / X)
//              - fixed_read_bytes_per_token - KV,
//            a budget for the Linears' bytes read per decode step (DecisionUnit::read_fraction),
//            KV = kv_cache_bytes(context, batch, kv_dtype_size) the step's cache reads (KV_bf16
//            the same at 2 bytes; 0 with context 0): a step decodes `batch` sequences, reading
//            the weights once and each sequence's cache. The model of a memory-bound decode.
// Throws qf::Error for a non-positive value (or a context < 1 / batch < 1 for memory, a
// context < 0 / batch < 1 for speedup).
int64_t target_budget(const Target& target, const ModelBudgetInfo& info);

// The target's own quantity when the units' Linears take `linear_bytes`: bits per weight,
// checkpoint bytes, memory bytes, or speedup. Gives the closest achievable value from
// KnapsackResult::min_bytes.
double target_value(const Target& target, const ModelBudgetInfo& info, uint64_t linear_bytes);

// "--target-bits 3.5" and so on, for messages.
std::string describe_target(const Target& target);

// One line for an unmet target, e.g. "--target-bits 3.5 cannot be met: the smallest choice
// gives 4.56 bits per weight". `min_linear_bytes` from KnapsackResult::min_bytes.
std::string infeasible_message(const Target& target, const ModelBudgetInfo& info,
                               uint64_t min_linear_bytes);

}  // namespace qf

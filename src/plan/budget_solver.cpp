// Multiple-choice knapsack by dynamic programming over bucketed bytes, and the targets.
#include "plan/budget_solver.h"

#include "core/error.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <utility>

namespace qf {

KnapsackResult solve_knapsack(const std::vector<KnapsackUnit>& units, uint64_t budget,
                              uint64_t max_buckets) {
  KnapsackResult r;
  r.budget = budget;
  const size_t n = units.size();
  std::vector<uint64_t> base(n);
  for (size_t u = 0; u < n; ++u) {
    const KnapsackUnit& k = units[u];
    if (k.cost.empty() || k.cost.size() != k.score.size())
      fail("budget solver: unit {} has {} costs and {} scores", u, k.cost.size(), k.score.size());
    if (k.cost.size() > 255) fail("budget solver: unit {} has more than 255 candidates", u);
    for (double s : k.score)
      if (!std::isfinite(s)) fail("budget solver: unit {} has a non-finite score", u);
    base[u] = *std::min_element(k.cost.begin(), k.cost.end());
    r.min_bytes += base[u];
  }
  // Lexicographic (score, bytes, index): ties go to fewer bytes, then to the earlier candidate.
  auto better = [](double s, uint64_t b, double s0, uint64_t b0) {
    return s < s0 || (s == s0 && b < b0);
  };
  auto finish = [&](std::vector<int> choice) {
    r.choice = std::move(choice);
    r.total_bytes = 0;
    r.total_score = 0;
    for (size_t u = 0; u < n; ++u) {
      r.total_bytes += units[u].cost[size_t(r.choice[u])];
      r.total_score += units[u].score[size_t(r.choice[u])];
    }
    return r;
  };
  if (r.min_bytes > budget) {
    std::vector<int> choice(n);
    for (size_t u = 0; u < n; ++u) {
      int best = -1;
      for (size_t c = 0; c < units[u].cost.size(); ++c)
        if (units[u].cost[c] == base[u] &&
            (best < 0 || units[u].score[c] < units[u].score[size_t(best)]))
          best = int(c);
      choice[u] = best;
    }
    r.feasible = false;
    return finish(std::move(choice));
  }
  r.feasible = true;
  const uint64_t cap = budget - r.min_bytes;
  uint64_t max_extra = 0, g = 0;
  size_t variable_units = 0;
  for (size_t u = 0; u < n; ++u) {
    uint64_t m = 0;
    for (uint64_t c : units[u].cost) {
      m = std::max(m, c - base[u]);
      g = std::gcd(g, c - base[u]);
    }
    max_extra += m;
    if (m > 0) ++variable_units;
  }
  if (max_extra <= cap || g == 0) {
    // The budget binds nothing: each unit takes its best score.
    std::vector<int> choice(n);
    for (size_t u = 0; u < n; ++u) {
      size_t best = 0;
      for (size_t c = 1; c < units[u].cost.size(); ++c)
        if (better(units[u].score[c], units[u].cost[c], units[u].score[best], units[u].cost[best]))
          best = c;
      choice[u] = int(best);
    }
    return finish(std::move(choice));
  }
  // Bucket size: the gcd keeps the DP exact; past max_buckets, round costs up (so whatever the
  // DP picks truly fits) and report how much of the budget that can waste.
  uint64_t cells = std::min(cap, max_extra) / g;
  if (cells > max_buckets) {
    g = (std::min(cap, max_extra) + max_buckets - 1) / std::max<uint64_t>(max_buckets, 1);
    r.rounding_bound_bytes = uint64_t(variable_units) * g;
  }
  r.granularity = g;
  const size_t C = size_t(std::min(cap, max_extra) / g);
  std::vector<double> score(C + 1, 0.0), next(C + 1);
  std::vector<uint64_t> bytes(C + 1, 0), next_bytes(C + 1);
  std::vector<uint8_t> pick(n * (C + 1));
  constexpr double kInf = std::numeric_limits<double>::infinity();
  for (size_t u = 0; u < n; ++u) {
    std::fill(next.begin(), next.end(), kInf);
    std::fill(next_bytes.begin(), next_bytes.end(), std::numeric_limits<uint64_t>::max());
    uint8_t* p = pick.data() + u * (C + 1);
    const KnapsackUnit& k = units[u];
    for (size_t c = 0; c < k.cost.size(); ++c) {
      const uint64_t extra = k.cost[c] - base[u];
      const uint64_t w64 = (extra + g - 1) / g;
      if (w64 > C) continue;
      const size_t w = size_t(w64);
      const double s = k.score[c];
      for (size_t b = w; b <= C; ++b) {
        const double cand = score[b - w] + s;
        const uint64_t cb = bytes[b - w] + extra;
        if (better(cand, cb, next[b], next_bytes[b])) {
          next[b] = cand;
          next_bytes[b] = cb;
          p[b] = uint8_t(c);
        }
      }
    }
    score.swap(next);
    bytes.swap(next_bytes);
  }
  std::vector<int> choice(n);
  size_t b = C;
  for (size_t u = n; u-- > 0;) {
    const int c = pick[u * (C + 1) + b];
    choice[u] = c;
    const uint64_t extra = units[u].cost[size_t(c)] - base[u];
    b -= size_t((extra + g - 1) / g);
  }
  return finish(std::move(choice));
}

// ---- targets ------------------------------------------------------------------------------

ModelBudgetInfo ModelBudgetInfo::from_architecture(const Architecture& arch,
                                                   uint64_t quantizable_numel, int dtype_size) {
  ModelBudgetInfo info;
  const uint64_t ds = uint64_t(dtype_size);
  const uint64_t h = uint64_t(arch.hidden_size);
  const uint64_t vocab = uint64_t(arch.vocab_size);
  info.quantizable_numel = quantizable_numel;
  info.original_linear_bytes = quantizable_numel * ds;
  info.bf16_linear_bytes = quantizable_numel * 2;
  info.bf16_linear_read_bytes = info.bf16_linear_bytes;
  // Elements of the small tensors every layer keeps in float: norms, q/k norms, biases.
  uint64_t small = h;  // the final norm
  for (const LayerSpec& layer : arch.layers)
    for (int s = 0; s < kNormSlots; ++s)
      if (layer.has(NormSlot(s))) small += uint64_t(arch.norm_size(NormSlot(s)));
  for (const LinearModule& m : arch.linears)
    if (m.bias) small += uint64_t(m.out_features);
  const uint64_t embed = vocab * h;
  const uint64_t head = arch.tie_word_embeddings ? 0 : vocab * h;
  info.fixed_bytes = (embed + head + small) * ds;
  info.overhead_bytes = uint64_t(1) << 20;
  // Per token the whole head (tied or not) is read, one embedding row and the small tensors.
  const uint64_t read = vocab * h + h + small;
  info.fixed_read_bytes_per_token = read * ds;
  info.bf16_fixed_read_bytes_per_token = read * 2;
  info.layers = arch.num_layers;
  info.kv_heads = arch.num_kv_heads;
  info.head_dim = arch.head_dim;
  if (arch.is_mla()) {
    // Serving engines cache MLA's latent and rope key once per token (kv_lora_rank +
    // qk_rope_head_dim per layer), not K and V: one "head" of half that (rounded up) in the
    // K-and-V formula.
    info.kv_heads = 1;
    info.head_dim = (arch.mla.kv_lora_rank + arch.mla.qk_rope_head_dim + 1) / 2;
  }
  return info;
}

uint64_t kv_cache_bytes(int64_t layers, int64_t kv_heads, int64_t head_dim, int64_t context,
                        int64_t batch, int kv_dtype_size) {
  if (layers < 0 || kv_heads < 0 || head_dim < 0 || context < 0 || batch < 0 || kv_dtype_size < 0)
    fail("KV cache size of a negative shape");
  return 2 * uint64_t(layers) * uint64_t(kv_heads) * uint64_t(head_dim) * uint64_t(context) *
         uint64_t(batch) * uint64_t(kv_dtype_size);
}

namespace {

uint64_t kv_of(const Target& t, const ModelBudgetInfo& info) {
  return kv_cache_bytes(info.layers, info.kv_heads, info.head_dim, t.context, t.batch,
                        t.kv_dtype_size);
}

// A decode step of the speedup target: what the BF16 model reads (Linears, the fixed reads, and
// the KV caches of `batch` sequences at `context` positions in BF16), and what the quantized
// one reads of its KV caches (in the target's KV dtype). Weights are read once per step for all
// sequences, the caches once per sequence.
std::pair<double, uint64_t> speedup_step_bytes(const Target& t, const ModelBudgetInfo& info) {
  const uint64_t kv16 = kv_cache_bytes(info.layers, info.kv_heads, info.head_dim, t.context,
                                       t.batch, 2);
  return {double(info.bf16_linear_read_bytes + info.bf16_fixed_read_bytes_per_token + kv16),
          kv_of(t, info)};
}

int64_t clamp_signed(double v) {
  if (v >= 9.2e18) return std::numeric_limits<int64_t>::max();
  if (v <= -9.2e18) return std::numeric_limits<int64_t>::min();
  return int64_t(std::floor(v));
}

}  // namespace

int64_t target_budget(const Target& t, const ModelBudgetInfo& info) {
  if (!(t.value > 0) || !std::isfinite(t.value))
    fail("{}: the target must be a positive number", describe_target(t));
  switch (t.kind) {
    case TargetKind::bits:
      return clamp_signed(t.value * double(info.quantizable_numel) / 8.0);
    case TargetKind::size:
      return clamp_signed(t.value) - int64_t(info.fixed_bytes) - int64_t(info.overhead_bytes);
    case TargetKind::memory:
      if (t.context < 1 || t.batch < 1 || t.kv_dtype_size < 1)
        fail("{}: the context and batch must be at least 1", describe_target(t));
      return clamp_signed(t.value) - int64_t(info.fixed_bytes) - int64_t(kv_of(t, info));
    case TargetKind::speedup: {
      if (t.context < 0 || t.batch < 1 || t.kv_dtype_size < 1)
        fail("{}: the context must be at least 0 and the batch at least 1", describe_target(t));
      const auto [base, kv] = speedup_step_bytes(t, info);
      return clamp_signed(base / t.value) - int64_t(info.fixed_read_bytes_per_token) -
             int64_t(kv);
    }
  }
  fail("unknown target kind");
}

double target_value(const Target& t, const ModelBudgetInfo& info, uint64_t linear_bytes) {
  switch (t.kind) {
    case TargetKind::bits:
      return info.quantizable_numel ? 8.0 * double(linear_bytes) / double(info.quantizable_numel)
                                    : 0.0;
    case TargetKind::size:
      return double(linear_bytes + info.fixed_bytes + info.overhead_bytes);
    case TargetKind::memory:
      return double(linear_bytes + info.fixed_bytes + kv_of(t, info));
    case TargetKind::speedup: {
      const auto [base, kv] = speedup_step_bytes(t, info);
      return base / double(linear_bytes + info.fixed_read_bytes_per_token + kv);
    }
  }
  fail("unknown target kind");
}

std::string describe_target(const Target& t) {
  switch (t.kind) {
    case TargetKind::bits: return fmt::format("--target-bits {}", t.value);
    case TargetKind::size: return fmt::format("--target-size {:.0f}", t.value);
    case TargetKind::memory:
      return fmt::format("--fit-memory {:.0f} --context {} --batch {}", t.value, t.context, t.batch);
    case TargetKind::speedup:
      return t.context > 0
                 ? fmt::format("--min-speedup {} --context {} --batch {}", t.value, t.context, t.batch)
                 : fmt::format("--min-speedup {}", t.value);
  }
  return "target";
}

std::string infeasible_message(const Target& t, const ModelBudgetInfo& info,
                               uint64_t min_linear_bytes) {
  const double v = target_value(t, info, min_linear_bytes);
  switch (t.kind) {
    case TargetKind::bits:
      return fmt::format("{} cannot be met: the smallest choice gives {:.3f} bits per weight",
                         describe_target(t), v);
    case TargetKind::size:
      return fmt::format("{} cannot be met: the smallest choice gives a checkpoint of {:.0f} bytes",
                         describe_target(t), v);
    case TargetKind::memory:
      return fmt::format(
          "{} cannot be met: the smallest choice needs {:.0f} bytes (weights plus a KV cache of {} "
          "bytes)",
          describe_target(t), v, kv_of(t, info));
    case TargetKind::speedup:
      return fmt::format("{} cannot be met: the smallest choice gives an estimated {:.3f}x",
                         describe_target(t), v);
  }
  return describe_target(t) + " cannot be met";
}

}  // namespace qf

// Proxy and exact sensitivity scores, monotonisation and rank correlation.
#include "plan/sensitivity.h"

#include "algo/four_over_six.h"
#include "algo/round_to_nearest.h"
#include "core/convert.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "formats/fake_quant.h"
#include "kernels/linear.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>

namespace qf {
namespace {

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define QF_PLAN_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define QF_PLAN_CLONES
#endif

constexpr int64_t kTaskRows = 32;  // dW rows per task: 32 x 4096 floats stay in L2
constexpr int64_t kQuad = 4;       // rows sharing each load of an H row

typedef float v8f __attribute__((vector_size(32)));

// Unaligned load; a macro because returning a 32-byte vector from a function not compiled for
// AVX changes the ABI (-Wpsabi).
#define QF_LOAD8(dst, p) std::memcpy(&(dst), (p), sizeof(v8f))

inline float hsum(const v8f& v) {
  float s = 0.f;
  for (int l = 0; l < 8; ++l) s += v[l];
  return s;
}

// out[r] += d_r H d_r^T for the 4 rows d + r*ld (H symmetric [k, k] float, upper triangle read):
// sum_i d_ri (H_ii d_ri + 2 sum_{j>i} H_ij d_rj). Each H row is loaded once for the 4 rows.
QF_PLAN_CLONES void quad_forms4(const float* h, int64_t k, const float* d, int64_t ld,
                                double* out) {
  const float* d0 = d;
  const float* d1 = d + ld;
  const float* d2 = d + 2 * ld;
  const float* d3 = d + 3 * ld;
  double acc[4] = {0, 0, 0, 0};
  for (int64_t i = 0; i < k; ++i) {
    const float* hi = h + i * k;
    v8f a0 = {}, a1 = {}, a2 = {}, a3 = {};
    int64_t j = i + 1;
    for (; j + 8 <= k; j += 8) {
      v8f hv, x0, x1, x2, x3;
      QF_LOAD8(hv, hi + j);
      QF_LOAD8(x0, d0 + j);
      QF_LOAD8(x1, d1 + j);
      QF_LOAD8(x2, d2 + j);
      QF_LOAD8(x3, d3 + j);
      a0 += hv * x0;
      a1 += hv * x1;
      a2 += hv * x2;
      a3 += hv * x3;
    }
    float s0 = hsum(a0), s1 = hsum(a1), s2 = hsum(a2), s3 = hsum(a3);
    for (; j < k; ++j) {
      s0 += hi[j] * d0[j];
      s1 += hi[j] * d1[j];
      s2 += hi[j] * d2[j];
      s3 += hi[j] * d3[j];
    }
    const double hii = hi[i];
    acc[0] += double(d0[i]) * (hii * d0[i] + 2.0 * s0);
    acc[1] += double(d1[i]) * (hii * d1[i] + 2.0 * s1);
    acc[2] += double(d2[i]) * (hii * d2[i] + 2.0 * s2);
    acc[3] += double(d3[i]) * (hii * d3[i] + 2.0 * s3);
  }
  for (int r = 0; r < 4; ++r) out[r] += acc[r];
}

// The sampled calibration rows of one Linear input, checked against the weight.
struct Samples {
  const float* x = nullptr;  // [n, k]
  int64_t n = 0;
};

Samples samples_of(const LinearStats& stats, int64_t k) {
  const int64_t n = stats.sample_count(k);
  if (n <= 0 || int64_t(stats.samples.size()) != n * k)
    fail("sensitivity: statistics hold {} sampled values, not rows of the weight's {} inputs",
         stats.samples.size(), k);
  return Samples{stats.samples.data(), n};
}

// Buffers reused across candidates and members: fresh allocations of weight-sized arrays cost
// page faults and zeroing comparable to the product itself.
struct Scratch {
  std::vector<float> w;       // fake-quantized weight, then its error dW
  std::vector<uint16_t> b16;  // dW in bf16
  std::vector<float> y;       // X_s dW^T
};

template <class T>
T* sized(std::vector<T>& v, size_t n) {
  if (v.size() < n) v.resize(n);
  return v.data();
}

// sum ||X_s m^T||^2 / n for a float matrix m [rows, k]: m rounded to bf16 (relative 2^-9 per
// element, unbiased; it only measures an error), then one matrix product with the engine's BF16
// prefill kernel (AVX512-BF16 where the CPU has it, else the decoded-tile kernel), tasks of
// output rows, then a sum in a fixed order.
double sampled_energy(const float* m, int64_t rows, int64_t k, const Samples& s,
                      ThreadPool& pool, Scratch& scratch) {
  uint16_t* mb = sized(scratch.b16, size_t(rows * k));
  const int64_t tasks = (rows + kTaskRows - 1) / kTaskRows;
  pool.parallel_for(tasks, [&](int64_t t) {
    const int64_t r0 = t * kTaskRows;
    const int64_t nr = std::min(kTaskRows, rows - r0);
    convert_from_f32(DType::BF16, m + r0 * k, mb + r0 * k, size_t(nr * k));
  });
  LinearWeight lw;
  lw.format = WeightFormat::bf16;
  lw.rows = rows;
  lw.cols = k;
  lw.data = mb;
  float* y = sized(scratch.y, size_t(s.n * rows));
  // The proxy only ranks errors: the fast BF16 product is part of its design (and of its cost).
  linear_forward(lw, s.x, s.n, y, &pool, KernelMode::fast);
  double sum = 0;
  for (int64_t i = 0; i < s.n * rows; ++i) sum += double(y[i]) * double(y[i]);
  return sum / double(s.n);
}

// dst[i] = dst[i] - w[i] (w converted to float), by tasks of rows.
void subtract_weight(float* dst, const WeightRows& w, ThreadPool& pool) {
  const int64_t k = w.cols;
  const size_t esize = dtype_size(w.dtype);
  const int64_t tasks = (w.rows + kTaskRows - 1) / kTaskRows;
  pool.parallel_for(tasks, [&](int64_t t) {
    const int64_t r0 = t * kTaskRows;
    const int64_t nr = std::min(kTaskRows, w.rows - r0);
    std::vector<float> row(static_cast<size_t>(nr * k));
    convert_to_f32(w.dtype, static_cast<const uint8_t*>(w.data) + size_t(r0 * k) * esize,
                   row.data(), row.size());
    float* d = dst + r0 * k;
    for (size_t i = 0; i < row.size(); ++i) d[i] -= row[i];
  });
}

// How one Linear input weights an error matrix, prepared once per input: the sampled rows
// (the fast proxy), or X^T X / tokens, or the diagonal fallback (the reference measure).
struct Weighting {
  int64_t k = 0;
  Samples s;                // sampled rows, or n = 0
  std::vector<float> h;     // [k, k] X^T X / tokens, or empty
  std::vector<float> diag;  // [k] fallback weights when h is empty
};

// sampled: use stats.samples (they must be there); else X^T X, else the diagonal fallback.
Weighting make_weighting(const LinearStats& stats, int64_t k, bool sampled) {
  Weighting wt;
  wt.k = k;
  if (stats.tokens == 0 && stats.samples.empty() && stats.xtx.empty() &&
      stats.channel_mean_abs.empty()) {
    // No calibration token reached this input (a routed expert the router never picked with
    // --calib-moe routed): its errors change no output on the calibration text, so they weigh 0.
    wt.diag.assign(size_t(k), 0.f);
    return wt;
  }
  if (sampled) {
    wt.s = samples_of(stats, k);
    return wt;
  }
  if (!stats.xtx.empty()) {
    if (int64_t(stats.xtx.size()) != k * k)
      fail("sensitivity: X^T X has {} elements, expected {} x {}", stats.xtx.size(), k, k);
    const double inv = 1.0 / double(std::max<int64_t>(stats.tokens, 1));
    wt.h.resize(size_t(k * k));
    for (size_t i = 0; i < wt.h.size(); ++i) wt.h[i] = float(stats.xtx[i] * inv);
    return wt;
  }
  if (int64_t(stats.channel_mean_abs.size()) != k)
    fail("sensitivity: statistics have {} channels (and no X^T X), the weight has {} inputs",
         stats.channel_mean_abs.size(), k);
  wt.diag.resize(size_t(k));
  for (int64_t c = 0; c < k; ++c)
    wt.diag[size_t(c)] = stats.channel_mean_abs[size_t(c)] * stats.channel_mean_abs[size_t(c)];
  return wt;
}

// sum_r m_r H m_r^T for a float matrix m [rows, k] under the weighting. Deterministic for any
// thread count (fixed tasks, summed in order).
double weighted_energy(const float* m, int64_t rows, int64_t k, const Weighting& wt,
                       ThreadPool& pool, Scratch& scratch) {
  if (wt.k != k) fail("sensitivity: statistics have {} channels, the weight has {} inputs", wt.k, k);
  if (wt.s.n > 0) return sampled_energy(m, rows, k, wt.s, pool, scratch);
  const int64_t tasks = (rows + kTaskRows - 1) / kTaskRows;
  std::vector<double> part(size_t(tasks), 0.0);
  pool.parallel_for(tasks, [&](int64_t t) {
    const int64_t r0 = t * kTaskRows;
    const int64_t nr = std::min(kTaskRows, rows - r0);
    const float* d = m + r0 * k;
    double sum = 0;
    if (!wt.h.empty()) {
      const int64_t padded = (nr + kQuad - 1) / kQuad * kQuad;
      std::vector<float> dp(size_t(padded * k), 0.f);
      std::copy_n(d, nr * k, dp.begin());
      std::vector<double> q(size_t(padded), 0.0);
      for (int64_t r = 0; r < padded; r += kQuad)
        quad_forms4(wt.h.data(), k, dp.data() + r * k, k, q.data() + r);
      for (double v : q) sum += v;
    } else {
      for (int64_t r = 0; r < nr; ++r) {
        double row = 0;
        for (int64_t c = 0; c < k; ++c) {
          const double e = d[size_t(r * k + c)];
          row += e * e * wt.diag[size_t(c)];
        }
        sum += row;
      }
    }
    part[size_t(t)] = sum;
  });
  double total = 0;
  for (double p : part) total += p;
  return total;
}

double error_of(const WeightRows& w, const float* w_hat, const Weighting& wt, ThreadPool& pool) {
  std::vector<float> d(w_hat, w_hat + w.rows * w.cols);
  subtract_weight(d.data(), w, pool);
  Scratch scratch;
  return weighted_energy(d.data(), w.rows, w.cols, wt, pool, scratch);
}

// Rows of a weight the sampled proxy fake-quantizes and multiplies at a time: about 8M elements
// (32 MB as float), a multiple of 64 rows, fixed by the shape (not the thread count). Every
// format's scales belong to one row (NVFP4's tensor scale is passed in), so quantizing a slice
// of rows gives exactly those rows of the whole weight's quantization.
int64_t chunk_rows(int64_t rows, int64_t k) {
  const int64_t r = std::max<int64_t>(64, ((int64_t(1) << 23) / std::max<int64_t>(k, 1)) / 64 * 64);
  return std::min(r, rows);
}

WeightRows row_slice(const WeightRows& w, int64_t r0, int64_t n) {
  return WeightRows{static_cast<const uint8_t*>(w.data) + size_t(r0 * w.cols) * dtype_size(w.dtype),
                    w.dtype, n, w.cols};
}

// fake_quantize_choice into out [rows, cols].
void fake_quantize_into(const WeightRows& w, const FormatChoice& choice, float tensor_amax,
                        ThreadPool& pool, float* out) {
  if (choice.is_keep()) {
    convert_to_f32(w.dtype, w.data, out, size_t(w.rows * w.cols));
    return;
  }
  if (!choice_fits(choice, w.cols))
    fail("sensitivity: {} does not fit a weight with {} inputs", choice.name(), w.cols);
  if (tensor_amax <= 0.f) tensor_amax = weight_amax(w, pool).amax;
  if (choice.four_over_six) {
    dequantize(quantize_nvfp4_four_over_six(w, tensor_amax, pool), out, &pool);
    return;
  }
  RtnOptions o;
  o.format = *choice.format;
  o.block = choice.effective_block();
  const QuantizedTensor q = quantize_rtn(w, o, tensor_amax, pool);
  dequantize(q, out, &pool);
}

}  // namespace

std::vector<float> fake_quantize_choice(const WeightRows& w, const FormatChoice& choice,
                                        float tensor_amax, ThreadPool& pool) {
  std::vector<float> out(size_t(w.rows * w.cols));
  fake_quantize_into(w, choice, tensor_amax, pool, out.data());
  return out;
}

double weighted_output_error(const WeightRows& w, const float* w_hat, const LinearStats& stats,
                             ThreadPool& pool) {
  return error_of(w, w_hat, make_weighting(stats, w.cols, false), pool);
}

double sampled_output_error(const WeightRows& w, const float* w_hat, const LinearStats& stats,
                            ThreadPool& pool) {
  return error_of(w, w_hat, make_weighting(stats, w.cols, true), pool);
}

std::vector<double> proxy_unit_scores(const DecisionUnit& unit, std::span<const WeightRows> weights,
                                      std::span<const LinearStats* const> stats, ThreadPool& pool) {
  const size_t m = unit.linears.size();
  if (weights.size() != m || stats.size() != m)
    fail("sensitivity: unit {} has {} Linears, given {} weights and {} statistics", unit.name, m,
         weights.size(), stats.size());
  float group_amax = 0.f;
  for (const WeightRows& w : weights) group_amax = std::max(group_amax, weight_amax(w, pool).amax);
  // Fused members read the same input: prepare its weighting once.
  std::vector<Weighting> weighting(m);
  std::vector<size_t> source(m);
  for (size_t i = 0; i < m; ++i) {
    if (!stats[i]) fail("sensitivity: unit {} has no statistics for member {}", unit.name, i);
    source[i] = i;
    for (size_t j = 0; j < i; ++j)
      if (stats[j] == stats[i] && weights[j].cols == weights[i].cols) {
        source[i] = source[j];
        break;
      }
    if (source[i] == i)
      weighting[i] = make_weighting(*stats[i], weights[i].cols, !stats[i]->samples.empty());
  }
  std::vector<double> scores(unit.candidates.size(), 0.0);
  Scratch scratch;
  for (size_t c = 0; c < unit.candidates.size(); ++c) {
    const FormatChoice& choice = unit.candidates[c].choice;
    if (choice.is_keep()) continue;
    double s = 0;
    for (size_t i = 0; i < m; ++i) {
      const WeightRows& w = weights[i];
      const Weighting& wt = weighting[source[i]];
      // Sampled: a slice of rows at a time (memory: one slice, not the weight, as float).
      const int64_t step = wt.s.n > 0 ? chunk_rows(w.rows, w.cols) : w.rows;
      for (int64_t r0 = 0; r0 < w.rows; r0 += step) {
        const WeightRows part = row_slice(w, r0, std::min(step, w.rows - r0));
        float* d = sized(scratch.w, size_t(part.rows * part.cols));
        fake_quantize_into(part, choice, group_amax, pool, d);
        subtract_weight(d, part, pool);  // in place: dW
        s += weighted_energy(d, part.rows, part.cols, wt, pool, scratch);
      }
    }
    scores[c] = s;
  }
  return scores;
}

UnitScores exact_scores(const Architecture& arch, const std::vector<DecisionUnit>& units,
                        const KlOfAssignment& kl_of_assignment, const std::string& algo,
                        const std::function<void(size_t, size_t)>& progress) {
  if (!kl_of_assignment) fail("sensitivity: no exact measure given");
  size_t total = 0, done = 0;
  for (const DecisionUnit& u : units)
    for (const Candidate& c : u.candidates) total += c.choice.is_keep() ? 0 : 1;
  UnitScores scores(units.size());
  for (size_t u = 0; u < units.size(); ++u) {
    scores[u].assign(units[u].candidates.size(), 0.0);
    for (size_t c = 0; c < units[u].candidates.size(); ++c) {
      const FormatChoice& choice = units[u].candidates[c].choice;
      if (choice.is_keep()) continue;
      Assignment a;
      const ModuleChoice mc = module_choice_of(choice, algo);
      for (size_t m : units[u].linears) a.modules[arch.linears[m].name] = mc;
      scores[u][c] = kl_of_assignment(a);
      if (progress) progress(++done, total);
    }
  }
  return scores;
}

void monotonize(const std::vector<DecisionUnit>& units, UnitScores& scores) {
  if (scores.size() != units.size())
    fail("monotonize: {} score rows for {} units", scores.size(), units.size());
  for (size_t u = 0; u < units.size(); ++u) {
    const auto& cand = units[u].candidates;
    std::vector<double>& s = scores[u];
    if (s.size() != cand.size())
      fail("monotonize: unit {} has {} scores for {} candidates", units[u].name, s.size(),
           cand.size());
    std::vector<size_t> order(cand.size());
    std::iota(order.begin(), order.end(), size_t(0));
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return cand[a].bytes < cand[b].bytes; });
    // Candidates of equal bytes (nvfp4 and nvfp4:4o6) are alternatives, not a step up: each
    // takes the best of the smaller ones only, so the better of the two stays the better.
    double below = std::numeric_limits<double>::infinity();  // best of smaller byte counts
    for (size_t k = 0; k < order.size();) {
      size_t end = k;
      while (end < order.size() && cand[order[end]].bytes == cand[order[k]].bytes) ++end;
      double level = below;
      for (size_t t = k; t < end; ++t) {
        const size_t i = order[t];
        if (cand[i].choice.is_keep()) s[i] = 0.0;
        s[i] = std::min(s[i], below);
        level = std::min(level, s[i]);
      }
      below = level;
      k = end;
    }
  }
}

namespace {

std::vector<double> average_ranks(std::span<const double> v) {
  std::vector<size_t> order(v.size());
  std::iota(order.begin(), order.end(), size_t(0));
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return v[a] < v[b]; });
  std::vector<double> rank(v.size());
  for (size_t i = 0; i < order.size();) {
    size_t j = i;
    while (j + 1 < order.size() && v[order[j + 1]] == v[order[i]]) ++j;
    const double r = 0.5 * double(i + j) + 1.0;
    for (size_t t = i; t <= j; ++t) rank[order[t]] = r;
    i = j + 1;
  }
  return rank;
}

}  // namespace

double spearman_correlation(std::span<const double> a, std::span<const double> b) {
  if (a.size() != b.size())
    fail("rank correlation of {} and {} values", a.size(), b.size());
  const double nan = std::numeric_limits<double>::quiet_NaN();
  if (a.size() < 2) return nan;
  const std::vector<double> ra = average_ranks(a), rb = average_ranks(b);
  const double mean = 0.5 * double(a.size() + 1);
  double sab = 0, saa = 0, sbb = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    sab += (ra[i] - mean) * (rb[i] - mean);
    saa += (ra[i] - mean) * (ra[i] - mean);
    sbb += (rb[i] - mean) * (rb[i] - mean);
  }
  if (saa == 0 || sbb == 0) return nan;
  return sab / std::sqrt(saa * sbb);
}

}  // namespace qf

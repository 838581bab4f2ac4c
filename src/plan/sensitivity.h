// Sensitivity of the model to quantizing one decision unit in one format: the cheap layer-local
// proxy (output error weighted by the calibration inputs' second moments), the exact measure
// through a caller-supplied KL of the final logits, ModelOpt's monotonisation, and the rank
// agreement between the two.
#pragma once

#include "algo/layer_stats.h"
#include "formats/weight_rows.h"
#include "plan/candidates.h"

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

namespace qf {

class ThreadPool;

// Scores indexed [unit][candidate] (the unit's candidates order). Lower = less sensitive.
using UnitScores = std::vector<std::vector<double>>;

// out [rows, cols] = dequantize(quantize_rtn(w)) in `choice` (max calibration; NVFP4 with the
// tensor scale of `tensor_amax`, the fused group's max |w|; 0 = w's own). keep: w as float.
// Throws qf::Error if the choice does not fit w.
std::vector<float> fake_quantize_choice(const WeightRows& w, const FormatChoice& choice,
                                        float tensor_amax, ThreadPool& pool);

// The reference measure: the expected squared error of the Linear's output per token, summed
// over outputs:
//   tr(dW H dW^T),  dW = w_hat - w,  H = X^T X / tokens  (stats.xtx, stats.tokens)
// If stats.xtx is empty, the diagonal fallback sum_{n,c} dW[n,c]^2 * m_c with m_c =
// channel_mean_abs[c]^2 (a lower bound of the mean square, by Jensen; the statistics collect no
// mean square). w_hat: float32 [rows, cols]. Deterministic for any thread count (rows are summed
// in fixed tasks, in order). Statistics of no token at all (a routed expert that calibration
// never reached) give 0: the weight's error moves no output on the calibration text. Throws
// qf::Error if the statistics do not match cols or, having seen tokens, hold neither xtx nor
// channel_mean_abs. Costs rows x cols^2 (and the calibration pass in^2 per
// token to collect X^T X): tests and small models only; the pipeline uses the sampled measure.
double weighted_output_error(const WeightRows& w, const float* w_hat, const LinearStats& stats,
                             ThreadPool& pool);

// The fast proxy: the same quantity with H replaced by H_s = X_s^T X_s / n over the n sampled
// calibration rows X_s (stats.samples, a uniform reservoir sample of the tokens, so H_s is an
// unbiased estimate of H):
//   tr(dW H_s dW^T) = ||X_s dW^T||_F^2 / n  (the mean squared output error on the samples),
// computed as one matrix product (kernels' linear_forward, dW rounded to bf16: the engine's BF16
// prefill kernel; relative error ~1e-3): n x rows x cols per call, no X^T X. Deterministic for
// any thread count. Throws qf::Error if stats.samples is empty or not rows of cols values.
double sampled_output_error(const WeightRows& w, const float* w_hat, const LinearStats& stats,
                            ThreadPool& pool);

// Proxy scores of one unit, one per candidate (keep = 0): the sum over the unit's Linears of
// the output error for that candidate's fake-quantized weights (NVFP4 tensor scale from the
// members' common max |w|, as the exporter unifies it); each weight is fake-quantized once per
// candidate. The error is sampled_output_error when the member's statistics hold samples
// (computed in slices of ~8M weight elements, which quantize exactly as the whole weight's
// rows: memory one slice), else weighted_output_error. weights[i], stats[i] belong to unit.linears[i] (members of a fused
// group usually share one LinearStats; it is prepared once).
std::vector<double> proxy_unit_scores(const DecisionUnit& unit, std::span<const WeightRows> weights,
                                      std::span<const LinearStats* const> stats, ThreadPool& pool);

// The exact measure: KL(original || quantized) of the final logits on the calibration tokens
// for a whole assignment (the engine computes it).
using KlOfAssignment = std::function<double(const Assignment&)>;

// For every unit and every non-keep candidate, kl_of_assignment of the assignment where only
// that unit is quantized (everything else kept), with `algo`. keep scores 0 (not evaluated).
// `progress(done, total)` (optional) after each evaluation.
UnitScores exact_scores(const Architecture& arch, const std::vector<DecisionUnit>& units,
                        const KlOfAssignment& kl_of_assignment, const std::string& algo = "max",
                        const std::function<void(size_t, size_t)>& progress = {});

// ModelOpt's monotonisation (specs modelopt-nvfp4 §7): per unit, candidates sorted by bytes
// (most compressed first); each score becomes min(score, the best score of fewer bytes), so
// spending more bytes never looks worse; keep is 0. Candidates of equal bytes (nvfp4 and
// nvfp4:4o6) do not lower each other (ModelOpt chains them in signature order, which would
// make the later one look as good as the better one). In place.
void monotonize(const std::vector<DecisionUnit>& units, UnitScores& scores);

// Spearman rank correlation of a and b (average ranks for ties; Pearson of the ranks). NaN if
// fewer than 2 pairs or either side is constant. Throws qf::Error for different lengths.
double spearman_correlation(std::span<const double> a, std::span<const double> b);

}  // namespace qf

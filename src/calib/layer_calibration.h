// Layer-by-layer calibration: the hidden states of all calibration windows go through one
// decoder layer at a time while an observer collects, per Linear input, the statistics the
// algorithms need (algo/layer_stats.h) and, per attention layer, the K and V amax.
// Memory: the model's mapped weights (one layer's pages in use at a time) plus the hidden
// states [samples, seq, hidden] float32 and one window of run state.
#pragma once

#include "algo/layer_stats.h"
#include "engine/model.h"

#include <array>
#include <cstdint>
#include <functional>
#include <random>
#include <utility>
#include <vector>

namespace qf {

class ThreadPool;

struct CaptureOptions {
  // Accumulate X^T X (double; in^2 per input; GPTQ needs it). Routed experts accumulate none:
  // they keep all their rows instead (`samples`), and the caller builds one expert's X^T X at a
  // time with xtx_of_rows, so memory holds one expert's Hessian, not a layer's worth.
  bool xtx = false;
  int64_t sample_rows = 512;  // input rows kept per Linear input (seeded reservoir sample)
  uint64_t seed = 0;
  // MoE: every routed expert sees every row of its layer (ModelOpt's calibration), instead of
  // the rows routed to it (LayerObserver::experts_see_all_rows).
  bool experts_see_all_rows = false;
};

// sum over rows of x x^T [cols, cols] (double, full symmetric) of `rows` [n, cols], summed in
// row order exactly as StatsAccumulator does, so the result is the same bits.
std::vector<double> xtx_of_rows(const std::vector<float>& rows, int64_t cols, ThreadPool* pool);

// Accumulates the LinearStats of one input stream [*, cols], in the order rows arrive.
// Deterministic for a given row order, seed and options, whatever the pool size.
class StatsAccumulator {
 public:
  StatsAccumulator(int64_t cols, const CaptureOptions& options, uint64_t stream_seed);
  // Adds x [n, cols]. Throws qf::Error for a NaN or Inf value.
  void add(const float* x, int64_t n, ThreadPool* pool);
  // The statistics: input_amax, channel_amax, channel_mean_abs, xtx (full symmetric matrix,
  // when enabled), samples (in arrival order of the kept rows). X^T X and the kept rows are
  // moved out, not copied (an MoE expert keeps all its rows for GPTQ: a copy would double the
  // peak), so the accumulator is spent: call it once, last.
  LinearStats finish() &&;

 private:
  int64_t cols_;
  CaptureOptions opt_;
  int64_t tokens_ = 0;
  float amax_ = 0.f;
  std::vector<float> channel_amax_;
  std::vector<double> sum_abs_;
  std::vector<double> xtx_;  // upper triangle filled during add
  std::vector<float> samples_;
  std::vector<int64_t> sample_order_;  // arrival index of each kept row
  std::mt19937_64 rng_;
};

// What one layer's calibration produced.
struct LayerCapture {
  // Indexed by LayerInput. In an MoE layer ffn_norm holds every row (the input of the router
  // and the shared expert) and mlp_act the shared expert's activation.
  std::array<LinearStats, kLayerInputs> inputs;
  // MoE layers: per routed expert, its routed rows of ffn_norm [0] and its activation [1]
  // (tokens 0 and no data for an expert that received no token).
  std::vector<std::array<LinearStats, 2>> experts;
  float k_amax = 0.f, v_amax = 0.f;              // post-RoPE keys / values, per tensor
  double output_mean_square = 0;                 // mean over tokens of ||h||^2, h = the layer's
                                                 // output hidden state (the residual stream)
  // With LayerCalibrationOptions::quantized_inputs: the hidden states the layer ran on (the
  // outputs of the already-quantized layers before it), [windows, seq, hidden] float32, valid
  // during the callback (block-wise tuning trains on them); null otherwise.
  const float* layer_input = nullptr;
  int64_t windows = 0, seq = 0;
  const LinearStats& input(LayerInput which) const { return inputs[size_t(which)]; }
  // The input statistics of Linear `m` of this layer.
  const LinearStats& of(const LinearModule& m) const {
    if (m.expert >= 0) return experts[size_t(m.expert)][m.input == LayerInput::mlp_act ? 1 : 0];
    return input(m.input);
  }
  LinearStats& of(const LinearModule& m) {
    return const_cast<LinearStats&>(std::as_const(*this).of(m));
  }
};

struct LayerCalibrationOptions {
  CaptureOptions capture;
  // Feed each layer the outputs of the already-quantized previous layers: the callback's
  // returned weights (fake-quantized) advance the hidden states instead of the originals.
  bool quantized_inputs = false;
  bool progress = false;
};

struct LayerCalibrationReport {
  int64_t layers = 0;
  int64_t tokens = 0;              // calibration tokens (samples x seq)
  double forward_seconds = 0;      // layer forwards and statistics, callbacks excluded
  double callback_seconds = 0;     // time spent in the callback (the algorithms)
  uint64_t activation_bytes = 0;   // hidden states + one window of scratch
  double tokens_per_second() const { return forward_seconds > 0 ? double(tokens) / forward_seconds : 0; }
};

// Called once per layer, in order, with its capture. May return weights for the layer
// (e.g. fake-quantized) that advance the hidden states when quantized_inputs is set; they must
// stay valid until the call returns to calibrate_layers' loop (the next callback).
using LayerCallback = std::function<const LayerWeights*(int64_t layer, LayerCapture& capture)>;

// Runs every window (each of the same length <= model.max_seq()) through the model layer by
// layer. Throws qf::Error for empty or ragged windows and for NaN/Inf activations.
LayerCalibrationReport calibrate_layers(Model& model,
                                        const std::vector<std::vector<int32_t>>& windows,
                                        const LayerCalibrationOptions& options,
                                        const LayerCallback& callback);

}  // namespace qf

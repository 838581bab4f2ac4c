// Layer-by-layer calibration and the statistics accumulators behind it.
#include "calib/layer_calibration.h"

#include "core/error.h"
#include "core/progress.h"
#include "core/thread_pool.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <memory>
#include <numeric>

namespace qf {

namespace {

// Adds the upper triangle of x^T x for rows x [n, cols] to xtx [cols, cols]; one task per row
// i, each element summing its rows in order (deterministic whatever the pool).
void add_upper_xtx(const float* x, int64_t n, int64_t cols, double* xtx, ThreadPool* pool) {
  auto body = [&](int64_t i) {
    double* out = xtx + i * cols;
    for (int64_t t = 0; t < n; ++t) {
      const float* row = x + t * cols;
      const double xi = row[i];
      if (xi == 0.0) continue;
      for (int64_t j = i; j < cols; ++j) out[j] += xi * double(row[j]);
    }
  };
  if (pool) pool->parallel_for(cols, body);
  else for (int64_t i = 0; i < cols; ++i) body(i);
}

void mirror_upper(std::vector<double>& xtx, int64_t cols) {
  for (int64_t i = 0; i < cols; ++i)
    for (int64_t j = 0; j < i; ++j) xtx[size_t(i * cols + j)] = xtx[size_t(j * cols + i)];
}

}  // namespace

std::vector<double> xtx_of_rows(const std::vector<float>& rows, int64_t cols, ThreadPool* pool) {
  std::vector<double> xtx(size_t(cols * cols), 0.0);
  add_upper_xtx(rows.data(), int64_t(rows.size()) / cols, cols, xtx.data(), pool);
  mirror_upper(xtx, cols);
  return xtx;
}

StatsAccumulator::StatsAccumulator(int64_t cols, const CaptureOptions& options, uint64_t stream_seed)
    : cols_(cols), opt_(options), channel_amax_(size_t(cols), 0.f), sum_abs_(size_t(cols), 0.0),
      rng_(options.seed * 0x9E3779B97F4A7C15ull + stream_seed) {
  if (opt_.xtx) xtx_.assign(size_t(cols * cols), 0.0);
}

void StatsAccumulator::add(const float* x, int64_t n, ThreadPool* pool) {
  for (int64_t t = 0; t < n; ++t) {
    const float* row = x + t * cols_;
    for (int64_t c = 0; c < cols_; ++c) {
      const float a = std::fabs(row[c]);
      if (!std::isfinite(a)) fail("calibration: a Linear input holds NaN or Inf");
      channel_amax_[size_t(c)] = std::max(channel_amax_[size_t(c)], a);
      sum_abs_[size_t(c)] += double(a);
    }
    // Reservoir sample over all rows in arrival order.
    const int64_t k = tokens_ + t;
    if (opt_.sample_rows > 0) {
      if (k < opt_.sample_rows) {
        samples_.insert(samples_.end(), row, row + cols_);
        sample_order_.push_back(k);
      } else {
        const uint64_t j = rng_() % uint64_t(k + 1);
        if (j < uint64_t(opt_.sample_rows)) {
          std::copy_n(row, cols_, samples_.begin() + int64_t(j) * cols_);
          sample_order_[size_t(j)] = k;
        }
      }
    }
  }
  for (float a : channel_amax_) amax_ = std::max(amax_, a);
  if (opt_.xtx) add_upper_xtx(x, n, cols_, xtx_.data(), pool);
  tokens_ += n;
}

LinearStats StatsAccumulator::finish() && {
  LinearStats s;
  s.tokens = tokens_;
  s.input_amax = amax_;
  s.channel_amax = channel_amax_;
  s.channel_mean_abs.resize(size_t(cols_));
  for (int64_t c = 0; c < cols_; ++c)
    s.channel_mean_abs[size_t(c)] = tokens_ ? float(sum_abs_[size_t(c)] / double(tokens_)) : 0.f;
  if (opt_.xtx) {
    s.xtx = std::move(xtx_);
    mirror_upper(s.xtx, cols_);
  }
  // Kept rows in arrival order, so the sample does not depend on replacement history.
  if (std::is_sorted(sample_order_.begin(), sample_order_.end())) {
    s.samples = std::move(samples_);
    return s;
  }
  std::vector<size_t> idx(sample_order_.size());
  std::iota(idx.begin(), idx.end(), size_t(0));
  std::sort(idx.begin(), idx.end(), [&](size_t a, size_t b) { return sample_order_[a] < sample_order_[b]; });
  s.samples.reserve(samples_.size());
  for (size_t i : idx)
    s.samples.insert(s.samples.end(), samples_.begin() + int64_t(i) * cols_,
                     samples_.begin() + int64_t(i + 1) * cols_);
  return s;
}

namespace {

class CaptureObserver final : public LayerObserver {
 public:
  CaptureObserver(const Architecture& a, const CaptureOptions& o, int64_t layer, ThreadPool* pool)
      : pool_(pool), layer_(layer) {
    const LayerSpec& spec = a.layers[size_t(layer)];
    // An MoE layer's dense mlp_act is its shared expert's activation (none: never fed). The
    // latent inputs exist with multi-head latent attention only, the SSM output and the MoE
    // latent with Nemotron-H (0 columns otherwise); a Linear reading an input (not a routed
    // expert: those are kept apart below) says its width.
    const int64_t act = !spec.is_moe ? a.intermediate_size : spec.moe.shared_intermediate;
    int64_t cols[kLayerInputs] = {a.hidden_size, a.num_heads * a.v_head_dim, a.hidden_size,
                                  act, a.mla.q_lora_rank, a.mla.kv_lora_rank, 0, 0};
    for (size_t i : spec.linears)
      if (a.linears[i].expert < 0) cols[size_t(a.linears[i].input)] = a.linears[i].in_features;
    for (int i = 0; i < kLayerInputs; ++i) {
      // The four dense inputs keep the stream seeds they had before the latent ones existed,
      // so that a model's calibration samples do not change.
      const uint64_t stream = i < 4 ? uint64_t(layer) * 4 + uint64_t(i)
                                    : (uint64_t(layer + 1) << 32) + uint64_t(i);
      acc_.emplace_back(cols[i], o, stream);
    }
    expert_options_ = o;
    if (spec.is_moe) {
      experts_.resize(size_t(spec.moe.num_experts));
      expert_cols_ = {spec.moe.latent > 0 ? spec.moe.latent : a.hidden_size,
                      spec.moe.expert_intermediate};
      // See CaptureOptions::xtx: all rows instead of X^T X.
      if (o.xtx) {
        expert_options_.xtx = false;
        expert_options_.sample_rows = std::numeric_limits<int64_t>::max();
      }
    }
  }
  void linear_input(LayerInput which, int expert, const float* x, int64_t n, int64_t) override {
    if (expert < 0) {
      acc_[size_t(which)].add(x, n, pool_);
      return;
    }
    // Created on an expert's first rows: an expert's X^T X is only paid for once it is used.
    const size_t j = which == LayerInput::mlp_act ? 1 : 0;
    auto& acc = experts_[size_t(expert)][j];
    if (!acc)
      acc = std::make_unique<StatsAccumulator>(
          expert_cols_[j], expert_options_,
          (uint64_t(layer_ + 1) << 40) ^ (uint64_t(expert) * 2 + j));
    acc->add(x, n, pool_);
  }
  bool experts_see_all_rows() const override { return expert_options_.experts_see_all_rows; }
  void key_value(const float* k, const float* v, int64_t n, int64_t k_dim,
                 int64_t v_dim) override {
    for (int64_t i = 0; i < n * k_dim; ++i) k_amax_ = std::max(k_amax_, std::fabs(k[i]));
    for (int64_t i = 0; i < n * v_dim; ++i) v_amax_ = std::max(v_amax_, std::fabs(v[i]));
    if (!std::isfinite(k_amax_) || !std::isfinite(v_amax_))
      fail("calibration: keys or values hold NaN or Inf");
  }
  // Moves the statistics out (StatsAccumulator::finish): call once.
  LayerCapture finish() {
    LayerCapture c;
    for (int i = 0; i < kLayerInputs; ++i)
      c.inputs[size_t(i)] = std::move(acc_[size_t(i)]).finish();
    c.experts.resize(experts_.size());
    for (size_t e = 0; e < experts_.size(); ++e)
      for (size_t j = 0; j < 2; ++j)
        if (auto& acc = experts_[e][j]) {
          c.experts[e][j] = std::move(*acc).finish();
          acc.reset();
        }
    c.k_amax = k_amax_;
    c.v_amax = v_amax_;
    return c;
  }

 private:
  ThreadPool* pool_;
  CaptureOptions expert_options_;
  int64_t layer_;
  std::vector<StatsAccumulator> acc_;
  std::vector<std::array<std::unique_ptr<StatsAccumulator>, 2>> experts_;
  std::array<int64_t, 2> expert_cols_{};
  float k_amax_ = 0.f, v_amax_ = 0.f;
};

}  // namespace

LayerCalibrationReport calibrate_layers(Model& model,
                                        const std::vector<std::vector<int32_t>>& windows,
                                        const LayerCalibrationOptions& options,
                                        const LayerCallback& callback) {
  using clock = std::chrono::steady_clock;
  const Architecture& a = model.arch();
  if (windows.empty()) fail("calibration: no calibration windows");
  const int64_t seq = int64_t(windows[0].size());
  for (const auto& w : windows)
    if (int64_t(w.size()) != seq || seq == 0) fail("calibration: windows must share one non-zero length");
  const int64_t dim = a.hidden_size, per = seq * dim;

  LayerCalibrationReport report;
  report.layers = a.num_layers;
  report.tokens = seq * int64_t(windows.size());
  const auto t0 = clock::now();
  std::vector<float> hidden(size_t(per) * windows.size());
  std::vector<float> scratch(options.quantized_inputs ? size_t(per) : 0);
  report.activation_bytes = (hidden.size() + scratch.size()) * sizeof(float);
  for (size_t w = 0; w < windows.size(); ++w) model.embed(windows[w], hidden.data() + int64_t(w) * per);

  // Counted in calibration tokens through the whole model (each window adds 1/layers of its
  // tokens per layer), so the rate is the summary's tokens/s.
  Progress progress("calibrate", ProgressUnit::tokens, double(report.tokens), options.progress);
  const double per_window_layer = double(seq) / double(std::max<int64_t>(a.num_layers, 1));
  for (int64_t l = 0; l < a.num_layers; ++l) {
    progress.set_detail(fmt::format("layer {}/{}", l + 1, a.num_layers));
    CaptureObserver obs(a, options.capture, l, &model.pool());
    double out_square = 0;
    for (size_t w = 0; w < windows.size(); ++w) {
      float* h = hidden.data() + int64_t(w) * per;
      float* out = h;
      if (options.quantized_inputs) {
        std::copy_n(h, per, scratch.data());
        out = scratch.data();
      }
      model.forward_layer(l, out, seq, &obs);
      for (int64_t i = 0; i < per; ++i) out_square += double(out[i]) * double(out[i]);
      progress.advance(per_window_layer);
    }
    LayerCapture capture = obs.finish();
    capture.output_mean_square = out_square / double(report.tokens);
    if (options.quantized_inputs) {
      capture.layer_input = hidden.data();  // untouched: the layer wrote into scratch
      capture.windows = int64_t(windows.size());
      capture.seq = seq;
    }
    const auto c0 = clock::now();
    // The callback's algorithms draw their own bar; this phase's clock stops meanwhile.
    progress.pause();
    const LayerWeights* replaced = callback ? callback(l, capture) : nullptr;
    progress.resume();
    report.callback_seconds += std::chrono::duration<double>(clock::now() - c0).count();
    if (options.quantized_inputs)
      for (size_t w = 0; w < windows.size(); ++w)
        model.forward_layer(l, hidden.data() + int64_t(w) * per, seq, nullptr, replaced);
    // Drop the layer's mapped pages: resident memory stays one layer plus the activations.
    // (Every family's names hold ".layers.N.": model.layers.N for most, backbone.layers.N for
    // Nemotron-H.)
    if (const auto& ck = model.weights().checkpoint) {
      const std::string infix = fmt::format(".layers.{}.", l);
      for (const auto& t : ck->tensors())
        if (t.name.find(infix) != std::string::npos) t.file->release(*t.entry);
    }
  }
  progress.finish();
  report.forward_seconds =
      std::chrono::duration<double>(clock::now() - t0).count() - report.callback_seconds;
  return report;
}

}  // namespace qf

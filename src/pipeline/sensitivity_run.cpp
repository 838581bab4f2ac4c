// Sensitivity analysis over a real checkpoint: the calibration pass feeds proxy_unit_scores
// (sampled rows, no X^T X) layer by layer, relative to the residual stream's energy; the exact
// measure reruns the model with one unit's weights fake-quantized.
#include "pipeline/sensitivity_run.h"

#include "calib/layer_calibration.h"
#include "core/error.h"
#include "core/progress.h"
#include "core/tensor.h"
#include "core/thread_pool.h"
#include "io/checkpoint.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>

namespace qf {
namespace {

using clock_type = std::chrono::steady_clock;
double since(clock_type::time_point t) {
  return std::chrono::duration<double>(clock_type::now() - t).count();
}

// The stored weight of a Linear as quantizer input; it must be a float tensor.
WeightRows weight_of(const Model& model, const LinearModule& m) {
  const auto& ck = model.weights().checkpoint;
  const CheckpointTensor* t = ck ? ck->find(m.weight_name()) : nullptr;
  if (!t) fail("sensitivity: tensor '{}' missing", m.weight_name());
  const TensorData d = read_tensor(*t);
  const TensorView& v = d.view;
  if (!is_quantizable_float(v.dtype) || v.shape.size() != 2)
    fail("sensitivity: tensor '{}' is {} {}, expected a float matrix", m.weight_name(),
         dtype_name(v.dtype), shape_str(v.shape));
  return WeightRows{v.data, v.dtype, v.rows(), v.cols(), d.owned};
}

// x [n, vocab] -> log-softmax in place.
void log_softmax_rows(float* x, int64_t n, int64_t vocab) {
  for (int64_t i = 0; i < n; ++i) {
    float* r = x + i * vocab;
    const float mx = *std::max_element(r, r + vocab);
    double s = 0;
    for (int64_t v = 0; v < vocab; ++v) s += std::exp(double(r[v] - mx));
    const float lse = mx + float(std::log(s));
    for (int64_t v = 0; v < vocab; ++v) r[v] -= lse;
  }
}

}  // namespace

AssignmentKl::AssignmentKl(Model& model, std::vector<std::vector<int32_t>> windows)
    : model_(model), windows_(std::move(windows)) {
  if (windows_.empty()) fail("sensitivity: no calibration windows");
  const Architecture& a = model_.arch();
  for (const auto& w : windows_) {
    const int64_t seq = int64_t(w.size());
    std::vector<float> x(size_t(seq * a.hidden_size));
    model_.embed(w, x.data());
    for (int64_t l = 0; l < a.num_layers; ++l) model_.forward_layer(l, x.data(), seq);
    std::vector<float> logits(size_t(seq * a.vocab_size));
    model_.head(x.data(), seq, logits.data());
    log_softmax_rows(logits.data(), seq, a.vocab_size);
    log_p_.push_back(std::move(logits));
  }
}

double AssignmentKl::operator()(const Assignment& assignment) {
  const Architecture& a = model_.arch();
  ThreadPool& pool = model_.pool();
  // Replacement layers for every layer with a quantized module; fused groups share max |w|.
  std::map<int64_t, LayerWeights> replaced;
  for (size_t i = 0; i < a.linears.size(); ++i) {
    const LinearModule& m = a.linears[i];
    const ModuleChoice c = assignment.at(m.name);
    if (c.format.is_keep()) continue;
    float amax = 0.f;
    const std::vector<size_t> members =
        m.group >= 0 ? a.fused_groups[size_t(m.group)] : std::vector<size_t>{i};
    for (size_t k : members) amax = std::max(amax, weight_amax(weight_of(model_, a.linears[k]), pool).amax);
    auto it = replaced.find(m.layer);
    if (it == replaced.end())
      it = replaced.emplace(m.layer, model_.weights().layers[size_t(m.layer)]).first;
    const WeightRows w = weight_of(model_, m);
    auto data = std::make_shared<std::vector<float>>(fake_quantize_choice(w, candidate_of(c), amax, pool));
    EngineLinear& L = it->second.linears[size_t(m.slot)];
    L.w = LinearWeight{};
    L.w.format = WeightFormat::f32;
    L.w.rows = w.rows;
    L.w.cols = w.cols;
    L.w.data = data->data();
    L.storage = std::move(data);
  }
  double total = 0;
  int64_t positions = 0;
  for (size_t wi = 0; wi < windows_.size(); ++wi) {
    const auto& w = windows_[wi];
    const int64_t seq = int64_t(w.size());
    std::vector<float> x(size_t(seq * a.hidden_size));
    model_.embed(w, x.data());
    for (int64_t l = 0; l < a.num_layers; ++l) {
      auto it = replaced.find(l);
      model_.forward_layer(l, x.data(), seq, nullptr, it == replaced.end() ? nullptr : &it->second);
    }
    std::vector<float> logq(size_t(seq * a.vocab_size));
    model_.head(x.data(), seq, logq.data());
    log_softmax_rows(logq.data(), seq, a.vocab_size);
    const std::vector<float>& logp = log_p_[wi];
    for (int64_t t = 0; t < seq; ++t) {
      double kl = 0;
      for (int64_t v = 0; v < a.vocab_size; ++v) {
        const size_t k = size_t(t * a.vocab_size + v);
        kl += std::exp(double(logp[k])) * (double(logp[k]) - double(logq[k]));
      }
      total += std::max(0.0, kl);
      ++positions;
    }
  }
  return positions ? total / double(positions) : 0.0;
}

SensitivityResult run_sensitivity(const SourceModel& source, const SensitivityOptions& options) {
  if (options.formats.empty()) fail("sensitivity: no candidate formats given");
  source.require_unquantized("sensitivity");
  const std::filesystem::path& model_dir = source.dir;
  const CalibrationData data = load_calibration_data(options.calib, source.tokenizer());
  ModelOptions mo;
  mo.threads = options.threads;
  mo.max_seq = options.calib.seq_len;
  mo.kernels = options.kernels;
  auto model = Model::load(source.checkpoint, mo);
  if (model->weights().quantization != "none")
    fail("{}: sensitivity needs an unquantized checkpoint (this one is {})", model_dir.string(),
         model->weights().quantization);

  SensitivityResult r;
  r.arch = model->arch();
  const Architecture& a = r.arch;
  if (a.linears.empty()) fail("{}: no Linear modules to analyse", model_dir.string());
  r.original_dtype = weight_of(*model, a.linears[0]).dtype;
  CandidateOptions co;
  co.formats = options.formats;
  co.original_dtype = r.original_dtype;
  co.stored_bytes = options.stored_bytes;
  co.excluded = options.excluded;
  co.experts_per_layer = options.experts_per_layer;
  r.units = decision_units(a, co);
  r.proxy.assign(r.units.size(), {});

  // Units by layer, to score each layer's units in its callback.
  std::map<int64_t, std::vector<size_t>> by_layer;
  for (size_t u = 0; u < r.units.size(); ++u) by_layer[r.units[u].layer].push_back(u);

  LayerCalibrationOptions lo;
  lo.capture.xtx = false;
  lo.capture.sample_rows = std::max<int64_t>(options.proxy_rows, 1);
  lo.capture.seed = options.calib.seed;
  lo.progress = options.progress;
  // Scoring runs between layers of the calibration pass; its own bar keeps both ETAs honest.
  Progress proxy_progress("sensitivity: proxy", ProgressUnit::modules, double(r.units.size()),
                          options.progress);
  proxy_progress.pause();
  auto on_layer = [&](int64_t l, LayerCapture& cap) -> const LayerWeights* {
    proxy_progress.set_detail(fmt::format("layer {}/{}", l + 1, a.num_layers));
    proxy_progress.resume();
    for (size_t u : by_layer[l]) {
      const DecisionUnit& unit = r.units[u];
      std::vector<WeightRows> w;
      std::vector<const LinearStats*> st;
      for (size_t i : unit.linears) {
        w.push_back(weight_of(*model, a.linears[i]));
        st.push_back(&cap.of(a.linears[i]));
      }
      r.proxy[u] = proxy_unit_scores(unit, w, st, model->pool());
      // Every error of layer l ends up in the residual stream h_{l+1}, which all later layers
      // and the final norm read through RMSNorm: its effect scales with its size relative to
      // that stream, so the errors are divided by the stream's energy E||h_{l+1}||^2.
      if (cap.output_mean_square > 0)
        for (double& v : r.proxy[u]) v /= cap.output_mean_square;
      proxy_progress.advance(1);
    }
    proxy_progress.pause();
    return nullptr;
  };
  const LayerCalibrationReport cr = calibrate_layers(*model, data.windows, lo, on_layer);
  proxy_progress.finish();
  r.calib_tokens = cr.tokens;
  r.calib_seconds = cr.forward_seconds;
  r.proxy_seconds = cr.callback_seconds;

  if (options.exact) {
    const auto t0 = clock_type::now();
    // One reference run, then one run per unit and format: minutes on anything but a toy.
    size_t runs = 1;
    for (const DecisionUnit& u : r.units)
      for (const Candidate& c : u.candidates) runs += c.choice.is_keep() ? 0 : 1;
    Progress exact_progress("sensitivity: exact KL", ProgressUnit::runs, double(runs),
                            options.progress);
    AssignmentKl kl(*model, data.windows);
    exact_progress.advance(1);
    r.exact = exact_scores(a, r.units, [&](const Assignment& as) { return kl(as); }, "max",
                           [&](size_t, size_t) { exact_progress.advance(1); });
    exact_progress.finish();
    r.exact_seconds = since(t0);
  }
  // "dir/" has an empty filename; the model's name is the last non-empty component.
  const std::filesystem::path name = model_dir.filename().empty() ? model_dir.parent_path().filename()
                                                                  : model_dir.filename();
  r.report = build_sensitivity_report(name.string(), r.units, r.proxy, r.exact);
  SensitivitySettings& st = r.report.settings;
  for (const auto& f : options.calib.files) st.calib_files.push_back(f.string());
  st.calib_samples = options.calib.samples;
  st.calib_seq = options.calib.seq_len;
  st.seed = options.calib.seed;
  st.calib_tokens = r.calib_tokens;
  st.proxy_rows = options.proxy_rows;
  for (const FormatChoice& f : options.formats) st.formats.push_back(f.name());
  r.monotone = options.exact ? r.exact : r.proxy;
  monotonize(r.units, r.monotone);
  return r;
}

}  // namespace qf

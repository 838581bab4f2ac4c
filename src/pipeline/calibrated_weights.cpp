#include "pipeline/calibrated_weights.h"

#include "algo/awq.h"
#include "algo/gptq.h"
#include "algo/local_hessian.h"
#include "algo/round_to_nearest.h"
#include "algo/smoothquant.h"
#include "calib/layer_calibration.h"
#include "core/convert.h"
#include "core/error.h"
#include "core/progress.h"
#include "engine/model.h"
#include "formats/fake_quant.h"
#include "formats/int8.h"
#include "train/block_tuning.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <set>

namespace qf {
namespace {

// Precomputed results wait on disk from their layer until the writer reaches them, so memory
// holds one layer's results, not the model's.
template <typename T>
void append_bytes(std::vector<uint8_t>& out, const T* p, size_t n) {
  const auto* b = reinterpret_cast<const uint8_t*>(p);
  out.insert(out.end(), b, b + n * sizeof(T));
}

void spill(Precomputed& p, SpillFile& file) {
  const QuantizedTensor& q = p.q;
  std::vector<uint8_t> blob;
  const int64_t header[] = {int64_t(q.format), q.rows, q.cols, q.block, int64_t(q.scale_dtype),
                            int64_t(q.codes.size()), int64_t(q.block_scales.size()),
                            int64_t(q.scales.size()), int64_t(p.pre_quant_scale.size())};
  append_bytes(blob, header, std::size(header));
  append_bytes(blob, &q.global_scale, 1);
  append_bytes(blob, q.codes.data(), q.codes.size());
  append_bytes(blob, q.block_scales.data(), q.block_scales.size());
  append_bytes(blob, q.scales.data(), q.scales.size());
  append_bytes(blob, p.pre_quant_scale.data(), p.pre_quant_scale.size());
  p.spilled = file.put(blob);
  p.q = QuantizedTensor{};
  p.pre_quant_scale = {};
}

void unspill(Precomputed& p, const SpillFile& file) {
  if (!p.spilled) return;
  const std::vector<uint8_t> blob = file.get(*p.spilled);
  const uint8_t* at = blob.data();
  auto read = [&](auto* dst, size_t n) {
    // An empty vector's data() may be null, and memcpy from or to null is undefined even for
    // 0 bytes (UBSan in scripts/sanitize.sh: tensors without block scales).
    if (n == 0) return;
    std::memcpy(dst, at, n * sizeof(*dst));
    at += n * sizeof(*dst);
  };
  int64_t h[9];
  read(h, 9);
  QuantizedTensor& q = p.q;
  q.format = Format(h[0]);
  q.rows = h[1];
  q.cols = h[2];
  q.block = int(h[3]);
  q.scale_dtype = DType(h[4]);
  read(&q.global_scale, 1);
  q.codes.resize(size_t(h[5]));
  read(q.codes.data(), q.codes.size());
  q.block_scales.resize(size_t(h[6]));
  read(q.block_scales.data(), q.block_scales.size());
  q.scales.resize(size_t(h[7]));
  read(q.scales.data(), q.scales.size());
  p.pre_quant_scale.resize(size_t(h[8]));
  read(p.pre_quant_scale.data(), p.pre_quant_scale.size());
  p.spilled.reset();
}

// Names the experts calibration routed few tokens to: their input statistics are thin (the
// input scale is the layer's max over experts either way; with no token at all a data
// algorithm falls back to its data-free part for that expert).
void expert_token_warnings(QuantizeReport& report, std::string_view data_algo) {
  constexpr int64_t kFewTokens = 16;
  int64_t none = 0, few = 0, experts = 0;
  std::string first;
  for (const auto& layer : report.expert_tokens)
    for (size_t e = 0; e < layer.tokens.size(); ++e) {
      ++experts;
      if (layer.tokens[e] >= kFewTokens) continue;
      (layer.tokens[e] == 0 ? none : few) += 1;
      if (first.empty())
        first = fmt::format("layer {} expert {} ({} tokens)", layer.layer, e, layer.tokens[e]);
    }
  if (none + few == 0) return;
  report.warnings.push_back(fmt::format(
      "calibration routed fewer than {} tokens to {} of {} experts ({} got none; first: {}); "
      "their input scales are the max over their layer's experts{}; more --calib-samples "
      "reach more experts", kFewTokens, none + few, experts, none, first,
      none > 0 && !data_algo.empty()
          ? fmt::format(", and {} falls back to its data-free part (max, or four_over_six) "
                        "for experts with no token", data_algo)
          : std::string()));
}

}  // namespace

std::optional<Precomputed> CalibrationOutcome::take(size_t i) {
  auto it = precomputed.find(i);
  if (it == precomputed.end()) return std::nullopt;
  unspill(it->second, *spill_file);
  Precomputed p = std::move(it->second);
  precomputed.erase(it);
  return p;
}

float CalibrationOutcome::input_scale(size_t i, const Architecture& arch, ActQuant activations,
                                      const std::filesystem::path& model_dir) const {
  auto amax_in = [&](size_t m) {
    auto it = input_amax.find(m);
    return it != input_amax.end() ? it->second : act_amax[m];
  };
  float amax = amax_in(i);
  const LinearModule& lin = arch.linears[i];
  const int g = lin.group;
  if ((activations == ActQuant::nvfp4 || activations == ActQuant::int8) && g >= 0)
    for (size_t m : arch.fused_groups[size_t(g)]) amax = std::max(amax, amax_in(m));
  if (lin.expert >= 0) {
    // One input scale for all routed experts of a layer (per input: gate/up, down): vLLM's
    // fused-MoE kernels take one (the max over experts), and an expert that calibration
    // routed no token to still gets a scale (ModelOpt's set_expert_quantizer_amax).
    for (size_t s : arch.layers[size_t(lin.layer)].linears)
      if (arch.linears[s].expert >= 0 && arch.linears[s].input == lin.input)
        amax = std::max(amax, amax_in(s));
  }
  if (!(amax > 0.f))
    fail("{}: calibration saw an all-zero input for '{}'; it has no input scale",
         model_dir.string(), arch.linears[i].name);
  switch (activations) {
    case ActQuant::nvfp4: return div_by_constant(amax, 2688.0f);
    case ActQuant::int8: return div_by_constant(amax, 127.0f);
    default: return div_by_constant(amax, 448.0f);
  }
}

CalibrationOutcome calibrate(const SourceModel& source, const ModulePlan& plan,
                             const QuantizeOptions& options, const Exporter& exporter,
                             LinearQuantizer& quantizer, ThreadPool& pool,
                             const std::filesystem::path& staging_dir, QuantizeReport& report) {
  const std::filesystem::path& model_dir = source.dir;
  const Checkpoint& ckpt = *source.checkpoint;
  const Architecture& arch = source.arch;
  const std::vector<ExportedLinear>& exported = plan.exported;
  const std::vector<std::string>& reason = plan.reason;
  const bool awq = plan.modes.awq, local_hessian = plan.modes.local_hessian;
  const bool gptq = plan.modes.gptq, smoothquant_algo = plan.modes.smoothquant;
  const bool data_algo = plan.modes.data_algo;
  auto tensor_amax = [&](size_t i) { return quantizer.tensor_amax(i); };
  auto quantize_data_free = [&](size_t i) { return quantizer.data_free(i); };

  CalibrationOutcome out;
  out.act_amax.assign(arch.linears.size(), 0.f);
  out.kv_amax.assign(size_t(arch.num_layers), {0.f, 0.f});
  if (!plan.modes.calibrate) return out;
  std::vector<float>& act_amax = out.act_amax;
  std::vector<std::pair<float, float>>& kv_amax = out.kv_amax;
  std::map<size_t, Precomputed>& precomputed = out.precomputed;
  std::unique_ptr<SpillFile>& spill_file = out.spill_file;
  std::map<std::string, std::vector<float>>& vector_override = out.norm_override;
  const CalibrationData data = options.calib_windows
                                   ? *options.calib_windows
                                   : load_calibration_data(options.calib, source.tokenizer());
  for (const auto& w : data.warnings) report.warnings.push_back(w);
  ModelOptions mo;
  mo.threads = options.threads;
  mo.max_seq = options.calib.seq_len;
  mo.kernels = options.kernels;
  auto model = Model::load(source.checkpoint, mo);
  LayerCalibrationOptions co;
  co.capture.seed = options.calib.seed;
  co.capture.xtx = gptq || local_hessian;
  co.capture.sample_rows = awq ? 512 : 0;
  co.capture.experts_see_all_rows = options.calib_moe_all;
  // Block-wise tuning trains each block on the outputs of the already-tuned blocks before it.
  const bool tune = plan.modes.tune;
  co.quantized_inputs = options.calib_quantized_inputs || tune;
  co.progress = options.progress;
  const bool precompute = data_algo || co.quantized_inputs;
  if (precompute) spill_file = std::make_unique<SpillFile>(staging_dir);

  // Quantizes the members of one group (or a lone Linear) that read `stats`.
  auto quantize_group = [&](const std::vector<size_t>& members, const LinearStats& stats,
                            const std::string& norm_name) {
    if (stats.tokens == 0) {
      // A routed expert calibration sent no token to: no statistics to weigh its error by.
      for (size_t m : members) precomputed[m].q = quantize_data_free(m);
      return;
    }
    std::vector<WeightRows> rows;
    for (size_t m : members) rows.push_back(quantizer.rows(m));
    const RtnOptions rtn{options.format, exported[members[0]].block,
                         exporter.scale_dtype(exported[members[0]])};
    float members_amax = 0.f;
    for (size_t m : members) members_amax = std::max(members_amax, quantizer.amax_for(m));
    auto norm_override = [&]() -> std::vector<float>& {
      auto& norm = vector_override[norm_name];
      if (norm.empty()) {
        const CheckpointTensor* nt = ckpt.find(norm_name);
        if (!nt) fail("{}: tensor '{}' is missing", model_dir.string(), norm_name);
        const TensorView nv = nt->file->view(*nt->entry);
        norm.resize(size_t(nv.numel()));
        convert_to_f32(nv.dtype, nv.data, norm.data(), norm.size());
      }
      return norm;
    };
    if (smoothquant_algo) {
      const bool fold = !exported[members[0]].pre_quant_scale;  // compressed-tensors
      if (fold && norm_name.empty()) {
        // o_proj / down_proj in compressed-tensors: INT8 of the unsmoothed weight.
        for (size_t m : members) precomputed[m].q = quantize_data_free(m);
        return;
      }
      SmoothQuantOptions so;
      so.alpha = options.smoothquant_alpha;
      so.scale_dtype = rtn.scale_dtype;
      if (!fold) so.pre_quant_scale_dtype = exporter.pre_quant_scale_dtype(exported[members[0]]);
      SmoothQuantResult r = smoothquant(rows, stats, so, pool);
      if (fold) fold_pre_quant_scale_into_norm(norm_override().data(), nullptr, r.pre_quant_scale);
      for (size_t k = 0; k < members.size(); ++k) {
        Precomputed& p = precomputed[members[k]];
        p.q = int8_to_quantized(std::move(r.tensors[k]));
        if (!fold) p.pre_quant_scale = r.pre_quant_scale;
        p.input_amax = r.input_amax;
      }
      return;
    }
    const bool can_awq = awq && (!norm_name.empty() || exported[members[0]].pre_quant_scale);
    if (can_awq) {
      AwqOptions ao;
      ao.format = rtn;
      ao.clip = !gptq;  // AWQ alone searches clipping; before GPTQ it does not
      if (norm_name.empty()) ao.pre_quant_scale_dtype = exporter.pre_quant_scale_dtype(exported[members[0]]);
      AwqResult r = quantize_awq(rows, stats, ao, pool);
      if (!norm_name.empty())
        fold_pre_quant_scale_into_norm(norm_override().data(), nullptr, r.pre_quant_scale);
      std::vector<QuantizedTensor> tensors = std::move(r.tensors);
      if (gptq) {
        const LinearStats scaled = scale_linear_stats(stats, r.pre_quant_scale);
        float sa = 0.f;
        for (const auto& w : r.scaled_weights)
          for (float v : w) sa = std::max(sa, std::fabs(v));
        GptqOptions go;
        go.format = rtn;
        for (size_t k = 0; k < members.size(); ++k) {
          const WeightRows sw{r.scaled_weights[k].data(), DType::F32, rows[k].rows, rows[k].cols};
          QuantizedTensor frozen = quantize_rtn(sw, rtn, sa, pool);
          tensors[k] = gptq_with_scales(r.scaled_weights[k], std::move(frozen), scaled.xtx,
                                        scaled.tokens, go, pool).tensor;
        }
      }
      for (size_t k = 0; k < members.size(); ++k) {
        Precomputed& p = precomputed[members[k]];
        p.q = std::move(tensors[k]);
        if (norm_name.empty()) p.pre_quant_scale = r.pre_quant_scale;
        p.input_amax = r.input_amax;
      }
      return;
    }
    for (size_t k = 0; k < members.size(); ++k) {
      Precomputed& p = precomputed[members[k]];
      if (local_hessian && !stats.xtx.empty()) {
        // Static-block scales from the Hessian-weighted sweep under the group's global amax;
        // local_hessian+gptq keeps them frozen through the column sweep.
        p.q = quantize_nvfp4_local_hessian(rows[k], stats, members_amax, pool);
        if (gptq) {
          GptqOptions go;
          go.format = rtn;
          p.q = gptq_with_scales(to_float(rows[k]), std::move(p.q), stats.xtx, stats.tokens, go,
                                 pool).tensor;
        }
      } else if (plan.four_over_six[members[k]] && gptq && !stats.xtx.empty()) {
        // four_over_six+gptq: Four Over Six's block scales (group global amax) frozen through
        // the column sweep.
        p.q = quantizer.four_over_six(rows[k], members_amax);
        GptqOptions go;
        go.format = rtn;
        p.q = gptq_with_scales(to_float(rows[k]), std::move(p.q), stats.xtx, stats.tokens, go,
                               pool).tensor;
      } else if (gptq && !stats.xtx.empty()) {
        GptqOptions go;
        go.format = rtn;
        if (exported[members[k]].per_tensor) {
          std::vector<float> amaxes(size_t(rows[k].rows), tensor_amax(members[k]));
          QuantizedTensor frozen = scales_from_amax(Format::fp8, rows[k].rows, rows[k].cols, 0,
                                                    amaxes.data(), 0.f, rtn.scale_dtype);
          p.q = gptq_with_scales(to_float(rows[k]), std::move(frozen), stats.xtx, stats.tokens,
                                 go, pool).tensor;
        } else {
          p.q = quantize_gptq(rows[k], stats, go, members_amax, pool).tensor;
        }
      } else {
        p.q = quantize_data_free(members[k]);
      }
    }
  };

  // The algorithms get a bar of their own, counted in modules and timed only while they run:
  // calibration's bar alone would fold their minutes into its per-token ETA.
  int64_t algo_modules = 0;
  for (size_t i = 0; i < arch.linears.size(); ++i) algo_modules += reason[i].empty() ? 1 : 0;
  Progress algo_progress(std::string(weight_algo_name(options.algo)), ProgressUnit::modules,
                         double(algo_modules), options.progress && precompute);
  algo_progress.pause();

  // Block-wise tuning of layer l on its quantized-path inputs, from the inits in `precomputed`.
  Progress tune_progress("tune", ProgressUnit::steps,
                         double(arch.num_layers * options.tune_iters), options.progress && tune);
  tune_progress.pause();
  std::vector<float> fp_hidden;  // --tune-target fp: the original model's hidden states
  auto act_scale = [&](size_t i) {
    return out.input_scale(i, arch, options.activations, model_dir);
  };
  auto tune_layer = [&](int64_t l, const LayerCapture& cap) {
    const auto t0 = std::chrono::steady_clock::now();
    const BlockShape s = block_shape(arch, l);
    const LayerSpec& spec = arch.layers[size_t(l)];
    const int64_t windows = cap.windows, seq = cap.seq, per = seq * arch.hidden_size;
    // The target: the original block's output, on the quantized-path inputs (default) or on
    // the original model's own hidden states.
    std::vector<float> target;
    if (options.tune_target_fp) {
      if (fp_hidden.empty()) fp_hidden.assign(cap.layer_input, cap.layer_input + windows * per);
      for (int64_t w = 0; w < windows; ++w)
        model->forward_layer(l, fp_hidden.data() + w * per, seq, nullptr);
      target = fp_hidden;
    } else {
      target.assign(cap.layer_input, cap.layer_input + windows * per);
      for (int64_t w = 0; w < windows; ++w)
        model->forward_layer(l, target.data() + w * per, seq, nullptr);
    }
    const BlockWeights<float> original = block_weights<float>(model->weights(), l);
    static constexpr LinearRole kRoles[kBlockLinears] = {
        LinearRole::q_proj, LinearRole::k_proj, LinearRole::v_proj, LinearRole::o_proj,
        LinearRole::gate_proj, LinearRole::up_proj, LinearRole::down_proj};
    std::array<const QuantizedTensor*, kBlockLinears> init{};
    std::array<size_t, kBlockLinears> index{};
    for (int r = 0; r < kBlockLinears; ++r) {
      index[size_t(r)] = spec.linears[size_t(spec.slot_of(kRoles[r]))];
      auto it = precomputed.find(index[size_t(r)]);
      if (it != precomputed.end() && it->second.pre_quant_scale.empty())
        init[size_t(r)] = &it->second.q;
    }
    BlockActQuant act;
    if (options.activations != ActQuant::none) {
      act.mode = options.activations;
      // A Linear left unquantized keeps its input in float in the engine too.
      auto in_scale = [&](int r) { return init[size_t(r)] ? act_scale(index[size_t(r)]) : 0.f; };
      act.attn_in = in_scale(0);
      act.o_in = in_scale(3);
      act.mlp_in = in_scale(4);
      act.down_in = in_scale(6);
    }
    BlockTuneOptions to;
    to.iters = options.tune_iters;
    to.lr = options.tune_lr;
    to.batch = options.tune_batch;
    to.optimizer = options.tune_adam ? TuneOptimizer::adam : TuneOptimizer::sign;
    to.params = options.tune_weights ? TuneParams::weights : TuneParams::rounding;
    to.seed = options.calib.seed + uint64_t(l);
    tune_progress.set_detail(fmt::format("layer {}/{}", l + 1, arch.num_layers));
    tune_progress.resume();
    BlockTuneResult r = tune_block(s, original, rope_table<float>(arch.ropes[size_t(spec.rope)], seq),
                                   init, &act, cap.layer_input, target.data(), windows, seq, to,
                                   &pool, [&] { tune_progress.advance(1); });
    tune_progress.pause();
    for (int k = 0; k < kBlockLinears; ++k)
      if (init[size_t(k)]) precomputed[index[size_t(k)]].q = std::move(r.tensors[size_t(k)]);
    QuantizeReport::TunedLayer t;
    t.layer = l;
    t.mse_init = r.mse_init;
    t.mse_tuned = r.mse_tuned;
    t.kept_init = r.kept_init;
    t.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    report.tuned_layers.push_back(t);
  };

  LayerWeights replaced;
  auto on_layer = [&](int64_t l, LayerCapture& cap) -> const LayerWeights* {
    kv_amax[size_t(l)] = {cap.k_amax, cap.v_amax};
    if (!cap.experts.empty()) {
      QuantizeReport::ExpertTokens et{l, {}};
      for (const auto& e : cap.experts) et.tokens.push_back(e[0].tokens);
      report.expert_tokens.push_back(std::move(et));
    }
    std::vector<size_t> in_layer;
    for (size_t i = 0; i < arch.linears.size(); ++i)
      if (arch.linears[i].layer == l) {
        in_layer.push_back(i);
        act_amax[i] = cap.of(arch.linears[i]).input_amax;
      }
    if (!precompute) return nullptr;
    algo_progress.set_detail(fmt::format("layer {}/{}", l + 1, arch.num_layers));
    algo_progress.resume();
    std::set<size_t> done;
    for (size_t i : in_layer) {
      if (done.count(i) || !reason[i].empty()) continue;
      const LinearModule& m = arch.linears[i];
      std::vector<size_t> members = {i};
      if (m.group >= 0) members = arch.fused_groups[size_t(m.group)];
      for (size_t k : members) done.insert(k);
      const std::string norm =
          m.fold_norm >= 0 ? arch.layers[size_t(l)].norm(NormSlot(m.fold_norm)) : std::string();
      if ((gptq || local_hessian) && m.expert >= 0 && cap.of(m).tokens > 0) {
        // A routed expert kept its rows (CaptureOptions::xtx): its X^T X exists only while
        // its group is quantized.
        LinearStats& stats = cap.of(m);
        stats.xtx = xtx_of_rows(stats.samples, stats.in_features(), &pool);
        quantize_group(members, stats, norm);
        std::vector<double>().swap(stats.xtx);
      } else {
        quantize_group(members, cap.of(m), norm);
      }
      algo_progress.advance(double(members.size()));
    }
    algo_progress.pause();
    if (tune) tune_layer(l, cap);
    cap = LayerCapture{};  // X^T X and samples are no longer needed
    if (!co.quantized_inputs) {
      for (size_t i : in_layer)
        if (auto it = precomputed.find(i); it != precomputed.end()) spill(it->second, *spill_file);
      return nullptr;
    }
    // The layer with fake-quantized weights (and folded norms) advances the hidden states.
    replaced = model->weights().layers[size_t(l)];
    const LayerSpec& spec = arch.layers[size_t(l)];
    for (int s = 0; s < kNormSlots; ++s)
      if (auto it = vector_override.find(spec.norms[size_t(s)]); it != vector_override.end())
        replaced.norms[size_t(s)] = it->second;  // only plain x * w norms absorb scales
    for (size_t i : in_layer) {
      auto it = precomputed.find(i);
      if (it == precomputed.end()) continue;
      EngineLinear& L = replaced.linears[size_t(arch.linears[i].slot)];
      auto w = std::make_shared<std::vector<float>>(size_t(it->second.q.rows * it->second.q.cols));
      dequantize(it->second.q, w->data());
      L.w = LinearWeight{};
      L.w.format = WeightFormat::f32;
      L.w.rows = it->second.q.rows;
      L.w.cols = it->second.q.cols;
      L.w.data = w->data();
      L.storage = std::move(w);
      L.pre_scale = it->second.pre_quant_scale;
      if (tune && options.activations != ActQuant::none) {
        // The tuned block was trained with its inputs quantized: the next blocks see that too.
        L.act = options.activations;
        L.input_scale = act_scale(i);
      }
      spill(it->second, *spill_file);  // `replaced` holds its own copies
    }
    return &replaced;
  };
  const LayerCalibrationReport cr = calibrate_layers(*model, data.windows, co, on_layer);
  algo_progress.finish();
  tune_progress.finish();
  report.calib_tokens = cr.tokens;
  report.calib_seconds = cr.forward_seconds;
  report.algo_seconds = cr.callback_seconds;
  report.activation_bytes = cr.activation_bytes;
  expert_token_warnings(report, data_algo ? weight_algo_name(options.algo) : std::string_view());
  // input_scale = amax_in / maxbound, with the input amax AWQ scaling left.
  for (const auto& [i, p] : precomputed)
    out.input_amax[i] = p.input_amax >= 0 ? p.input_amax : act_amax[i];
  return out;
}

}  // namespace qf

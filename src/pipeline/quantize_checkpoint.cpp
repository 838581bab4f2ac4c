#include "pipeline/quantize_checkpoint.h"

#include "algo/awq.h"
#include "algo/gptq.h"
#include "algo/local_hessian.h"
#include "algo/mse.h"
#include "algo/round_to_nearest.h"
#include "algo/smoothquant.h"
#include "calib/layer_calibration.h"
#include "core/convert.h"
#include "engine/model.h"
#include "formats/fake_quant.h"
#include "formats/int4.h"
#include "formats/int8.h"
#include "io/tokenizer.h"
#include "core/error.h"
#include "core/progress.h"
#include "core/thread_pool.h"
#include "io/checkpoint.h"
#include "io/shard_layout.h"
#include "io/spill_file.h"
#include "io/staged_directory.h"
#include "model/architecture.h"

#include <fmt/format.h>
#include <fnmatch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <numeric>
#include <optional>
#include <set>

namespace fs = std::filesystem;

namespace qf {
namespace {

// One tensor of the output, in file order: either copied from the input or produced by
// quantizing a Linear (which yields several output tensors).
struct OutputItem {
  const CheckpointTensor* source = nullptr;
  int linear = -1;  // index into Architecture::linears when quantized
  bool head = false;  // the quantized output head (--quantize-lm-head)
  std::vector<TensorSpec> specs;
  uint64_t nbytes() const {
    uint64_t n = 0;
    for (const auto& s : specs) n += s.nbytes();
    return n;
  }
};

bool matches_any(const std::string& name, const std::vector<std::string>& patterns,
                 std::string* matched) {
  for (const auto& p : patterns) {
    if (::fnmatch(p.c_str(), name.c_str(), 0) == 0 ||
        ::fnmatch(p.c_str(), (name + ".weight").c_str(), 0) == 0) {
      *matched = p;
      return true;
    }
  }
  return false;
}

bool same_path(const fs::path& a, const fs::path& b) {
  std::error_code ec;
  return fs::equivalent(a, b, ec);
}

WeightRows weight_rows(const TensorView& v) {
  return WeightRows{v.data, v.dtype, v.rows(), v.cols()};
}


// A weight as float32 (the algorithms that rescale or sweep need it).
std::vector<float> to_float(const WeightRows& w) {
  std::vector<float> out(size_t(w.rows * w.cols));
  convert_to_f32(w.dtype, w.data, out.data(), out.size());
  return out;
}

// A Linear quantized during calibration (algorithms that need data, or quantized inputs).
struct Precomputed {
  QuantizedTensor q;
  std::vector<float> pre_quant_scale;  // exported when non-empty
  float input_amax = -1.f;             // the input amax after AWQ scaling; -1: the captured one
  std::optional<SpillFile::Extent> spilled;  // q and pre_quant_scale, moved out of memory
};

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

// The calibrated modes a set of options asks for, after checking that they combine.
struct AlgoModes {
  bool awq = false, local_hessian = false, gptq = false, smoothquant = false;
  bool data_algo = false;   // a weight algorithm that needs calibration statistics
  bool calibrate = false;   // anything needs the calibration pass
  bool per_tensor = false;  // FP8 W8A8: one weight scale per tensor
};

// Throws qf::Error (one line, naming the flags) for combinations that are refused.
AlgoModes check_options(const QuantizeOptions& options, const FormatInfo& info) {
  AlgoModes m;
  m.awq = options.algo == WeightAlgo::awq || options.algo == WeightAlgo::awq_gptq;
  m.local_hessian = options.algo == WeightAlgo::local_hessian ||
                    options.algo == WeightAlgo::local_hessian_gptq;
  m.gptq = options.algo == WeightAlgo::gptq || options.algo == WeightAlgo::awq_gptq ||
           options.algo == WeightAlgo::local_hessian_gptq;
  m.smoothquant = options.algo == WeightAlgo::smoothquant;
  m.data_algo = m.awq || m.gptq || m.local_hessian || m.smoothquant;
  m.calibrate = options.activations != ActQuant::none || options.kv_fp8 || m.data_algo ||
                options.calib_quantized_inputs;
  if (m.calibrate && options.calib.files.empty()) {
    const std::string what =
        options.activations != ActQuant::none
            ? fmt::format("--activations {}", act_quant_name(options.activations))
        : options.kv_fp8 ? std::string("--kv-cache fp8")
        : m.data_algo    ? fmt::format("--algo {}", weight_algo_name(options.algo))
                         : std::string("--calib-quantized-inputs");
    fail("{} needs calibration data: pass --calib FILE (plain text or JSON Lines)", what);
  }
  if (options.activations == ActQuant::nvfp4 && options.format != Format::nvfp4)
    fail("--activations nvfp4 (W4A4) needs --format nvfp4, not {}", info.name);
  if (options.activations == ActQuant::fp8 && options.format != Format::fp8)
    fail("--activations fp8 (FP8 W8A8 per-tensor) needs --format fp8, not {}", info.name);
  // INT8 is W8A8 only (ModelOpt W8A8_SQ_PER_CHANNEL, compressed-tensors int-quantized):
  // smoothquant, or max (per-channel weights, unsmoothed inputs) for comparison.
  if (options.format == Format::int8 && options.activations != ActQuant::int8)
    fail("--format int8 is W8A8: pass --activations int8 (weight-only INT8 is not supported)");
  if (options.activations == ActQuant::int8 && options.format != Format::int8)
    fail("--activations int8 (W8A8) needs --format int8, not {}", info.name);
  if (m.smoothquant && options.format != Format::int8)
    fail("--algo smoothquant needs --format int8 --activations int8 (SmoothQuant W8A8), not {}",
         info.name);
  if (!(options.smoothquant_alpha >= 0.f && options.smoothquant_alpha <= 1.f))
    fail("--smoothquant-alpha must be in [0, 1], not {}", options.smoothquant_alpha);
  if (options.smoothquant_alpha != 1.0f && !m.smoothquant)
    fail("--smoothquant-alpha applies to --algo smoothquant only");
  if (options.format == Format::int8 && options.algo != WeightAlgo::smoothquant &&
      options.algo != WeightAlgo::max)
    fail("--format int8 supports --algo smoothquant or max, not {}", weight_algo_name(options.algo));
  m.per_tensor = options.format == Format::fp8 && options.activations == ActQuant::fp8;
  // A plan takes --kv-cache fp8 (its calibration only measures K/V amaxes); nothing else
  // calibrated yet.
  if (options.assignment && (options.activations != ActQuant::none || m.data_algo ||
                             options.calib_quantized_inputs || options.algo != WeightAlgo::max))
    fail("a per-module plan (--auto / --recipe) is weight-only with --algo max for now "
         "(--kv-cache fp8 is the one calibrated option it takes)");
  if (options.assignment)
    for (const auto& [name, c] : options.assignment->modules)
      if (c.algo != "max")
        fail("module '{}': the plan asks for algo '{}'; per-module plans support max only", name,
             c.algo);
  if (m.per_tensor && m.awq) fail("--algo awq is not available for FP8 per-tensor weights (W8A8)");
  if (m.local_hessian && options.format != Format::nvfp4)
    fail("--algo {} needs --format nvfp4 (it sweeps NVFP4 block scales), not {}",
         weight_algo_name(options.algo), info.name);
  return m;
}

}  // namespace

std::string_view weight_algo_name(WeightAlgo a) {
  switch (a) {
    case WeightAlgo::max: return "max";
    case WeightAlgo::mse: return "mse";
    case WeightAlgo::awq: return "awq";
    case WeightAlgo::gptq: return "gptq";
    case WeightAlgo::awq_gptq: return "awq+gptq";
    case WeightAlgo::local_hessian: return "local_hessian";
    case WeightAlgo::local_hessian_gptq: return "local_hessian+gptq";
    case WeightAlgo::smoothquant: return "smoothquant";
  }
  return "max";
}

std::optional<WeightAlgo> parse_weight_algo(std::string_view name) {
  for (WeightAlgo a : {WeightAlgo::max, WeightAlgo::mse, WeightAlgo::awq, WeightAlgo::gptq,
                       WeightAlgo::awq_gptq, WeightAlgo::local_hessian,
                       WeightAlgo::local_hessian_gptq, WeightAlgo::smoothquant})
    if (weight_algo_name(a) == name) return a;
  if (name == "awq_gptq") return WeightAlgo::awq_gptq;
  if (name == "local_hessian_gptq") return WeightAlgo::local_hessian_gptq;
  return std::nullopt;
}

bool excluded_by_patterns(const std::string& name, const std::vector<std::string>& patterns) {
  std::string matched;
  return matches_any(name, patterns, &matched);
}

QuantizeReport quantize_checkpoint(const fs::path& model_dir, const fs::path& out_dir,
                                   const QuantizeOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  if (same_path(model_dir, out_dir)) fail("{}: output directory is the input directory", out_dir.string());

  const Checkpoint ckpt = Checkpoint::open(model_dir);
  const Architecture arch =
      Architecture::from_config(ckpt.config(), (model_dir / "config.json").string());
  const auto exporter = make_exporter(options.export_format);
  const FormatInfo& info = format_info(options.format);
  // INT4 per channel (kInt4ChannelGroup): each module's block is its in_features.
  const bool free_block = info.block_rule == BlockRule::free;
  const bool int4_channel = free_block && options.block == kInt4ChannelGroup;
  const int block = (free_block && options.block > 0) ? options.block : info.block;
  if (options.block != 0 && !free_block)
    fail("--group-size applies to int4 only ({} has a fixed block of {})", info.name, info.block);

  const AlgoModes modes = check_options(options, info);
  if (options.kv_fp8)
    for (const auto& l : arch.layers)
      if (l.slot_of(LinearRole::k_proj) < 0)
        fail("{}: --kv-cache fp8 needs separate k_proj / v_proj modules to carry the scales; "
             "this {} checkpoint fuses them (qkv_proj)", model_dir.string(), arch.model_type);
  const bool awq = modes.awq, local_hessian = modes.local_hessian, gptq = modes.gptq;
  const bool smoothquant_algo = modes.smoothquant, data_algo = modes.data_algo;
  const bool calibrate = modes.calibrate, per_tensor = modes.per_tensor;

  QuantizeReport report;
  report.algo = std::string(weight_algo_name(options.algo));
  report.activations = std::string(act_quant_name(options.activations));
  report.kv_cache = options.kv_fp8 ? "fp8" : "none";
  report.output = out_dir;
  report.format = std::string(info.name);
  report.export_format = std::string(export_format_name(options.export_format));

  // Decide, per Linear, whether it is quantized.
  std::vector<std::string> reason(arch.linears.size());
  std::vector<ExportedLinear> exported(arch.linears.size());
  std::vector<const CheckpointTensor*> weights(arch.linears.size());
  for (size_t i = 0; i < arch.linears.size(); ++i) {
    const LinearModule& m = arch.linears[i];
    const CheckpointTensor* t = ckpt.find(m.weight_name());
    if (!t) fail("{}: tensor '{}' is missing", model_dir.string(), m.weight_name());
    const SafetensorsEntry& e = *t->entry;
    if (e.shape != Shape{m.out_features, m.in_features})
      fail("{}: tensor '{}' has shape {} but config.json implies [{}, {}]", t->file->path().string(),
           m.weight_name(), shape_str(e.shape), m.out_features, m.in_features);
    if (!is_quantizable_float(e.dtype))
      fail("{}: tensor '{}' has dtype {}; quantization needs F32, F16 or BF16 weights",
           t->file->path().string(), m.weight_name(), dtype_name(e.dtype));
    weights[i] = t;
    exported[i] = {m.name, options.format, m.out_features, m.in_features,
                   int4_channel ? int(m.in_features) : block, e.dtype};
    exported[i].act = options.activations;
    exported[i].per_tensor = per_tensor;
    // AWQ scales of a Linear with no foldable norm before it (o_proj, down_proj; every Linear
    // of post-norm families) go out as pre_quant_scale in ModelOpt; compressed-tensors has no
    // such tensor, so those are quantized with max there.
    exported[i].pre_quant_scale =
        awq && options.export_format == ExportFormat::modelopt && m.fold_norm < 0;
    // SmoothQuant: ModelOpt keeps every Linear's pre_quant_scale as a tensor (specs §4.3);
    // compressed-tensors folds q/k/v and gate/up scales into the norms (llm-compressor) and
    // leaves o_proj / down_proj unsmoothed.
    if (smoothquant_algo && options.export_format == ExportFormat::modelopt)
      exported[i].pre_quant_scale = true;
    if (options.kv_fp8 && m.role == LinearRole::k_proj) exported[i].kv_scale = 'k';
    if (options.kv_fp8 && m.role == LinearRole::v_proj) exported[i].kv_scale = 'v';
    std::string pattern;
    const ModuleChoice planned = options.assignment ? options.assignment->at(m.name) : ModuleChoice{};
    if (options.assignment && !planned.format.is_keep()) {
      exported[i].format = *planned.format.format;
      exported[i].block = planned.format.block_for(m.in_features);
    }
    if (matches_any(m.name, options.exclude, &pattern)) {
      reason[i] = fmt::format("excluded by --exclude '{}'", pattern);
    } else if (options.assignment && planned.format.is_keep()) {
      reason[i] = "kept in its dtype by the plan";
    } else if (m.in_features % exported[i].block != 0) {
      reason[i] = fmt::format("in_features {} is not a multiple of the {} block of {}",
                              m.in_features, format_info(exported[i].format).name,
                              exported[i].block);
    } else if (auto why = exporter->unsupported_reason(exported[i]); !why.empty()) {
      reason[i] = why;
    }
  }
  // Engines fuse q/k/v and gate/up: a group is quantized entirely or not at all, in one format.
  for (const auto& group : arch.fused_groups)
    for (size_t i : group)
      if (exported[i].format != exported[group[0]].format ||
          exported[i].block != exported[group[0]].block)
        fail("the plan gives fused modules '{}' and '{}' different formats",
             arch.linears[group[0]].name, arch.linears[i].name);
  for (const auto& group : arch.fused_groups) {
    auto excluded_member = std::find_if(group.begin(), group.end(),
                                        [&](size_t i) { return !reason[i].empty(); });
    if (excluded_member == group.end()) continue;
    for (size_t i : group)
      if (reason[i].empty())
        reason[i] = fmt::format("fused with {}, which is not quantized",
                                arch.linears[*excluded_member].name);
  }
  std::map<std::string, int> linear_by_weight;
  std::vector<std::string> excluded_names = Architecture::never_quantized_modules();
  for (size_t i = 0; i < arch.linears.size(); ++i) {
    if (reason[i].empty()) {
      linear_by_weight[arch.linears[i].weight_name()] = int(i);
      continue;
    }
    report.excluded.push_back({arch.linears[i].name, reason[i]});
    excluded_names.push_back(arch.linears[i].name);
  }
  // The output head (--quantize-lm-head): its own tensor, or the tied embedding's, which then
  // stays as it is and gains a quantized copy named lm_head.
  const CheckpointTensor* head_src = nullptr;
  bool head_tied = false;
  ExportedLinear head;
  if (options.quantize_lm_head) {
    if (options.assignment || options.activations != ActQuant::none)
      fail("--quantize-lm-head is weight-only and single-format for now (no --activations, "
           "--auto or --recipe)");
    head_src = ckpt.find("lm_head.weight");
    const CheckpointTensor* embed = ckpt.find("model.embed_tokens.weight");
    head_tied = !head_src || ckpt.aliases().count("lm_head.weight") > 0;
    if (head_tied) {
      if (!arch.tie_word_embeddings || !embed)
        fail("{}: tensor 'lm_head.weight' is missing", model_dir.string());
      head_src = embed;
    } else if (!embed || ckpt.aliases().count("model.embed_tokens.weight")) {
      fail("{}: 'lm_head.weight' is also the token embedding; --quantize-lm-head needs a "
           "stored model.embed_tokens.weight", model_dir.string());
    }
    const SafetensorsEntry& e = *head_src->entry;
    if (e.shape != Shape{arch.vocab_size, arch.hidden_size} || !is_quantizable_float(e.dtype))
      fail("{}: tensor '{}' ({} {}) cannot be quantized as the output head", model_dir.string(),
           head_src->name, dtype_name(e.dtype), shape_str(e.shape));
    head = {"lm_head", options.format, arch.vocab_size, arch.hidden_size, block, e.dtype};
    std::string why = arch.hidden_size % block != 0
                          ? fmt::format("hidden_size {} is not a multiple of the {} block of {}",
                                        arch.hidden_size, info.name, block)
                          : exporter->unsupported_reason(head);
    if (!why.empty()) fail("--quantize-lm-head: lm_head cannot be quantized: {}", why);
    std::erase(excluded_names, std::string("lm_head"));
    report.lm_head_quantized = true;
    report.warnings.push_back(
        "lm_head is quantized (--quantize-lm-head): engines may not load it. vLLM loads an "
        "NVFP4 lm_head from ModelOpt exports only in recent builds (ModelOptNvFp4LMHeadMethod); "
        "SGLang and older vLLM builds do not. llm-compressor also writes quantized heads for "
        "compressed-tensors; other formats' heads have not been checked in any engine");
  }
  std::sort(excluded_names.begin(), excluded_names.end());
  report.modules_excluded = int(report.excluded.size());
  report.modules_quantized = int(linear_by_weight.size());
  if (report.modules_quantized == 0)
    report.warnings.push_back(fmt::format("no Linear module can be quantized to {}", info.name));

  // Plan the output tensors in input order, then cut them into shards.
  std::vector<OutputItem> items;
  for (const auto& t : ckpt.tensors()) {
    OutputItem item;
    item.source = &t;
    if (auto it = linear_by_weight.find(t.name); it != linear_by_weight.end()) {
      item.linear = it->second;
      item.specs = exporter->linear_specs(exported[size_t(it->second)]);
    } else if (head_src && !head_tied && t.name == "lm_head.weight") {
      item.head = true;
      item.specs = exporter->linear_specs(head);
    } else {
      item.specs = {{t.name, t.entry->dtype, t.entry->shape}};
    }
    items.push_back(std::move(item));
    if (head_src && head_tied && t.entry == head_src->entry) {
      OutputItem h;  // the quantized copy of the tied embedding, right after it
      h.source = &t;
      h.head = true;
      h.specs = exporter->linear_specs(head);
      items.push_back(std::move(h));
    }
  }
  std::vector<uint64_t> item_bytes;
  for (const auto& item : items) item_bytes.push_back(item.nbytes());
  const auto shards = plan_shards(item_bytes, options.max_shard_bytes);

  ThreadPool pool(options.threads > 0 ? options.threads : ThreadPool::hardware_threads());
  StagedDirectory staged(out_dir, options.force);
  for (const auto& s : ckpt.shards()) report.bytes_in += s->file_size();
  Progress progress("quantize", ckpt.tensor_bytes(), options.progress);

  // Fused groups share the NVFP4 tensor scale: the largest amax over the group.
  std::map<int, float> group_amax;
  auto tensor_amax = [&](size_t linear) {
    const CheckpointTensor& t = *weights[linear];
    const AmaxResult r = weight_amax(weight_rows(t.file->view(*t.entry)), pool);
    if (r.nonfinite > 0)
      fail("{}: tensor '{}' has {} NaN or Inf values", t.file->path().string(), t.name, r.nonfinite);
    return r.amax;
  };
  auto amax_for = [&](size_t linear) {
    const int g = arch.linears[linear].group;
    if (g < 0) return tensor_amax(linear);
    if (auto it = group_amax.find(g); it != group_amax.end()) return it->second;
    float a = 0.f;
    for (size_t member : arch.fused_groups[size_t(g)]) a = std::max(a, tensor_amax(member));
    group_amax[g] = a;
    return a;
  };

  // The write-time quantization of one Linear with a data-free algorithm: max (round to
  // nearest with the weights' amax; the weight-only path) or mse.
  std::map<int, float> group_mse_amax;
  auto quantize_max_or_mse = [&](size_t i) -> QuantizedTensor {
    const ExportedLinear& l = exported[i];
    const CheckpointTensor& t = *weights[i];
    const WeightRows w = weight_rows(t.file->view(*t.entry));
    RtnOptions rtn{l.format, l.block, exporter->scale_dtype(l)};
    if (l.per_tensor) {
      // FP8 W8A8: one scale from the tensor's own amax (FP8 per-tensor is not group-unified).
      const float amax = tensor_amax(i);
      std::vector<float> amaxes(size_t(l.rows), amax);
      QuantizedTensor q = scales_from_amax(Format::fp8, l.rows, l.cols, 0, amaxes.data(), 0.f,
                                           rtn.scale_dtype);
      const std::vector<float> f = to_float(w);
      encode_with_scales(q, f.data(), pool);
      return q;
    }
    if (options.algo == WeightAlgo::mse) {
      if (options.format != Format::nvfp4) return quantize_mse(w, rtn, MseOptions{}, pool);
      const int g = arch.linears[i].group;
      auto searched = [&](size_t m) {
        const CheckpointTensor& mt = *weights[m];
        return nvfp4_mse_global_amax(weight_rows(mt.file->view(*mt.entry)), tensor_amax(m),
                                     MseOptions{}, pool);
      };
      float ga = 0.f;
      if (g < 0) {
        ga = searched(i);
      } else if (auto it = group_mse_amax.find(g); it != group_mse_amax.end()) {
        ga = it->second;
      } else {
        for (size_t m : arch.fused_groups[size_t(g)]) ga = std::max(ga, searched(m));
        group_mse_amax[g] = ga;
      }
      return quantize_mse(w, rtn, MseOptions{}, pool, ga);
    }
    return quantize_rtn(w, rtn, amax_for(i), pool);
  };

  // ---- Calibration: layer by layer over the calibration windows ----------------------------
  std::vector<float> act_amax(arch.linears.size(), 0.f);
  std::vector<std::pair<float, float>> kv_amax(size_t(arch.num_layers), {0.f, 0.f});
  std::map<size_t, Precomputed> precomputed;
  std::optional<SpillFile> spill_file;  // precomputed results of the layers already done
  std::map<std::string, std::vector<float>> vector_override;  // norms that absorbed AWQ/SQ scales
  if (calibrate) {
    const auto tokenizer = Tokenizer::load(model_dir);
    const CalibrationData data = load_calibration_data(options.calib, *tokenizer);
    for (const auto& w : data.warnings) report.warnings.push_back(w);
    ModelOptions mo;
    mo.threads = options.threads;
    mo.max_seq = options.calib.seq_len;
    auto model = Model::load(model_dir, mo);
    LayerCalibrationOptions co;
    co.capture.seed = options.calib.seed;
    co.capture.xtx = gptq || local_hessian;
    co.capture.sample_rows = awq ? 512 : 0;
    co.quantized_inputs = options.calib_quantized_inputs;
    co.progress = options.progress;
    const bool precompute = data_algo || options.calib_quantized_inputs;
    if (precompute) spill_file.emplace(staged.path());

    // Quantizes the members of one group (or a lone Linear) that read `stats`.
    auto quantize_group = [&](const std::vector<size_t>& members, const LinearStats& stats,
                              const std::string& norm_name) {
      std::vector<WeightRows> rows;
      for (size_t m : members) {
        const CheckpointTensor& t = *weights[m];
        rows.push_back(weight_rows(t.file->view(*t.entry)));
      }
      const RtnOptions rtn{options.format, exported[members[0]].block,
                           exporter->scale_dtype(exported[members[0]])};
      float members_amax = 0.f;
      for (size_t m : members) members_amax = std::max(members_amax, tensor_amax(m));
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
          for (size_t m : members) precomputed[m].q = quantize_max_or_mse(m);
          return;
        }
        SmoothQuantOptions so;
        so.alpha = options.smoothquant_alpha;
        so.scale_dtype = rtn.scale_dtype;
        if (!fold) so.pre_quant_scale_dtype = exporter->pre_quant_scale_dtype(exported[members[0]]);
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
        ao.clip = options.algo == WeightAlgo::awq;
        if (norm_name.empty()) ao.pre_quant_scale_dtype = exporter->pre_quant_scale_dtype(exported[members[0]]);
        AwqResult r = quantize_awq(rows, stats, ao, pool);
        if (!norm_name.empty())
          fold_pre_quant_scale_into_norm(norm_override().data(), nullptr, r.pre_quant_scale);
        std::vector<QuantizedTensor> tensors = std::move(r.tensors);
        if (options.algo == WeightAlgo::awq_gptq) {
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
          if (options.algo == WeightAlgo::local_hessian_gptq) {
            GptqOptions go;
            go.format = rtn;
            p.q = gptq_with_scales(to_float(rows[k]), std::move(p.q), stats.xtx, stats.tokens, go,
                                   pool).tensor;
          }
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
          p.q = quantize_max_or_mse(members[k]);
        }
      }
    };

    LayerWeights replaced;
    auto on_layer = [&](int64_t l, LayerCapture& cap) -> const LayerWeights* {
      const std::string p = fmt::format("model.layers.{}.", l);
      kv_amax[size_t(l)] = {cap.k_amax, cap.v_amax};
      std::vector<size_t> in_layer;
      for (size_t i = 0; i < arch.linears.size(); ++i)
        if (arch.linears[i].layer == l) {
          in_layer.push_back(i);
          act_amax[i] = cap.input(arch.linears[i].input).input_amax;
        }
      if (!precompute) return nullptr;
      std::set<size_t> done;
      for (size_t i : in_layer) {
        if (done.count(i) || !reason[i].empty()) continue;
        const LinearModule& m = arch.linears[i];
        std::vector<size_t> members = {i};
        if (m.group >= 0) members = arch.fused_groups[size_t(m.group)];
        for (size_t k : members) done.insert(k);
        const std::string norm =
            m.fold_norm >= 0 ? arch.layers[size_t(l)].norm(NormSlot(m.fold_norm)) : std::string();
        quantize_group(members, cap.input(m.input), norm);
      }
      cap = LayerCapture{};  // X^T X and samples are no longer needed
      if (!options.calib_quantized_inputs) {
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
        spill(it->second, *spill_file);  // `replaced` holds its own copies
      }
      return &replaced;
    };
    const LayerCalibrationReport cr = calibrate_layers(*model, data.windows, co, on_layer);
    report.calib_tokens = cr.tokens;
    report.calib_seconds = cr.forward_seconds;
    report.algo_seconds = cr.callback_seconds;
    report.activation_bytes = cr.activation_bytes;
  }

  // input_scale = amax_in / maxbound; NVFP4 and INT8 unify it over fused groups (specs §4.4),
  // FP8 per-tensor does not.
  auto input_amax_of = [&](size_t i) {
    auto it = precomputed.find(i);
    return it != precomputed.end() && it->second.input_amax >= 0 ? it->second.input_amax : act_amax[i];
  };
  std::map<size_t, float> awq_input_amax;  // precomputed entries are consumed while writing
  for (const auto& [i, p] : precomputed) awq_input_amax[i] = input_amax_of(i);
  auto input_scale_for = [&](size_t i) {
    auto amax_in = [&](size_t m) {
      auto it = awq_input_amax.find(m);
      return it != awq_input_amax.end() ? it->second : act_amax[m];
    };
    float amax = amax_in(i);
    const int g = arch.linears[i].group;
    if ((options.activations == ActQuant::nvfp4 || options.activations == ActQuant::int8) && g >= 0)
      for (size_t m : arch.fused_groups[size_t(g)]) amax = std::max(amax, amax_in(m));
    if (!(amax > 0.f))
      fail("{}: calibration saw an all-zero input for '{}'; it has no input scale",
           model_dir.string(), arch.linears[i].name);
    switch (options.activations) {
      case ActQuant::nvfp4: return amax * (1.0f / 2688.0f);
      case ActQuant::int8: return amax * (1.0f / 127.0f);
      default: return amax * (1.0f / 448.0f);
    }
  };

  std::map<std::string, std::string> weight_map;
  for (size_t s = 0; s < shards.size(); ++s) {
    const std::string file_name = shard_file_name(s, shards.size());
    std::vector<TensorSpec> specs;
    std::set<std::string> names;
    for (size_t i : shards[s])
      for (const auto& spec : items[i].specs) {
        specs.push_back(spec);
        names.insert(spec.name);
        weight_map[spec.name] = file_name;
      }
    // Keep __metadata__ aliases whose stored tensor lands in this shard.
    std::map<std::string, std::string> metadata = {{"format", "pt"}};
    for (const auto& [alias, stored] : ckpt.aliases())
      if (names.count(stored) && !(head_src && alias == "lm_head.weight")) {
        metadata[alias] = stored;
        weight_map[alias] = file_name;
      }
    SafetensorsWriter writer(staged.path() / file_name, specs, metadata);
    for (size_t i : shards[s]) {
      const OutputItem& item = items[i];
      const CheckpointTensor& t = *item.source;
      const TensorView view = t.file->view(*t.entry);
      if (item.head) {
        // Weight-only: mse searches as for the other Linears, every other algo is max.
        const WeightRows w = weight_rows(view);
        const AmaxResult a = weight_amax(w, pool);
        if (a.nonfinite > 0)
          fail("{}: tensor '{}' has {} NaN or Inf values", t.file->path().string(), t.name,
               a.nonfinite);
        const RtnOptions rtn{head.format, head.block, exporter->scale_dtype(head)};
        const QuantizedTensor q =
            options.algo != WeightAlgo::mse ? quantize_rtn(w, rtn, a.amax, pool)
            : head.format == Format::nvfp4
                ? quantize_mse(w, rtn, MseOptions{}, pool,
                               nvfp4_mse_global_amax(w, a.amax, MseOptions{}, pool))
                : quantize_mse(w, rtn, MseOptions{}, pool);
        const auto data = exporter->linear_data(head, q);
        for (size_t k = 0; k < data.size(); ++k) {
          writer.write(item.specs[k].name, data[k]);
          report.quantized_bytes += data[k].size();
        }
        report.quantized_weights += head.rows * head.cols;
        t.file->release(*t.entry);
        if (!head_tied) progress.advance(view.nbytes);  // a tied source was counted once
        continue;
      }
      if (item.linear < 0 && vector_override.count(t.name)) {
        // A norm that absorbed AWQ / SmoothQuant scales, in its own dtype.
        const auto bytes = scales_to_bytes(vector_override[t.name], t.entry->dtype);
        writer.write(t.name, bytes);
        ++report.tensors_copied;
      } else if (item.linear < 0) {
        // Large tensors (embeddings) are streamed so their pages never all stay resident.
        writer.write(t.name, {view.data, view.nbytes}, [&](size_t offset, size_t length) {
          t.file->release(*t.entry, offset, length);
        });
        ++report.tensors_copied;
      } else {
        const size_t li = size_t(item.linear);
        const ExportedLinear& l = exported[li];
        QuantizedTensor q;
        LinearExtras extras;
        if (auto it = precomputed.find(li); it != precomputed.end()) {
          unspill(it->second, *spill_file);
          q = std::move(it->second.q);
          extras.pre_quant_scale = std::move(it->second.pre_quant_scale);
          precomputed.erase(it);
        } else {
          q = quantize_max_or_mse(li);
        }
        if (l.act != ActQuant::none) extras.input_scale = input_scale_for(li);
        if (l.pre_quant_scale && extras.pre_quant_scale.empty())
          extras.pre_quant_scale.assign(size_t(l.cols), 1.f);  // AWQ fell back to max
        if (l.kv_scale) {
          const auto& kv = kv_amax[size_t(arch.linears[li].layer)];
          extras.kv_scale = (l.kv_scale == 'k' ? kv.first : kv.second) * (1.0f / 448.0f);
        }
        const auto data = exporter->linear_data(l, q, extras);
        for (size_t k = 0; k < data.size(); ++k) {
          writer.write(item.specs[k].name, data[k]);
          report.quantized_bytes += data[k].size();
        }
        report.quantized_weights += l.rows * l.cols;
      }
      t.file->release(*t.entry);
      progress.advance(view.nbytes);
    }
    writer.finish();
    report.bytes_out += fs::file_size(staged.path() / file_name);
  }
  progress.finish();
  report.shards = int(shards.size());

  if (shards.size() > 1)
    write_shard_index(staged.path(),
                      std::accumulate(item_bytes.begin(), item_bytes.end(), uint64_t(0)),
                      weight_map);

  // config.json keeps the input's key order (already validated by Checkpoint::open).
  std::ifstream config_file(model_dir / "config.json");
  nlohmann::ordered_json config = nlohmann::ordered_json::parse(config_file);
  // lm_head is its own (quantized) tensor: engines must not tie it to the embedding.
  if (head_src) config["tie_word_embeddings"] = false;
  QuantizationSummary summary{options.format, block, excluded_names};
  summary.act = options.activations;
  summary.per_tensor = per_tensor;
  summary.awq = awq;
  summary.kv_fp8 = options.kv_fp8;
  if (options.assignment || int4_channel) {
    // One format: the single-format config as usual; several: the mixed-precision config.
    // INT4 per channel counts as one format even where in_features (its block) differ.
    std::set<std::pair<Format, int>> used;
    bool all_channel = true;
    for (size_t i = 0; i < arch.linears.size(); ++i)
      if (reason[i].empty()) {
        const ExportedLinear& l = exported[i];
        used.insert({l.format, l.block});
        summary.mixed.push_back({arch.linears[i].name, l.format, l.block, l.cols});
        all_channel = all_channel && l.format == Format::int4 && l.block == l.cols;
      }
    summary.channel = !used.empty() && all_channel;
    if (used.size() <= 1) summary.mixed.clear();
    if (used.size() == 1) {
      summary.format = used.begin()->first;
      summary.block = used.begin()->second;
    }
    if (options.assignment)
      report.format = used.size() > 1 && !summary.channel ? "mixed"
                      : used.empty() ? "none"
                                     : std::string(format_info(summary.format).name);
  }
  config["quantization_config"] = exporter->quantization_config(summary);
  write_json_file(staged.path() / "config.json", config);
  exporter->write_extra_files(summary, staged.path());
  for (const auto& name : ckpt.extra_files()) {
    std::error_code ec;
    fs::copy_file(model_dir / name, staged.path() / name, ec);
    if (ec) fail("{}: cannot copy to the output: {}", (model_dir / name).string(), ec.message());
  }
  staged.commit();

  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  report.peak_rss_bytes = peak_rss_bytes();
  for (const auto& e : report.excluded)
    if (e.reason.find("not a multiple") != std::string::npos)
      report.warnings.push_back(fmt::format("{} left unquantized: {}", e.name, e.reason));
  return report;
}

}  // namespace qf

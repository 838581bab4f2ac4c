// Quantization of a whole checkpoint in three steps (docs/ARCHITECTURE.md): decide what becomes
// of each module (module_plan), calibrate and run the data-driven algorithms layer by layer
// (calibrated_weights), write the output in the target's layout (output_writer).
#include "pipeline/quantize_checkpoint.h"

#include "core/error.h"
#include "core/progress.h"
#include "core/thread_pool.h"
#include "engine/weights.h"
#include "io/staged_directory.h"
#include "pipeline/calibrated_weights.h"
#include "pipeline/linear_quantizer.h"
#include "pipeline/module_plan.h"
#include "pipeline/output_writer.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <set>

namespace fs = std::filesystem;

namespace qf {

namespace {

constexpr AlgoRow kAlgos[] = {
    {WeightAlgo::max, "max", false, false, false, false},
    {WeightAlgo::mse, "mse", false, false, false, false},
    {WeightAlgo::awq, "awq", true, false, false, false},
    {WeightAlgo::gptq, "gptq", false, false, false, true},
    {WeightAlgo::awq_gptq, "awq+gptq", true, false, false, true},
    {WeightAlgo::local_hessian, "local_hessian", false, false, true, false},
    {WeightAlgo::local_hessian_gptq, "local_hessian+gptq", false, false, true, true},
    {WeightAlgo::four_over_six, "four_over_six", false, false, false, false, true},
    {WeightAlgo::four_over_six_gptq, "four_over_six+gptq", false, false, false, true, true},
    {WeightAlgo::smoothquant, "smoothquant", false, true, false, false},
    {WeightAlgo::tune, "tune", false, false, false, false, false, true},
    {WeightAlgo::local_hessian_tune, "local_hessian+tune", false, false, true, false, false, true},
    {WeightAlgo::gptq_tune, "gptq+tune", false, false, false, true, false, true},
    {WeightAlgo::local_hessian_gptq_tune, "local_hessian+gptq+tune", false, false, true, true,
     false, true},
    {WeightAlgo::four_over_six_tune, "four_over_six+tune", false, false, false, false, true, true},
};

}  // namespace

const AlgoRow& algo_row(WeightAlgo a) {
  for (const AlgoRow& r : kAlgos)
    if (r.algo == a) return r;
  return kAlgos[0];
}

std::string_view weight_algo_name(WeightAlgo a) { return algo_row(a).name; }

std::optional<WeightAlgo> parse_weight_algo(std::string_view name) {
  for (const AlgoRow& r : kAlgos) {
    if (r.name == name) return r.algo;
    std::string underscored(r.name);
    std::replace(underscored.begin(), underscored.end(), '+', '_');
    if (underscored == name) return r.algo;
  }
  return std::nullopt;
}

bool excluded_by_patterns(const std::string& name, const std::vector<std::string>& patterns) {
  std::string matched;
  return matches_any(name, patterns, &matched);
}

namespace {

// The report's fields that follow from the plan alone (shared by the run and the dry run).
std::string stored_format_name(const ExportedLinear& l) {
  const FormatInfo& info = format_info(l.format);
  if (info.block_rule != BlockRule::free) return std::string(info.name);
  if (l.block == l.cols && l.block != info.block) return std::string(info.name) + ":channel";
  return fmt::format("{}:{}", info.name, l.block);
}

QuantizeReport planned_report(const ModulePlan& plan, const QuantizeOptions& options,
                              const fs::path& out_dir) {
  QuantizeReport report;
  report.algo = std::string(weight_algo_name(options.algo));
  if (options.assignment) {
    // A plan's own algorithms (max, four_over_six) per module.
    bool four_over_six = false, other = false;
    for (size_t i = 0; i < plan.exported.size(); ++i)
      if (plan.quantized(i)) (plan.four_over_six[i] ? four_over_six : other) = true;
    if (four_over_six) report.algo = other ? "max, four_over_six (per module)" : "four_over_six";
  }
  report.activations = std::string(act_quant_name(options.activations));
  if (options.assignment) {
    std::set<ActQuant> acts;
    auto scheme = [&](const ExportedLinear& l, bool four_over_six) {
      std::string s = stored_format_name(l);
      if (four_over_six) s += " four_over_six";
      if (l.act != ActQuant::none) s += fmt::format(" + {} activations", act_quant_name(l.act));
      ++report.module_schemes[s];
      acts.insert(l.act);
    };
    for (size_t i = 0; i < plan.exported.size(); ++i)
      if (plan.quantized(i)) scheme(plan.exported[i], plan.four_over_six[i]);
    if (plan.head_src) scheme(plan.head, plan.head_four_over_six);
    if (acts.size() > 1) report.activations = "per module";
    else if (acts.size() == 1) report.activations = std::string(act_quant_name(*acts.begin()));
  }
  report.kv_cache = options.kv_fp8 ? "fp8" : "none";
  report.output = out_dir;
  report.format = std::string(format_info(options.format).name);
  report.export_format = std::string(export_format_name(options.export_format));
  report.excluded = plan.excluded;
  report.warnings = plan.warnings;
  report.lm_head_quantized = plan.head_src != nullptr;
  report.mxfp4_cast = plan.mxfp4_cast;
  report.modules_excluded = int(plan.excluded.size());
  report.modules_quantized = int(plan.linear_by_weight.size());
  ServeQuery q;
  q.target = options.export_format;
  q.activations = options.activations;
  q.kv_fp8 = options.kv_fp8;
  q.lm_head_quantized = plan.head_src != nullptr;
  q.output = out_dir.empty() ? "OUT" : out_dir.string();
  auto add = [&](const ExportedLinear& l) {
    q.formats.insert(l.format);
    const FormatInfo& info = format_info(l.format);
    if (info.block_rule == BlockRule::free && l.block == l.cols && l.block != info.block)
      q.int4_channel = true;
    q.pre_quant_scale = q.pre_quant_scale || l.pre_quant_scale;
    q.fp8_per_channel = q.fp8_per_channel || (l.format == Format::fp8 && !l.per_tensor);
  };
  for (size_t i = 0; i < plan.exported.size(); ++i)
    if (plan.quantized(i)) add(plan.exported[i]);
  if (plan.head_src) add(plan.head);
  for (size_t i = 0; i < plan.exported.size(); ++i)
    if (plan.quantized(i) && plan.exported[i].fused_expert != FusedExpert::none)
      q.gpt_oss_experts = true;
  report.serve = serve_commands(q);
  return report;
}

void warn_unfit_modules(QuantizeReport& report) {
  for (const auto& e : report.excluded)
    if (e.reason.find("not a multiple") != std::string::npos)
      report.warnings.push_back(fmt::format("{} left unquantized: {}", e.name, e.reason));
}


ModuleDecision quantized_module(const std::string& name, const ExportedLinear& l,
                                const Exporter& exporter) {
  uint64_t bytes = 0;
  for (const TensorSpec& t : exporter.linear_specs(l)) bytes += t.nbytes();
  return {name, stored_format_name(l), double(bytes) * 8.0 / double(l.rows * l.cols), ""};
}

}  // namespace

QuantizeReport plan_quantization(const SourceModel& source, const QuantizeOptions& options,
                                 const fs::path& out_dir) {
  const auto exporter = make_exporter(options.export_format);
  const ModulePlan plan = plan_modules(source, options, *exporter);
  QuantizeReport report = planned_report(plan, options, out_dir);
  report.dry_run = true;
  const Architecture& arch = source.arch;
  report.bytes_in += source.input_bytes();
  const OutputLayout layout = plan_output(source, plan, *exporter, options.max_shard_bytes);
  for (const OutputShard& shard : layout.shards)
    report.bytes_out += safetensors_file_size(shard.specs, shard.metadata);
  report.shards = int(layout.shards.size());
  std::set<std::string> formats;
  for (const OutputItem& item : layout.items) {
    if (item.stack_quantized) {
      report.quantized_bytes += item.nbytes();
      for (size_t li : plan.stacks[size_t(item.stack)].linears)
        report.quantized_weights += plan.exported[li].rows * plan.exported[li].cols;
      continue;
    }
    if (item.linear < 0 && !item.head) continue;
    const ExportedLinear& l = item.head ? plan.head : plan.exported[size_t(item.linear)];
    report.quantized_bytes += item.nbytes();
    report.quantized_weights += l.rows * l.cols;
  }
  for (size_t i = 0; i < arch.linears.size(); ++i) {
    const LinearModule& m = arch.linears[i];
    if (plan.quantized(i)) {
      report.modules.push_back(quantized_module(m.name, plan.exported[i], *exporter));
      formats.insert(report.modules.back().format.substr(0, report.modules.back().format.find(':')));
    } else {
      const CheckpointTensor* w = plan.weights[i];
      report.modules.push_back(
          {m.name, "keep", w ? double(dtype_size(w->entry->dtype)) * 8.0 : 0.0, plan.reason[i]});
    }
  }
  if (plan.head_src) report.modules.push_back(quantized_module(arch.head_name, plan.head, *exporter));
  if (options.assignment)
    report.format = formats.size() > 1 ? "mixed" : formats.empty() ? "none" : *formats.begin();
  warn_unfit_modules(report);
  return report;
}

namespace {

// The engine's loader is the first reader of every output: an output it rejects (a missing head,
// a vocab_size that does not match the embedding) must fail here, before it takes the final
// name. Loading maps the files and checks every tensor's name, dtype and shape; only small
// vectors are copied, except INT8 (W8A8) weights, which the engine dequantizes in memory, so
// those outputs are not loaded again here.
void check_loads(const fs::path& staging, const fs::path& out_dir, const QuantizeOptions& options) {
  if (options.format == Format::int8 && !options.assignment) return;
  try {
    (void)ModelWeights::load(staging);
  } catch (const Error& e) {
    fail("{}: the written checkpoint does not load in qforge's engine, so it was not kept: {}",
         out_dir.string(), e.what());
  }
}

}  // namespace

QuantizeReport quantize_checkpoint(const SourceModel& source, const fs::path& out_dir,
                                   const QuantizeOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  std::error_code ec;
  if (fs::equivalent(source.dir, out_dir, ec))
    fail("{}: output directory is the input directory", out_dir.string());
  const auto exporter = make_exporter(options.export_format);
  set_constant_division(options.scale_division);

  // 1. Decide what becomes of each Linear and of the output head.
  const ModulePlan plan = plan_modules(source, options, *exporter);
  QuantizeReport report = planned_report(plan, options, out_dir);

  ThreadPool pool(options.threads > 0 ? options.threads : ThreadPool::hardware_threads());
  if (!pool.start_failure().empty()) report.warnings.push_back("thread pool: " + pool.start_failure());
  std::vector<fs::path> inputs = {source.dir};
  inputs.insert(inputs.end(), options.calib.files.begin(), options.calib.files.end());
  StagedDirectory staged(out_dir, options.force, inputs);
  report.warnings.insert(report.warnings.end(), staged.notes().begin(), staged.notes().end());
  LinearQuantizer quantizer(source, plan, options, *exporter, pool);

  // 2. Calibrate and run the data-driven algorithms, one decoder layer at a time.
  CalibrationOutcome calibration =
      calibrate(source, plan, options, *exporter, quantizer, pool, staged.path(), report);

  // 3. Write the output in the target's layout, then move it into place.
  const auto write_start = std::chrono::steady_clock::now();
  write_output(source, plan, calibration, quantizer, options, *exporter, pool, staged.path(),
               report);
  report.mxfp4_blocks = quantizer.cast_stats().blocks;
  report.mxfp4_inexact_blocks = quantizer.cast_stats().inexact;
  report.four_over_six_blocks = quantizer.four_over_six_counts().blocks;
  report.four_over_six_m4_blocks = quantizer.four_over_six_counts().m4_blocks;
  report.fp8_four_over_six_tensors = quantizer.fp8_four_over_six_tensors();
  report.fp8_four_over_six_wide = quantizer.fp8_four_over_six_wide();
  if (report.mxfp4_inexact_blocks > 0)
    report.warnings.push_back(fmt::format(
        "MXFP4 -> NVFP4: {} of {} expert blocks lie more than 17 binades below their tensor's "
        "largest block, beyond what E4M3 x one tensor scale holds exactly; they were requantized "
        "from their MXFP4 values (the rest are exact)",
        report.mxfp4_inexact_blocks, report.mxfp4_blocks));
  check_loads(staged.path(), out_dir, options);
  staged.commit();
  report.write_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - write_start).count();

  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  report.peak_rss_bytes = peak_rss_bytes();
  warn_unfit_modules(report);
  return report;
}

}  // namespace qf

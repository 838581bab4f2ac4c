// `qforge quantize`: a Hugging Face checkpoint in, an engine-loadable quantized checkpoint out.
#include "cli/commands.h"
#include "plan/presets.h"
#include "core/error.h"
#include "core/progress.h"
#include "formats/int4.h"
#include "io/json_file.h"
#include "plan/sensitivity_report.h"
#include "pipeline/gguf_output.h"
#include "pipeline/quantize_checkpoint.h"
#include "targets/target.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>

namespace qf::cli {

namespace {

// What quantizes the output head, said where the summary says it was kept.
constexpr const char* kLmHeadKept =
    "kept in its dtype (--quantize-lm-head quantizes it: faster decode, some accuracy cost, "
    "engine support varies)";

std::string time_breakdown(const QuantizeReport& r) {
  std::vector<std::string> parts;
  if (r.plan_seconds > 0) parts.push_back(fmt::format("--auto plan {:.1f} s", r.plan_seconds));
  if (r.calib_tokens > 0) {
    parts.push_back(fmt::format("calibration {:.1f} s", r.calib_seconds));
    parts.push_back(fmt::format("algorithms {:.1f} s", r.algo_seconds));
  }
  parts.push_back(fmt::format("writing {:.1f} s", r.write_seconds));
  const double other =
      r.seconds - r.plan_seconds - r.calib_seconds - r.algo_seconds - r.write_seconds;
  if (other >= 0.05) parts.push_back(fmt::format("other {:.1f} s", other));
  if (r.seconds < 60) return fmt::format("{:.2f} s ({})", r.seconds, fmt::join(parts, ", "));
  return fmt::format("{} ({:.1f} s: {})", format_duration(r.seconds), r.seconds,
                     fmt::join(parts, ", "));
}

// The parts every summary ends with: unquantized modules and what would quantize them, the
// --auto choice, and how to serve the output.
void print_summary_tail(const QuantizeReport& r) {
  if (!r.excluded.empty()) {
    fmt::print("  unquantized modules:\n");
    for (const auto& e : r.excluded) {
      fmt::print("    {:<44} {}\n", e.name, e.reason);
      if (!e.hint.empty()) fmt::print("    {:<44} to quantize: {}\n", "", e.hint);
    }
  }
  if (r.auto_plan) {
    const AutoPlanSummary& a = *r.auto_plan;
    fmt::print("  --auto {}: {}\n", a.target, a.solved);
    fmt::print("    {:<52} {:<13} {:>6}  {:>15}\n", "unit", "format", "bits", "predicted error");
    for (const AutoPlanUnit& u : a.units)
      fmt::print("    {:<52} {:<13} {:>6.3f}  {:>15.4g}\n", u.unit, u.format, u.bits,
                 u.predicted_error);
    fmt::print("    predicted error: {}\n", a.measure);
  }
  if (!r.serve.empty()) {
    fmt::print("  serve it (per ../shared/specs/engine-formats.md; not run here):\n");
    for (const ServeCommand& c : r.serve) {
      fmt::print("    {:<13} {:<14} {}\n", c.engine, engine_support_name(c.support),
                 c.command.empty() ? "-" : c.command);
      if (!c.note.empty()) fmt::print("    {:<13} {:<14} {}\n", "", "", c.note);
    }
  }
  // Last, where the eye lands when the run ends.
  if (!r.html.empty()) fmt::print("  {:<28} {}\n", "html report", r.html);
}

// Names --format accepts: qforge's formats, and the GGUF file types (--export gguf only).
std::vector<std::string> all_format_choices() {
  std::vector<std::string> out = format_name_choices(/*weight_only=*/false);
  for (const std::string& n : gguf_file_type_names())
    if (std::find(out.begin(), out.end(), n) == out.end()) out.push_back(n);
  return out;
}

std::vector<std::string> export_choices() {
  std::vector<std::string> out = target_names();
  out.emplace_back("gguf");
  return out;
}

void print_gguf_summary(const GgufReport& r, bool json) {
  if (json) {
    nlohmann::ordered_json j;
    j["output"] = r.output.string();
    j["format"] = r.format;
    j["export"] = "gguf";
    j["file_type"] = r.file_type;
    j["tokenizer"] = r.tokenizer;
    j["bytes_in"] = r.bytes_in;
    j["bytes_out"] = r.bytes_out;
    j["seconds"] = r.seconds;
    j["algo"] = r.algo;
    j["imatrix_entries"] = r.imatrix_entries;
    j["calib_tokens"] = r.calib_tokens;
    j["calib_seconds"] = r.calib_seconds;
    j["tensors"] = nlohmann::ordered_json::array();
    for (const auto& t : r.tensors)
      j["tensors"].push_back(
          {{"name", t.name}, {"type", t.type}, {"ne", t.ne}, {"bytes", t.bytes}, {"note", t.note}});
    j["warnings"] = r.warnings;
    fmt::print("{}\n", j.dump(2));
    return;
  }
  fmt::print("qforge quantize -> {} ({}, gguf export, general.file_type {})\n", r.output.string(),
             r.format, r.file_type);
  fmt::print("  {:<28} {}\n", "tokenizer", r.tokenizer);
  fmt::print("  {:<28} {} ({} bytes)\n", "bytes in", human_bytes(double(r.bytes_in)), r.bytes_in);
  fmt::print("  {:<28} {} ({} bytes)\n", "bytes out", human_bytes(double(r.bytes_out)), r.bytes_out);
  fmt::print("  {:<28} {:.2f} s\n", "time", r.seconds);
  if (!r.algo.empty()) fmt::print("  {:<28} {}\n", "algorithm", r.algo);
  if (r.imatrix_entries > 0) fmt::print("  {:<28} {} tensors\n", "importance from --imatrix", r.imatrix_entries);
  if (r.calib_tokens > 0)
    fmt::print("  {:<28} {} tokens, {:.2f} s (with the algorithms)\n", "calibration", r.calib_tokens,
               r.calib_seconds);
  fmt::print("  {:<28} {:<7} {:>16}  {}\n", "tensor", "type", "ne", "why this type");
  for (const auto& t : r.tensors)
    fmt::print("  {:<28} {:<7} {:>16}  {}\n", t.name, t.type, fmt::format("[{}]", fmt::join(t.ne, ", ")),
               t.note);
  fmt::print("  load it in llama.cpp: llama-cli -m {}\n",
             r.output.string());
}

}  // namespace

void print_quantize_summary(const QuantizeReport& r) {
  const double mbps = r.seconds > 0 ? double(r.bytes_in) / r.seconds / 1e6 : 0;
  if (r.dry_run) {
    fmt::print("qforge quantize --dry-run{} ({}, {} export): nothing written\n",
               r.output.empty() ? "" : " -> " + r.output.string(), r.format, r.export_format);
    fmt::print("  {:<44} {:<14} {:>6}  {}\n", "module", "format", "bits", "kept because");
    for (const ModuleDecision& m : r.modules)
      fmt::print("  {:<44} {:<14} {:>6.3f}  {}\n", m.name, m.format, m.bits, m.reason);
  } else {
    fmt::print("qforge quantize -> {} ({}, {} export)\n", r.output.string(), r.format,
               r.export_format);
  }
  fmt::print("  {:<28} {}\n", "modules quantized", r.modules_quantized);
  for (const auto& [scheme, n] : r.module_schemes)
    fmt::print("  {:<28} {} modules\n", "  " + scheme, n);
  fmt::print("  {:<28} {}\n", "modules left unquantized", r.modules_excluded);
  fmt::print("  {:<28} {}\n", "lm_head",
             r.lm_head_quantized ? fmt::format("quantized ({}; engine support varies, see the "
                                               "serve lines below)",
                                               r.format)
                                 : std::string(kLmHeadKept));
  if (r.mxfp4_cast && !r.dry_run)
    fmt::print("  {:<28} {}\n", "MXFP4 experts -> NVFP4",
               r.mxfp4_inexact_blocks == 0
                   ? fmt::format("exact ({} blocks: same values)", r.mxfp4_blocks)
                   : fmt::format("{} of {} blocks requantized (beyond 18 binades), the rest exact",
                                 r.mxfp4_inexact_blocks, r.mxfp4_blocks));
  else if (r.mxfp4_cast)
    fmt::print("  {:<28} {}\n", "MXFP4 experts -> NVFP4", "cast (exact within 18 binades)");
  fmt::print("  {:<28} {}\n", "tensors copied unchanged", r.tensors_copied);
  fmt::print("  {:<28} {} ({} bytes)\n", "bytes in", human_bytes(double(r.bytes_in)), r.bytes_in);
  fmt::print("  {:<28} {} ({} bytes)\n", r.dry_run ? "bytes out (predicted)" : "bytes out",
             human_bytes(double(r.bytes_out)), r.bytes_out);
  fmt::print("  {:<28} {:.2f}x\n", "size ratio in/out",
             r.bytes_out ? double(r.bytes_in) / double(r.bytes_out) : 0.0);
  fmt::print("  {:<28} {:.3f}\n", "bits per quantized weight", r.bits_per_quantized_weight());
  fmt::print("  {:<28} {}\n", "output shards", r.shards);
  fmt::print("  {:<28} {}\n", "algorithm", r.algo);
  if (r.four_over_six_blocks > 0)
    fmt::print("  {:<28} {} of {} blocks ({:.1f}%) map their max to 4, the rest to 6\n",
               "four over six", r.four_over_six_m4_blocks, r.four_over_six_blocks,
               100.0 * double(r.four_over_six_m4_blocks) / double(r.four_over_six_blocks));
  if (r.fp8_four_over_six_tensors > 0)
    fmt::print("  {:<28} {} of {} FP8 tensors take 1.5x their max as amax, the rest 1.0x\n",
               "four over six (fp8)", r.fp8_four_over_six_wide, r.fp8_four_over_six_tensors);
  if (r.dry_run) {
    fmt::print("  {:<28} {} / kv cache {}\n", "activations", r.activations, r.kv_cache);
    print_summary_tail(r);
    return;
  }
  fmt::print("  {:<28} {}\n", "time (wall, everything)", time_breakdown(r));
  fmt::print("  {:<28} {:.1f} MB/s\n", "throughput (input)", mbps);
  fmt::print("  {:<28} {}\n", "peak memory (RSS)", human_bytes(double(r.peak_rss_bytes)));
  if (r.calib_tokens > 0) {
    fmt::print("  {:<28} {} / kv cache {}\n", "activations", r.activations, r.kv_cache);
    fmt::print("  {:<28} {} tokens, {:.2f} s, {:.0f} tokens/s\n", "calibration", r.calib_tokens,
               r.calib_seconds, r.calib_seconds > 0 ? double(r.calib_tokens) / r.calib_seconds : 0.0);
    fmt::print("  {:<28} {:.2f} s\n", "algorithm time", r.algo_seconds);
    fmt::print("  {:<28} {}\n", "calibration activations", human_bytes(double(r.activation_bytes)));
    for (const auto& layer : r.expert_tokens) {
      std::vector<int64_t> t = layer.tokens;
      std::sort(t.begin(), t.end());
      const auto unused = std::count(t.begin(), t.end(), int64_t(0));
      fmt::print("  {:<28} min {} / median {} / max {} tokens per expert{}\n",
                 fmt::format("layer {} experts ({})", layer.layer, t.size()), t.front(),
                 t[t.size() / 2], t.back(),
                 unused > 0 ? fmt::format(", {} unused", unused) : std::string());
    }
  }
  print_summary_tail(r);
}

std::string quantize_report_json(const QuantizeReport& r) {
  nlohmann::ordered_json j;
  if (r.dry_run) j["dry_run"] = true;
  j["output"] = r.output.string();
  j["format"] = r.format;
  j["export"] = r.export_format;
  j["bytes_in"] = r.bytes_in;
  j["bytes_out"] = r.bytes_out;
  j["seconds"] = r.seconds;
  j["plan_seconds"] = r.plan_seconds;
  j["write_seconds"] = r.write_seconds;
  j["modules_quantized"] = r.modules_quantized;
  j["fp8_four_over_six_tensors"] = r.fp8_four_over_six_tensors;
  j["fp8_four_over_six_wide"] = r.fp8_four_over_six_wide;
  j["module_schemes"] = r.module_schemes;
  j["modules_excluded"] = r.modules_excluded;
  j["lm_head_quantized"] = r.lm_head_quantized;
  if (!r.lm_head_quantized) j["lm_head_hint"] = kLmHeadKept;
  if (r.mxfp4_cast)
    j["mxfp4_cast"] = {{"blocks", r.mxfp4_blocks},
                       {"inexact_blocks", r.mxfp4_inexact_blocks},
                       {"exact", !r.dry_run && r.mxfp4_inexact_blocks == 0}};
  if (r.four_over_six_blocks > 0)
    j["four_over_six"] = {{"blocks", r.four_over_six_blocks},
                          {"m4_blocks", r.four_over_six_m4_blocks}};
  j["tensors_copied"] = r.tensors_copied;
  j["quantized_weights"] = r.quantized_weights;
  j["bits_per_quantized_weight"] = r.bits_per_quantized_weight();
  j["shards"] = r.shards;
  j["peak_rss_bytes"] = r.peak_rss_bytes;
  j["algo"] = r.algo;
  j["activations"] = r.activations;
  j["kv_cache"] = r.kv_cache;
  j["calib_tokens"] = r.calib_tokens;
  j["calib_seconds"] = r.calib_seconds;
  j["calib_tokens_per_second"] = r.calib_seconds > 0 ? double(r.calib_tokens) / r.calib_seconds : 0.0;
  j["algo_seconds"] = r.algo_seconds;
  j["activation_bytes"] = r.activation_bytes;
  if (!r.tuned_layers.empty()) {
    j["tuned_layers"] = nlohmann::ordered_json::array();
    for (const auto& t : r.tuned_layers)
      j["tuned_layers"].push_back({{"layer", t.layer},
                                   {"block_mse_init", t.mse_init},
                                   {"block_mse_tuned", t.mse_tuned},
                                   {"kept_init", t.kept_init},
                                   {"seconds", t.seconds}});
  }
  if (!r.expert_tokens.empty()) {
    j["expert_tokens"] = nlohmann::ordered_json::array();
    for (const auto& layer : r.expert_tokens)
      j["expert_tokens"].push_back({{"layer", layer.layer}, {"tokens", layer.tokens}});
  }
  j["excluded"] = nlohmann::ordered_json::array();
  for (const auto& e : r.excluded)
    j["excluded"].push_back({{"name", e.name}, {"reason", e.reason}, {"hint", e.hint}});
  j["warnings"] = r.warnings;
  if (r.auto_plan) {
    const AutoPlanSummary& a = *r.auto_plan;
    nlohmann::ordered_json ja;
    ja["target"] = a.target;
    ja["solved"] = a.solved;
    ja["achieved"] = a.achieved;
    ja["bits_per_weight"] = a.bits_per_weight;
    ja["linear_bytes"] = a.linear_bytes;
    ja["budget_bytes"] = a.budget_bytes;
    ja["exact_solve"] = a.exact_solve;
    ja["measure"] = a.measure;
    ja["units"] = nlohmann::ordered_json::array();
    for (const AutoPlanUnit& u : a.units)
      ja["units"].push_back({{"unit", u.unit},
                             {"format", u.format},
                             {"bits", u.bits},
                             {"predicted_error", u.predicted_error},
                             {"bytes", u.bytes}});
    j["auto"] = ja;
  }
  if (!r.html.empty()) j["html"] = r.html;
  j["serve"] = nlohmann::ordered_json::array();
  for (const ServeCommand& c : r.serve)
    j["serve"].push_back({{"engine", c.engine},
                          {"support", engine_support_name(c.support)},
                          {"command", c.command},
                          {"note", c.note}});
  if (r.dry_run) {
    j["size_ratio"] = r.bytes_out ? double(r.bytes_in) / double(r.bytes_out) : 0.0;
    j["modules"] = nlohmann::ordered_json::array();
    for (const ModuleDecision& m : r.modules)
      j["modules"].push_back(
          {{"name", m.name}, {"format", m.format}, {"bits", m.bits}, {"reason", m.reason}});
  }
  return j.dump(2);
}

void register_quantize(CLI::App& app, Action& run) {
  struct Args {
    std::string model, out, format = "nvfp4", export_format = "modelopt", max_shard = "5GB";
    std::vector<std::string> exclude, calib_files;
    CalibrationOptions calib;  // defaults 128 x 512, seed 0
    std::string algo = "max", activations = "none", kv_cache = "none", group_size;
    int threads = 0;
    KernelMode kernels = KernelMode::exact;
    std::string scale_division = "gpu";
    std::string calib_moe = "routed";
    bool force = false, json = false, quiet = false, calib_quantized_inputs = false,
         allow_nonfinite = false;
    float smoothquant_alpha = 1.0f;
    int64_t tune_iters = 200, tune_batch = 8;
    float tune_lr = 0.f;
    std::string tune_optimizer = "sign", tune_target = "fp", tune_params = "rounding";
    bool quantize_lm_head = false;
    std::string qformat, tokenizer, imatrix;
    bool dry_run = false;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand(
      "quantize",
      "Quantize the Linear weights of a Hugging Face checkpoint (weight-only by default, round "
      "to nearest with max calibration; with --calib: W4A4 / W8A8 activation scales, FP8 KV "
      "cache scales, AWQ, GPTQ) and write a checkpoint that engines load.");
  // Required, except by `--preset list`.
  cmd->add_option("model", args->model, "Input model directory (config.json + safetensors)");
  cmd->add_option("-o,--output", args->out, "Output directory (written under a temporary name, "
                                            "renamed when complete); required unless --dry-run");
  std::string format_help = "Weight format: ";
  for (const FormatInfo& f : all_formats()) {
    if (f.id != all_formats().front().id) format_help += ", ";
    format_help += fmt::format("{} ({})", f.name, f.cli_summary);
  }
  CLI::Option* format_opt = cmd->add_option("--format", args->format, format_help)
      ->check(name_choice("format", all_format_choices()))
      ->capture_default_str();
  cmd->add_option("--export", args->export_format,
                  "Checkpoint format: modelopt (ModelOpt HF: vLLM, SGLang, TensorRT-LLM), "
                  "compressed-tensors (vLLM, SGLang, transformers) or gguf (llama.cpp: one .gguf "
                  "file named by -o; Llama family; --format f32, f16, bf16, q8_0, q4_0, q4_k, "
                  "q5_k, q6_k, q4_k_m (llama-quantize's mix), mxfp4 or nvfp4)")
      ->check(name_choice("export format", export_choices()))
      ->capture_default_str();
  cmd->add_option("--exclude", args->exclude,
                  "Leave modules matching this glob unquantized (repeatable), e.g. "
                  "'*.layers.0.*' or '*down_proj'. Embeddings are never quantized, lm_head only with "
                  "--quantize-lm-head; a fused group (q/k/v, gate/up) is excluded whole");
  cmd->add_flag("--quantize-lm-head", args->quantize_lm_head,
                "Also quantize the output head (off by default, as ModelOpt): faster decode, "
                "some accuracy cost. Tied embeddings are untied (model.embed_tokens keeps its "
                "dtype). Weight-only (max, or mse / four_over_six with that --algo). Engine "
                "support varies: vLLM loads an NVFP4 ModelOpt lm_head only in recent builds, SGLang "
                "not");
  CLI::Option* group_opt = cmd->add_option("--group-size", args->group_size,
                  "INT4 group size (elements per scale along the input dimension): 32, 64, 128, "
                  "or channel (one scale per output channel: the group is the whole input row); "
                  "default 128")
      ->check(name_choice("group size", {"32", "64", "128", "channel"}));
  CLI::Option* algo_opt = cmd->add_option("--algo", args->algo,
                  "Weight algorithm: max (round to nearest, no data), mse (amax search, no data), "
                  "awq (activation-aware scales + clip search; needs --calib), gptq (inverse-Hessian "
                  "error feedback; needs --calib), awq+gptq, local_hessian (NVFP4: per-block FP8 "
                  "scale sweep weighted by the inputs' block Hessian; needs --calib), "
                  "local_hessian+gptq (GPTQ with those block scales frozen), four_over_six "
                  "(NVFP4, ModelOpt's Four Over Six: each 16-block's max maps to 6 or to 4, "
                  "whichever gives the block the smaller squared error; FP8 block scales "
                  "normalised to 256, weight_scale_2 = amax/1536; no data), four_over_six+gptq "
                  "(GPTQ with those block scales frozen; needs --calib), smoothquant (INT8 "
                  "W8A8 with --format int8 --activations int8: per-channel scales that move "
                  "activation outliers into the weights; needs --calib), tune (block-wise "
                  "quantization-aware tuning: each decoder block's rounding offsets learnt, "
                  "SignRound-style, to minimise its output error on the calibration windows "
                  "that reach it through the tuned blocks before it; max's scales; needs "
                  "--calib; plain Llama blocks), local_hessian+tune, gptq+tune, "
                  "local_hessian+gptq+tune, four_over_six+tune (tuning from that init). "
                  "With --export gguf: "
                  "imatrix (each type's scale search weighted by the mean x^2 of every input "
                  "column: ggml's weighted quantizers for q4_0/q4_k/q5_k/q6_k, qforge's for "
                  "mxfp4/nvfp4; the importance from --calib or --imatrix) or gptq (those scales "
                  "frozen, codes by GPTQ over the full X^T X; NVFP4 scales by the block Hessian; "
                  "needs --calib; the default with --calib)")
      ->check(name_choice("algorithm", {"max", "mse", "awq", "gptq", "awq+gptq", "local_hessian",
                                        "local_hessian+gptq", "four_over_six",
                                        "four_over_six+gptq", "smoothquant", "imatrix", "tune",
                                        "local_hessian+tune", "gptq+tune",
                                        "local_hessian+gptq+tune", "four_over_six+tune"}))
      ->capture_default_str();
  cmd->add_option("--smoothquant-alpha", args->smoothquant_alpha,
                  "SmoothQuant migration strength alpha in [0, 1]: s = w_max^(1-alpha) / "
                  "a_max^alpha (1.0 is ModelOpt's default, 0.5 llm-compressor's and the paper's)")
      ->check(finite_range(0.0, 1.0))
      ->capture_default_str();
  CLI::Option* act_opt = cmd->add_option("--activations", args->activations,
                  "Activation quantization: none (weight-only), nvfp4 (W4A4 with --format nvfp4: "
                  "input_scale from calibration), fp8 (W8A8 per-tensor with --format fp8), int8 "
                  "(W8A8 per-tensor with --format int8). Anything but none needs --calib")
      ->check(name_choice("activation format", {"none", "nvfp4", "fp8", "int8"}))
      ->capture_default_str();
  cmd->add_option("--kv-cache", args->kv_cache,
                  "KV-cache quantization: none or fp8 (k_scale / v_scale from calibration)")
      ->check(name_choice("kv-cache format", {"none", "fp8"}))
      ->capture_default_str();
  std::string qformat_help =
      "ModelOpt's name for a quantization (hf_ptq.py --qformat; case-insensitive), standing for "
      "--format/--activations/--algo/--group-size:";
  for (const QFormat& q : qformats())
    qformat_help += fmt::format(" {} = {}{};", q.name, q.summary,
                                q.refusal.empty()
                                    ? fmt::format(" (--format {} --activations {} --algo {}{})",
                                                  q.format, q.activations, q.algo,
                                                  q.group_size.empty()
                                                      ? ""
                                                      : " --group-size " + std::string(q.group_size))
                                    : " (refused: " + std::string(q.refusal) + ")");
  qformat_help += " An explicit --format/--activations/--algo that differs is an error; default: "
                  "none (the flags decide)";
  cmd->add_option("--qformat", args->qformat, qformat_help)
      ->check(name_choice("qformat", qformat_names(), /*ignore_case=*/true));
  cmd->add_flag("--dry-run", args->dry_run,
                "Print the plan (per module: format, bits per weight, what is kept and why), the "
                "predicted output size, bits per weight and ratio; write nothing and run no "
                "calibration (except --auto's scoring) (with --json: the same as JSON). Off by "
                "default");
  add_calibration_flags(cmd, args->calib, args->calib_files, /*required=*/false);
  cmd->add_option("--imatrix", args->imatrix,
                  "--export gguf: a llama.cpp importance matrix (llama-imatrix output, GGUF or "
                  "legacy .dat) read as llama-quantize reads it; every tensor it names gets "
                  "ggml's importance-weighted quantizer (the bytes llama-quantize --imatrix "
                  "writes; q8_0 ignores it, as ggml does). With --calib the file's importance "
                  "sets the scales and calibration supplies GPTQ's X^T X")
      ->type_name("FILE");
  add_tokenizer_option(cmd, args->tokenizer);
  cmd->add_option("--tune-iters", args->tune_iters,
                  "--algo ...tune: optimiser steps per decoder block, in [1, 100000]")
      ->capture_default_str();
  cmd->add_option("--tune-lr", args->tune_lr,
                  "--algo ...tune: learning rate of the rounding offsets (units of a scale "
                  "step), in (0, 1]; 0 (default): 1/iters, SignRound's (linear decay to 0 with "
                  "the sign optimiser)");
  cmd->add_option("--tune-batch", args->tune_batch,
                  "--algo ...tune: calibration windows per step (at most --calib-samples)")
      ->capture_default_str();
  cmd->add_option("--tune-optimizer", args->tune_optimizer,
                  "--algo ...tune: sign (SignRound's signed gradient descent) or adam")
      ->check(name_choice("optimizer", {"sign", "adam"}))
      ->capture_default_str();
  cmd->add_option("--tune-params", args->tune_params,
                  "--algo ...tune: rounding (SignRound's offsets, at most half a scale step "
                  "from the init) or weights (the same offsets unbounded: the weights "
                  "themselves, straight-through)")
      ->check(name_choice("parameters", {"rounding", "weights"}))
      ->capture_default_str();
  cmd->add_option("--tune-target", args->tune_target,
                  "--algo ...tune: what each block's output is tuned toward: fp (the original "
                  "model's hidden states, as AutoRound does; one more copy of the activations) "
                  "or quantized (the original block on the quantized-path inputs)")
      ->check(name_choice("target", {"quantized", "fp"}))
      ->capture_default_str();
  cmd->add_flag("--calib-quantized-inputs", args->calib_quantized_inputs,
                "Calibrate each layer on the outputs of the already-quantized previous layers "
                "(as GPTQ recipes do) instead of the original model's");
  cmd->add_option("--calib-moe", args->calib_moe,
                  "Mixture-of-experts calibration: routed (each expert sees the tokens the "
                  "router sends it; experts that get few are reported) or all (every expert sees "
                  "every token of its layer, as ModelOpt calibrates: no expert left without "
                  "statistics, at top_k/experts of the speed)")
      ->check(name_choice("MoE calibration", {"routed", "all"}))
      ->capture_default_str();
  cmd->add_option("--scale-division", args->scale_division,
                  "Which ModelOpt build the scale divisions (amax/2688, /448, /127, /7, /6) "
                  "reproduce: gpu (amax * fl32(1/c), as PyTorch on CUDA: checkpoints ModelOpt "
                  "writes on a GPU) or cpu (exact division: ModelOpt run on a CPU)")
      ->check(name_choice("scale division", {"gpu", "cpu"}))
      ->capture_default_str();
  add_kernels_option(cmd, args->kernels);
  cmd->add_option("--threads", args->threads, "Worker threads (default: all hardware threads)")
      ->check(CLI::Range(1, 1024));
  CLI::Option* shard_opt = cmd->add_option("--max-shard-size", args->max_shard,
                  "Largest output shard, e.g. 5GB, 500MB, 2GiB; more shards get an index file")
      ->capture_default_str();
  cmd->add_flag("--force", args->force,
                "Replace the output directory if it exists: a previous output (a directory of "
                "files, never one holding the input), swapped in atomically once the new one is "
                "complete");
  cmd->add_flag("--allow-nonfinite", args->allow_nonfinite,
                "Copy unquantized tensors (embeddings, norms, skipped Linears) that hold NaN or "
                "Inf with a warning instead of failing; tensors to quantize must be finite");
  cmd->add_flag("--json", args->json, "Print the summary as JSON on stdout");
  cmd->add_flag("-q,--quiet", args->quiet, "No progress bar or warnings on stderr");
  auto plan = std::make_shared<PlanArgs>();
  add_plan_options(cmd, *plan);
  cmd->callback([=, &run] {
    const bool format_given = format_opt->count() > 0, act_given = act_opt->count() > 0,
               algo_given = algo_opt->count() > 0, group_given = group_opt->count() > 0,
               shard_given = shard_opt->count() > 0;
    run = [=] {
      if (plan->preset == "list") {
        fmt::print("{}", preset_listing());
        return 0;
      }
      if (args->model.empty()) fail("quantize: the model directory is required");
      if (!args->qformat.empty())
        apply_qformat(args->qformat, {{"--format", &args->format, format_given},
                                      {"--activations", &args->activations, act_given},
                                      {"--algo", &args->algo, algo_given},
                                      {"--group-size", &args->group_size, group_given}});
      if (args->out.empty() && !args->dry_run)
        fail("quantize: -o/--output is required (unless --dry-run)");
      if (args->export_format == "gguf") {
        // Round to nearest, or the importance-weighted / calibrated GGUF path (--imatrix,
        // --calib with --algo imatrix|gptq); nothing else of the safetensors pipeline applies.
        if (act_given || group_given || args->kv_cache != "none" || !args->qformat.empty() ||
            args->dry_run || !args->exclude.empty() || args->quantize_lm_head ||
            plan->auto_plan || !plan->recipe.empty() || !plan->preset.empty())
          fail("quantize --export gguf: --activations, --group-size, --kv-cache, --qformat, "
               "--dry-run, --exclude, --quantize-lm-head, --auto, --recipe and --preset are not "
               "supported with it");
        const bool calib = !args->calib_files.empty();
        if (args->calib_quantized_inputs)
          fail("quantize --export gguf: --calib-quantized-inputs is not supported with it (each "
               "layer calibrates on the original model's activations)");
        if (algo_given && args->algo != "imatrix" && args->algo != "gptq" && args->algo != "max")
          fail("quantize --export gguf: --algo {}: GGUF takes max, imatrix or gptq", args->algo);
        if (algo_given && args->algo == "gptq" && !calib)
          fail("quantize --export gguf --algo gptq needs --calib (GPTQ needs X^T X)");
        if (algo_given && args->algo == "imatrix" && !calib && args->imatrix.empty())
          fail("quantize --export gguf --algo imatrix needs --calib or --imatrix (the importance)");
        if (algo_given && args->algo == "max" && (calib || !args->imatrix.empty()))
          fail("quantize --export gguf --algo max: round to nearest takes no --calib or --imatrix");
        if (shard_given)
          fail("quantize --export gguf: --max-shard-size does not apply: the export is one "
               "GGUF file");
        if (!gguf_file_type(args->format))
          fail("quantize --export gguf: --format {} is not a GGUF type (one of: {})", args->format,
               fmt::join(gguf_file_type_names(), ", "));
        const SourceModel source = SourceModel::open(args->model, args->tokenizer);
        source.require_unquantized("quantize");
        GgufExportOptions g;
        g.format = args->format;
        g.force = args->force;
        g.allow_nonfinite = args->allow_nonfinite;
        g.threads = args->threads;
        g.scale_division =
            args->scale_division == "cpu" ? ConstantDivision::cpu : ConstantDivision::gpu;
        std::optional<ImatrixData> imatrix;
        if (!args->imatrix.empty()) {
          imatrix = load_imatrix(args->imatrix);
          g.imatrix = &*imatrix;
        }
        CalibrationOptions copt = args->calib;
        if (calib) {
          copt.files.assign(args->calib_files.begin(), args->calib_files.end());
          g.calib = &copt;
          g.algo = algo_given && args->algo == "imatrix" ? GgufAlgo::imatrix : GgufAlgo::gptq;
          g.progress = !args->quiet && !args->json;
        }
        const GgufReport r = export_gguf(source, args->out, g);
        if (!args->quiet)
          for (const auto& w : r.warnings) fmt::print(stderr, "qforge: warning: {}\n", w);
        print_gguf_summary(r, args->json);
        return 0;
      }
      if (!parse_format(args->format))
        fail("quantize: --format {} is a GGUF type; it needs --export gguf", args->format);
      if (!args->imatrix.empty())
        fail("quantize: --imatrix (a llama.cpp importance matrix) needs --export gguf");
      if (args->algo == "imatrix")
        fail("quantize: --algo imatrix needs --export gguf (elsewhere: mse, awq, gptq, ...)");
      QuantizeOptions o;
      o.format = *parse_format(args->format);
      o.export_format = *parse_export_format(args->export_format);
      o.exclude = args->exclude;
      o.quantize_lm_head = args->quantize_lm_head;
      o.block = args->group_size.empty()       ? 0
                : args->group_size == "channel" ? kInt4ChannelGroup
                                                : std::stoi(args->group_size);
      o.threads = args->threads;
      o.kernels = args->kernels;
      o.scale_division =
          args->scale_division == "cpu" ? ConstantDivision::cpu : ConstantDivision::gpu;
      o.max_shard_bytes = parse_size(args->max_shard);
      o.force = args->force;
      o.allow_nonfinite = args->allow_nonfinite;
      o.progress = !args->quiet && !args->json;
      o.algo = *parse_weight_algo(args->algo);
      o.activations = args->activations == "nvfp4" ? ActQuant::nvfp4
                      : args->activations == "fp8" ? ActQuant::fp8
                      : args->activations == "int8" ? ActQuant::int8 : ActQuant::none;
      o.kv_fp8 = args->kv_cache == "fp8";
      o.calib = args->calib;
      o.calib.files.assign(args->calib_files.begin(), args->calib_files.end());
      o.calib_quantized_inputs = args->calib_quantized_inputs;
      o.calib_moe_all = args->calib_moe == "all";
      o.smoothquant_alpha = args->smoothquant_alpha;
      o.tune_iters = args->tune_iters;
      o.tune_lr = args->tune_lr;
      o.tune_batch = args->tune_batch;
      o.tune_adam = args->tune_optimizer == "adam";
      o.tune_target_fp = args->tune_target == "fp";
      o.tune_weights = args->tune_params == "weights";
      const SourceModel source = SourceModel::open(args->model, args->tokenizer);
      // gpt-oss's MXFP4 release is the one quantized input: plan_modules casts its experts.
      if (!source.is_gpt_oss_mxfp4()) source.require_unquantized("quantize");
      // --auto scores the model before quantize_checkpoint starts: a long part of the run
      // that the summary's wall time must include.
      const auto plan_start = std::chrono::steady_clock::now();
      AutoPlanSummary auto_summary;
      AutoPlanReport auto_report;
      apply_plan(*plan, o, source, args->quiet, &auto_summary, &auto_report);
      const double plan_seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - plan_start).count();
      QuantizeReport r;
      if (args->dry_run) {
        r = plan_quantization(source, o, args->out);
        r.output = args->out;
      } else {
        r = quantize_checkpoint(source, args->out, o);
        if (plan->auto_plan) r.plan_seconds = plan_seconds;
        r.seconds += plan_seconds;
      }
      if (plan->auto_plan) {
        auto_summary.seconds = plan_seconds;
        r.auto_plan = auto_summary;
      }
      // Written last: the kept modules and their reasons are known only once the run decided.
      if (!plan->html.empty()) {
        for (const ExcludedModule& e : r.excluded) auto_report.kept.push_back({e.name, e.reason});
        if (!r.lm_head_quantized) auto_report.kept.push_back({"lm_head", kLmHeadKept});
        write_text_file(plan->html, auto_plan_report_html(auto_report));
        r.html = plan->html;
      }
      if (!args->quiet)
        for (const auto& w : r.warnings) fmt::print(stderr, "qforge: warning: {}\n", w);
      if (args->json) fmt::print("{}\n", quantize_report_json(r));
      else print_quantize_summary(r);
      return 0;
    };
  });
}

}  // namespace qf::cli

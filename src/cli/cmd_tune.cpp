// `qforge tune`: end-to-end distillation of a quantized model against the original
// (pipeline/distill.h): quantize, tune the quantized Linears' weights on the KL of the logits,
// export like `quantize`.
#include "cli/commands.h"
#include "core/error.h"
#include "core/html.h"
#include "core/progress.h"
#include "formats/int4.h"
#include "io/json_file.h"
#include "pipeline/distill.h"
#include "plan/report_svg.h"
#include "targets/target.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <unistd.h>

namespace qf::cli {

namespace {

namespace fs = std::filesystem;

struct TuneArgs {
  std::string model, out, format = "nvfp4", algo = "max", group_size, export_format = "modelopt";
  std::string activations = "none", checkpoint, html, tokenizer, train = "weights", from;
  std::string eval_text;
  std::vector<std::string> exclude, calib_files;
  CalibrationOptions calib;
  int64_t steps = 200, batch = 4, eval_samples = 8, eval_every = 0, checkpoint_every = 0;
  int64_t calib_generate = 0;
  double lr = 0.01, scale_lr = 0, embedding_lr = 0;
  int threads = 0;
  bool resume = false, force = false, json = false, quiet = false;
  bool algo_given = false;
};

std::string tune_html(const TuneArgs& a, const DistillReport& r) {
  LineChart loss;
  loss.x_label = "step";
  loss.y_label = "training batch KL (nats/token)";
  LineChart eval;
  eval.x_label = "step";
  eval.y_label = r.eval_on_text ? "evaluation-text KL (nats/token)" : "held-out KL (nats/token)";
  for (const DistillPoint& p : r.curve) {
    if (p.loss >= 0)
      loss.points.push_back({double(p.step), p.loss, fmt::format("step {}: {:.5f}", p.step, p.loss)});
    if (p.eval_kl >= 0)
      eval.points.push_back(
          {double(p.step), p.eval_kl, fmt::format("step {}: {:.5f}", p.step, p.eval_kl)});
  }
  std::string body = "<h1>qforge tune</h1>\n";
  body += html_settings_table({
      {"model", escape_html(a.model)},
      {"output", escape_html(a.out)},
      {"format", escape_html(a.format + " (" + r.algo + " + end-to-end tuning)")},
      {"steps", fmt::format("{} x {} windows of {} tokens, lr {}", r.steps, a.batch,
                            r.tokens_per_window, a.lr)},
      {r.eval_on_text ? "KL on " + escape_html(a.eval_text) : std::string("held-out KL"),
       fmt::format("{:.5f} before, {:.5f} after ({:.2f}x)", r.eval_kl_before, r.eval_kl_after,
                   r.eval_kl_before > 0 ? r.eval_kl_after / r.eval_kl_before : 0)},
      {"time", fmt::format("{:.1f} s ({:.3f} s per step)", r.seconds, r.seconds_per_step)},
  });
  body += "<h2>Loss curve</h2>\n" + svg_line_chart(loss, "training loss by step");
  body += r.eval_on_text
              ? "<h2>KL on the evaluation text</h2>\n" + svg_line_chart(eval, "evaluation KL by step")
              : "<h2>Held-out KL</h2>\n" + svg_line_chart(eval, "held-out KL by step");
  return html_page("qforge tune " + a.out, body);
}

void print_summary(const TuneArgs& a, const DistillReport& r, bool json) {
  if (json) {
    nlohmann::ordered_json j;
    j["output"] = r.quantize.output.string();
    j["format"] = r.quantize.format;
    j["export"] = r.quantize.export_format;
    j["algo"] = r.algo;
    j["steps"] = r.steps;
    j["resumed_from"] = r.resumed_from;
    j["batch"] = a.batch;
    j["lr"] = a.lr;
    j["train"] = a.train;
    j["scale_parameters"] = r.scale_parameters;
    j["embedding_lr"] = a.embedding_lr;
    j["embedding_parameters"] = r.embedding_parameters;
    j["embedding_tied"] = r.embedding_tied;
    j["generated_windows"] = r.generated_windows;
    j["train_windows"] = r.train_windows;
    j["eval_windows"] = r.eval_windows;
    j["eval_text"] = r.eval_on_text ? nlohmann::ordered_json(a.eval_text) : nlohmann::ordered_json();
    j["tokens_per_window"] = r.tokens_per_window;
    j["tuned_linears"] = r.tuned_linears;
    j["parameters"] = r.parameters;
    j["eval_kl_before"] = r.eval_kl_before;
    j["eval_kl_after"] = r.eval_kl_after;
    j["quantize_seconds"] = r.quantize_seconds;
    j["train_seconds"] = r.train_seconds;
    j["eval_seconds"] = r.eval_seconds;
    j["seconds_per_step"] = r.seconds_per_step;
    j["seconds"] = r.seconds;
    j["peak_rss_bytes"] = r.peak_rss_bytes;
    j["bytes_out"] = r.quantize.bytes_out;
    auto& c = j["curve"] = nlohmann::ordered_json::array();
    for (const DistillPoint& p : r.curve) {
      nlohmann::ordered_json e;
      e["step"] = p.step;
      if (p.loss >= 0) e["loss"] = p.loss;
      if (p.eval_kl >= 0) e["eval_kl"] = p.eval_kl;
      c.push_back(e);
    }
    if (!a.html.empty()) j["html"] = a.html;
    fmt::print("{}\n", j.dump(2));
    return;
  }
  fmt::print("qforge tune -> {} ({}, {} export, {} + end-to-end tuning)\n",
             r.quantize.output.string(), r.quantize.format, r.quantize.export_format, r.algo);
  fmt::print("  {:<28} {} Linears, {} weights\n", "tuned", r.tuned_linears, r.parameters);
  fmt::print("  {:<28} {} steps x {} windows of {} tokens (train {}, {}), lr {}{}\n",
             "training", r.steps, a.batch, r.tokens_per_window, r.train_windows,
             r.eval_on_text ? fmt::format("evaluate {} of the text", r.eval_windows)
                            : fmt::format("held out {}", r.eval_windows),
             a.lr, r.resumed_from ? fmt::format(", resumed at step {}", r.resumed_from) : "");
  if (r.scale_parameters > 0)
    fmt::print("  {:<28} {} block scales (LSQ, --train {})\n", "scales trained", r.scale_parameters,
               a.train);
  if (r.embedding_parameters > 0)
    fmt::print("  {:<28} {} values ({}), --embedding-lr {}\n", "embedding and head trained",
               r.embedding_parameters, r.embedding_tied ? "tied: one matrix" : "two matrices",
               a.embedding_lr);
  if (r.generated_windows > 0)
    fmt::print("  {:<28} {} windows sampled by the teacher from {}-token prompts\n",
               "distillation text", r.generated_windows, a.calib_generate);
  fmt::print("  {:<28} {:.5f} -> {:.5f} ({:.2f}x)\n",
             r.eval_on_text ? "eval-text KL (nats/token)" : "held-out KL (nats/token)",
             r.eval_kl_before, r.eval_kl_after,
             r.eval_kl_before > 0 ? r.eval_kl_after / r.eval_kl_before : 0.0);
  fmt::print("  {:<28} {:.1f} s (quantize {:.1f} s, tune {:.1f} s: {:.3f} s/step, evaluation {:.1f} s)\n",
             "time", r.seconds, r.quantize_seconds, r.train_seconds, r.seconds_per_step,
             r.eval_seconds);
  fmt::print("  {:<28} {}\n", "bytes out", human_bytes(double(r.quantize.bytes_out)));
  fmt::print("  {:<28} {}\n", "peak memory", human_bytes(double(r.peak_rss_bytes)));
  if (!a.html.empty()) fmt::print("  {:<28} {}\n", "html report", a.html);
}

}  // namespace

void register_tune(CLI::App& app, Action& run) {
  auto args = std::make_shared<TuneArgs>();
  args->calib.samples = 64;
  args->calib.seq_len = 256;
  CLI::App* cmd = app.add_subcommand(
      "tune", "End-to-end distillation: quantize BASE, then tune the quantized weights so the "
              "model's next-token distributions match the original's (KL on the logits), and "
              "export like quantize");
  cmd->add_option("model", args->model, "Base (unquantized) Hugging Face model directory")
      ->required();
  cmd->add_option("-o,--output", args->out, "Output directory")->required();
  cmd->add_option("--format", args->format, "Weight format of the quantized Linears")
      ->check(name_choice("format", format_name_choices(/*weight_only=*/false)))
      ->capture_default_str();
  cmd->add_option("--algo", args->algo,
                  "The initial quantization's algorithm (its scales are frozen, its weights are "
                  "the start): max, mse, gptq, local_hessian, local_hessian+gptq, "
                  "four_over_six, four_over_six+gptq")
      ->check(name_choice("algorithm", {"max", "mse", "gptq", "local_hessian",
                                        "local_hessian+gptq", "four_over_six",
                                        "four_over_six+gptq", "awq", "awq+gptq", "smoothquant"}))
      ->capture_default_str();
  cmd->add_option(
      "--from", args->from,
      "Start from this checkpoint instead of quantizing: a qforge NVFP4 or MXFP4 export of "
      "BASE, weight-only, made with the same --format, --export and --exclude (its scales are "
      "frozen, its weights are the start)");
  cmd->add_option("--group-size", args->group_size, "INT4 group size: 32, 64, 128 or channel")
      ->check(name_choice("group size", {"32", "64", "128", "channel"}));
  cmd->add_option("--export", args->export_format, "Export target (as quantize)")
      ->check(name_choice("export format", target_names()))
      ->capture_default_str();
  cmd->add_option("--activations", args->activations,
                  "Activation quantization of the exported model (as quantize: none, nvfp4, fp8, int8); the student is trained with its Linear inputs fake-quantized by the engine's own quantizer at the export's static input scales")
      ->check(name_choice("activation format", {"none", "nvfp4", "fp8", "int8"}))
      ->capture_default_str();
  cmd->add_option("--exclude", args->exclude, "Leave modules matching this glob unquantized");
  add_calibration_flags(cmd, args->calib, args->calib_files, /*required=*/true);
  add_tokenizer_option(cmd, args->tokenizer);
  cmd->add_option("--steps", args->steps, "Optimiser steps")->capture_default_str();
  cmd->add_option("--batch", args->batch, "Calibration windows per step")->capture_default_str();
  cmd->add_option("--lr", args->lr, "Adam's peak learning rate (cosine decay to 0), in units of each weight's quantization step (the parameters are W / scale)")
      ->capture_default_str();
  cmd->add_option("--train", args->train,
                  "What is trained: weights (the latent weights through the straight-through "
                  "estimator), scales (the NVFP4 FP8 block scales by LSQ, kept on the E4M3 grid) "
                  "or both")
      ->check(name_choice("training target", {"weights", "scales", "both"}))
      ->capture_default_str();
  cmd->add_option("--scale-lr", args->scale_lr,
                  "Adam's peak learning rate of the LSQ block scales, relative to each scale's "
                  "initial value, in [0, 1] (0: --lr)")
      ->capture_default_str();
  cmd->add_option("--embedding-lr", args->embedding_lr,
                  "Also train the token embedding and the output head (one matrix when tied) in "
                  "float, exported in their dtype: Adam's peak learning rate relative to each "
                  "matrix's RMS, in [0, 1] (0: they stay the base model's; 0.004 is a good start)")
      ->capture_default_str();
  cmd->add_option("--calib-generate", args->calib_generate,
                  "Distil on teacher-generated text: keep each calibration window's first N "
                  "tokens (BOS included) and let the original model sample the rest "
                  "(temperature 1, seeded by --seed); the initial quantization calibrates on "
                  "them too; 0: the calibration text")
      ->capture_default_str();
  cmd->add_option("--eval-samples", args->eval_samples,
                  "Windows of the evaluation KL: calibration windows held out, or the first "
                  "windows of --eval-text")
      ->capture_default_str();
  cmd->add_option("--eval-text", args->eval_text,
                  "Measure the evaluation KL on this UTF-8 text instead of held-out calibration "
                  "windows (all of which then train): its first --eval-samples windows of "
                  "--calib-seq tokens, as `qforge eval kl --ctx` reads them; it only measures, "
                  "it never trains or calibrates (default: none)");
  cmd->add_option("--eval-every", args->eval_every,
                  "Steps between evaluations (default: steps / 10)");
  cmd->add_option("--checkpoint-every", args->checkpoint_every,
                  "Write the optimiser state every N steps (0: never)")
      ->capture_default_str();
  cmd->add_option("--checkpoint", args->checkpoint,
                  "The optimiser-state file (default: OUT.tune-state beside the output)");
  cmd->add_flag("--resume", args->resume,
                "Continue from the checkpoint (same command line; the result equals an "
                "uninterrupted run)");
  cmd->add_option("--threads", args->threads, "Worker threads (default: all hardware threads)")
      ->check(CLI::Range(1, 1024));
  cmd->add_flag("--force", args->force, "Replace the output directory if it exists");
  cmd->add_option("--html", args->html, "Write an HTML report with the loss curve here");
  cmd->add_flag("--json", args->json, "Print the summary as JSON on stdout");
  cmd->add_flag("-q,--quiet", args->quiet, "No progress bar or warnings on stderr");
  cmd->callback([args, &run, cmd] {
    args->algo_given = cmd->count("--algo") > 0;
    run = [args] {
      const TuneArgs& a = *args;
      if (!parse_format(a.format)) fail("tune: --format {} is a GGUF type; tune exports safetensors", a.format);
      if (!a.from.empty() && a.algo_given)
        fail("tune: --from and --algo exclude each other (the checkpoint's algorithm chose its "
             "scales)");
      DistillOptions o;
      QuantizeOptions& q = o.quantize;
      q.format = *parse_format(a.format);
      q.export_format = *parse_export_format(a.export_format);
      q.algo = *parse_weight_algo(a.algo);
      q.activations = a.activations == "nvfp4" ? ActQuant::nvfp4
                      : a.activations == "fp8" ? ActQuant::fp8
                      : a.activations == "int8" ? ActQuant::int8 : ActQuant::none;
      q.exclude = a.exclude;
      q.block = a.group_size.empty() ? 0
                : a.group_size == "channel" ? kInt4ChannelGroup : std::stoi(a.group_size);
      q.threads = a.threads;
      q.force = a.force;
      q.progress = !a.quiet && !a.json && isatty(2);
      q.calib = a.calib;
      q.calib.files.assign(a.calib_files.begin(), a.calib_files.end());
      o.steps = a.steps;
      o.batch = a.batch;
      o.lr = float(a.lr);  // range-checked with the other flags by distill_checkpoint
      o.train = a.train == "scales" ? DistillTrain::scales
                : a.train == "both"   ? DistillTrain::both
                                      : DistillTrain::weights;
      o.scale_lr = float(a.scale_lr);
      o.embedding_lr = float(a.embedding_lr);
      o.generate_prompt = a.calib_generate;
      o.eval_samples = a.eval_samples;
      o.eval_every = a.eval_every;
      o.eval_text = a.eval_text;
      o.checkpoint_every = a.checkpoint_every;
      o.resume = a.resume;
      o.from = a.from;
      std::string out = a.out;
      while (out.size() > 1 && out.back() == '/') out.pop_back();
      o.checkpoint = a.checkpoint.empty() ? fs::path(out + ".tune-state") : fs::path(a.checkpoint);
      // What the result depends on: a resumed run must have the same.
      const SourceModel source = SourceModel::open(a.model, a.tokenizer);
      source.require_unquantized("tune");
      std::string key = fmt::format(
          "model={} bytes={} format={} algo={} group={} export={} activations={} exclude={} "
          "steps={} batch={} lr={} train={} scale_lr={} embedding_lr={} generate={} eval={} "
          "samples={} seq={} seed={} from={}",
          fs::absolute(a.model).string(), source.input_bytes(), a.format, a.algo, a.group_size,
          a.export_format, a.activations, fmt::join(a.exclude, ","), a.steps, a.batch, a.lr,
          a.train, a.scale_lr, a.embedding_lr, a.calib_generate, a.eval_samples, a.calib.samples,
          a.calib.seq_len, a.calib.seed, a.from.empty() ? "" : fs::absolute(a.from).string());
      for (const auto& f : a.calib_files) {
        std::error_code ec;
        key += fmt::format(" calib={}:{}", f, fs::file_size(f, ec));
      }
      if (!a.eval_text.empty()) {
        std::error_code ec;
        key += fmt::format(" eval_text={}:{}", fs::absolute(a.eval_text).string(),
                           fs::file_size(a.eval_text, ec));
      }
      o.config_key = key;
      if (fs::exists(a.out) && !a.force)
        fail("tune: {} exists (--force replaces it)", a.out);
      const DistillReport r = distill_checkpoint(source, out, o);
      if (!a.quiet)
        for (const auto& w : r.quantize.warnings) fmt::print(stderr, "qforge: warning: {}\n", w);
      if (!a.html.empty()) write_text_file(a.html, tune_html(a, r));
      print_summary(a, r, a.json);
      return 0;
    };
  });
}

}  // namespace qf::cli

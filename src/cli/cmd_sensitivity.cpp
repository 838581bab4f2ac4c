// `qforge sensitivity`: how much each quantizable module (fused groups together) changes the
// model's output in each candidate format, as a sorted table, JSON and an HTML report.
#include "cli/commands.h"
#include "io/json_file.h"
#include "core/error.h"
#include "core/suggest.h"
#include "pipeline/sensitivity_run.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <sstream>

namespace qf::cli {

std::vector<FormatChoice> parse_format_list(const std::string& list) {
  std::vector<FormatChoice> out;
  std::stringstream ss(list);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    const auto c = parse_format_choice(item);
    if (!c || c->is_keep())
      fail("--formats: {}", unknown_name_message("format", item, format_choice_names(false)));
    out.push_back(*c);
  }
  if (out.empty()) fail("--formats: no format given");
  return out;
}

std::vector<std::string> format_name_choices(bool weight_only) {
  std::vector<std::string> out;
  for (const FormatInfo& f : all_formats())
    if (!weight_only || f.weight_only) out.emplace_back(f.name);
  return out;
}

std::string free_block_choice_names(std::string_view separator) {
  std::string out;
  for (const FormatInfo& f : all_formats()) {
    if (f.block_rule != BlockRule::free || !f.weight_only) continue;
    if (!out.empty()) out += separator;
    out += std::string(f.name) + ":G" + std::string(separator) + std::string(f.name) + ":channel";
  }
  return out;
}

void register_sensitivity(CLI::App& app, Action& run) {
  struct Args {
    std::string model, formats = "nvfp4,fp8", html, tokenizer;
    std::vector<std::string> calib_files;
    CalibrationOptions calib{{}, 32, 256, 0};  // smaller default than quantize: one pass per unit
    int threads = 0;
    KernelMode kernels = KernelMode::exact;
    int64_t proxy_rows = 256;
    bool exact = false, json = false, quiet = false;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand(
      "sensitivity",
      "Score how much quantizing each module (fused groups together) in each candidate format "
      "changes the model's output: a layer-local proxy (the mean squared output error on sampled "
      "calibration rows, relative to the residual stream's energy) and, with --exact, the KL of the final logits with only that module "
      "quantized.");
  cmd->add_option("model", args->model, "Model directory (unquantized Hugging Face checkpoint)")
      ->required();
  add_calibration_flags(cmd, args->calib, args->calib_files, /*required=*/true);
  add_tokenizer_option(cmd, args->tokenizer);
  cmd->add_option("--formats", args->formats,
                  "Candidate formats, comma-separated: " + format_names(", ", true) +
                      " (int4:G for group G, int4:channel for one scale per output channel "
                      "where no other int4 choice fits, nvfp4:4o6 for NVFP4 with Four Over Six "
                      "block scales)")
      ->capture_default_str();
  cmd->add_flag("--exact", args->exact,
                "Also the exact measure: KL of the final logits vs the original with only that "
                "module quantized (one model run over the windows per module and format), and "
                "the proxy's Spearman rank correlation to it");
  cmd->add_option("--proxy-rows", args->proxy_rows,
                  "Calibration rows sampled per Linear input for the proxy (its cost: one "
                  "product of these rows with each candidate's weight error)")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 20))
      ->capture_default_str();
  cmd->add_option("--html", args->html,
                  "Write a self-contained HTML report to this file: bars per module and format, "
                  "the scores per layer, the calibration settings");
  add_kernels_option(cmd, args->kernels);
  cmd->add_option("--threads", args->threads, "Worker threads (default: all hardware threads)")
      ->check(CLI::Range(1, 1024));
  cmd->add_flag("--json", args->json,
                "Print JSON on stdout: {model, modules: [{name, format, proxy, exact, bytes}], "
                "rank_correlation, calib_tokens, calib_seconds, proxy_seconds, exact_seconds, "
                "html (with --html)}");
  cmd->add_flag("-q,--quiet", args->quiet, "No progress on stderr");
  cmd->callback([args, &run] {
    run = [args] {
      SensitivityOptions o;
      o.calib = args->calib;
      o.calib.files.assign(args->calib_files.begin(), args->calib_files.end());
      o.formats = parse_format_list(args->formats);
      o.exact = args->exact;
      o.proxy_rows = args->proxy_rows;
      o.threads = args->threads;
      o.kernels = args->kernels;
      o.progress = !args->quiet && !args->json;
      const SensitivityResult r = run_sensitivity(SourceModel::open(args->model, args->tokenizer), o);
      if (!args->html.empty()) write_text_file(args->html, sensitivity_report_html(r.report));
      if (args->json) {
        auto j = sensitivity_report_json(r.report);
        j["calib_tokens"] = r.calib_tokens;
        j["calib_seconds"] = r.calib_seconds;
        j["proxy_seconds"] = r.proxy_seconds;
        j["exact_seconds"] = r.exact_seconds;
        if (!args->html.empty()) j["html"] = args->html;
        fmt::print("{}\n", j.dump(2));
      } else {
        fmt::print("{}", sensitivity_report_table(r.report));
        fmt::print("calibration {} tokens: forward {:.2f} s, proxy {:.2f} s{}\n", r.calib_tokens,
                   r.calib_seconds, r.proxy_seconds,
                   args->exact ? fmt::format(", exact {:.2f} s", r.exact_seconds) : "");
        if (!args->html.empty()) fmt::print("html report: {}\n", args->html);
      }
      return 0;
    };
  });
}

}  // namespace qf::cli

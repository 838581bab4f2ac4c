// The subcommands of the qforge CLI. Each registers its flags on the root app and sets `run`
// to the action to perform when it is the one chosen; actions return the exit code.
#pragma once

#include "calib/calibration_data.h"
#include "kernels/attention.h"
#include "kernels/linear.h"
#include "pipeline/source_model.h"

#include <CLI/CLI.hpp>

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <optional>
#include <span>
#include <string_view>
#include <string>
#include <vector>

namespace qf::cli {

using Action = std::function<int()>;

void register_quantize(CLI::App& app, Action& run);
void register_inspect(CLI::App& app, Action& run);
void register_synth(CLI::App& app, Action& run);
void register_demo(CLI::App& app, Action& run);
void register_generate(CLI::App& app, Action& run);
void register_eval(CLI::App& app, Action& run);
void register_compare(CLI::App& app, Action& run);
void register_bench(CLI::App& app, Action& run);
void register_tokenize(CLI::App& app, Action& run);
void register_sensitivity(CLI::App& app, Action& run);
void register_tune(CLI::App& app, Action& run);

// The calibration flags shared by quantize and sensitivity: --calib (repeatable), --calib-samples,
// --calib-seq, --seed, bound to `calib` (whose current values are the defaults shown in --help).
// `files` receives the --calib paths; copy them into calib.files after parsing.
void add_calibration_flags(CLI::App* cmd, CalibrationOptions& calib, std::vector<std::string>& files,
                           bool required);

// Parses "5GB", "500MB", "1.5GiB", "123" (bytes) into bytes; throws qf::Error if malformed.
uint64_t parse_size(const std::string& text);

// --kernels exact|fast (kernels/linear.h KernelMode), `mode` holding the command's default.
void add_kernels_option(CLI::App* cmd, KernelMode& mode);
// --kv-cache auto|f32|bf16|f16|fp8 into `type` (auto: nullopt, ModelOptions::kv_cache's rule with
// `unscaled_default` as the command's cache for checkpoints without KV scales).
void add_kv_cache_option(CLI::App* cmd, std::optional<KvCacheType>& type,
                         KvCacheType unscaled_default);

// A flag's check that its value is one of `choices`; anything else is refused with
// "unknown WHAT 'x'; did you mean 'y'? (choices: ...)". With `ignore_case` the value is
// compared lower-cased (the choices are lower case; the flag's value itself is not changed).
// --help lists the choices.
CLI::Validator name_choice(std::string what, std::vector<std::string> choices,
                           bool ignore_case = false);
// A flag's check that its value is a finite number in [lo, hi] (NaN and Inf refused).
CLI::Validator finite_range(double lo, double hi);

// For a command line whose command words (argv[1], then a subcommand's own subcommand) do not
// name a command: the did-you-mean message; "" when they do.
std::string unknown_subcommand(const CLI::App& app, int argc, const char* const* argv);

}  // namespace qf::cli

#include "plan/candidates.h"

namespace qf::cli {
// Parses "nvfp4,fp8,int4:64" (--formats); throws qf::Error for an unknown or empty list.
std::vector<FormatChoice> parse_format_list(const std::string& list);

// The format table's names in table order (weight-only formats only when asked), for
// CLI::IsMember choices.
std::vector<std::string> format_name_choices(bool weight_only);
// The spellings --formats and recipes accept beyond plain names, from the table's formats with
// a free block: "int4:G, int4:channel".
std::string free_block_choice_names(std::string_view separator);

// The planning flags of `quantize` (--recipe, --save-recipe, --auto and its targets).
struct PlanArgs {
  std::string recipe, save_recipe, formats, target_size, fit_memory;  // formats "": default
  std::string preset;  // a shipped recipe (plan/presets.h); "list" prints them
  std::string html;  // --auto: write the plan's HTML report here
  bool auto_plan = false;
  bool auto_exact = false;  // score units with the exact KL instead of the proxy
  std::string auto_experts = "layer";  // MoE decision units: "layer" or "expert"
  double target_bits = 0, min_speedup = 0;
  int64_t context = 0, batch = 1;
};
void add_plan_options(CLI::App* cmd, PlanArgs& args);
}  // namespace qf::cli

namespace qf::cli {
// ModelOpt's --qformat names (hf_ptq.py), each standing for qforge flags.
struct QFormat {
  std::string_view name;         // lower case, as ModelOpt spells it
  std::string_view format, activations, algo, group_size;  // "" = not set by this name
  std::string_view summary;      // what it is, for --help and messages
  std::string_view refusal;      // non-empty: qforge cannot express it, and why
};
std::span<const QFormat> qformats();
std::vector<std::string> qformat_names();
// One flag --qformat may set: its spelling, its current value, whether the user gave it.
struct QFormatFlag {
  std::string_view flag;  // "--format", "--activations", "--algo" or "--group-size"
  std::string* value;
  bool given;
};
// Sets each flag to what --qformat `name` (a known name, any case) stands for. Throws
// qf::Error for a name qforge cannot express (saying what is missing), and when a flag the user
// gave has another value ("--qformat fp8 sets --format fp8, which conflicts with --format
// nvfp4"); an explicit --group-size is kept.
void apply_qformat(const std::string& name, std::initializer_list<QFormatFlag> flags);

// --tokenizer DIR: read the tokenizer files from DIR instead of the model directory.
void add_tokenizer_option(CLI::App* cmd, std::string& dir);
}  // namespace qf::cli

namespace qf {
struct QuantizeOptions;
struct AutoPlanSummary;
struct AutoPlanReport;
}

namespace qf::cli {
// Sets options.assignment from --recipe or --auto (printing the choice on stderr unless quiet)
// and writes --save-recipe. False when no plan was asked for. Throws qf::Error for conflicting
// flags, a missing --calib, or an unreachable target (naming the closest achievable value).
// With --auto, `summary` (when given) receives what was solved and chosen, for the summary, and
// with --html `report` (when given) the HTML page's data (auto_plan_report) without its kept
// modules, which the caller adds once the quantize report knows them.
bool apply_plan(const PlanArgs& args, QuantizeOptions& options, const SourceModel& model,
                bool quiet, AutoPlanSummary* summary = nullptr, AutoPlanReport* report = nullptr);

}  // namespace qf::cli

namespace qf {
struct QuantizeReport;
}

namespace qf::cli {
// The summary table of a quantize run (stdout) and its --json form.
void print_quantize_summary(const QuantizeReport& report);
std::string quantize_report_json(const QuantizeReport& report);
}  // namespace qf::cli

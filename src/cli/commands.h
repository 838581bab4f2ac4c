// The subcommands of the qforge CLI. Each registers its flags on the root app and sets `run`
// to the action to perform when it is the one chosen; actions return the exit code.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <functional>
#include <string>

namespace qf::cli {

using Action = std::function<int()>;

void register_quantize(CLI::App& app, Action& run);
void register_inspect(CLI::App& app, Action& run);
void register_synth(CLI::App& app, Action& run);
void register_demo(CLI::App& app, Action& run);
void register_generate(CLI::App& app, Action& run);
void register_eval(CLI::App& app, Action& run);
void register_bench(CLI::App& app, Action& run);
void register_tokenize(CLI::App& app, Action& run);

// Parses "5GB", "500MB", "1.5GiB", "123" (bytes) into bytes; throws qf::Error if malformed.
uint64_t parse_size(const std::string& text);

}  // namespace qf::cli

namespace qf {
struct QuantizeReport;
}

namespace qf::cli {
// The summary table of a quantize run (stdout) and its --json form.
void print_quantize_summary(const QuantizeReport& report);
std::string quantize_report_json(const QuantizeReport& report);
}  // namespace qf::cli

// The calibration flags shared by the subcommands that read calibration text.
#include "cli/commands.h"

namespace qf::cli {

void add_calibration_flags(CLI::App* cmd, CalibrationOptions& calib, std::vector<std::string>& files,
                           bool required) {
  auto* option = cmd->add_option(
      "--calib", files, "Calibration text: plain text, or JSON Lines with a \"text\" field (repeatable)");
  if (required) option->required();
  cmd->add_option("--calib-samples", calib.samples, "Calibration windows")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 20))
      ->capture_default_str();
  cmd->add_option("--calib-seq", calib.seq_len, "Tokens per calibration window (BOS included)")
      ->check(CLI::Range(int64_t(2), int64_t(1) << 20))
      ->capture_default_str();
  cmd->add_option("--seed", calib.seed, "Seed of the calibration window choice and row samples")
      ->capture_default_str();
}

}  // namespace qf::cli

namespace qf::cli {

void add_tokenizer_option(CLI::App* cmd, std::string& dir) {
  cmd->add_option("--tokenizer", dir,
                  "Read the tokenizer (tokenizer.json, tokenizer.model or vocab.json + merges.txt, "
                  "with tokenizer_config.json; or a .gguf file's embedded one) from this "
                  "directory instead of the model directory (default: the model directory, or "
                  "a .gguf model's own tokenizer)");
}

}  // namespace qf::cli

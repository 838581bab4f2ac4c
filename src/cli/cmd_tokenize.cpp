// `qforge tokenize`: the token ids of a text under a model's tokenizer, or the calibration windows
// that `quantize --calib` would use.
#include "calib/calibration_data.h"
#include "cli/commands.h"
#include "core/error.h"
#include "core/mapped_file.h"
#include "io/tokenizer.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <memory>

namespace qf::cli {

void register_tokenize(CLI::App& app, Action& run) {
  struct Args {
    std::string dir, text, file, tokenizer;
    bool no_bos = false, json = false;
    std::vector<std::string> calib_files;
    CalibrationOptions calib;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand(
      "tokenize", "Print the token ids of a text under a model's tokenizer (tokenizer.json, "
                  "tokenizer.model, or vocab.json + merges.txt), or with --calib the calibration "
                  "windows that quantize and sensitivity would use with the same flags.");
  cmd->add_option("model", args->dir, "Model directory (or a directory of tokenizer files)")
      ->required();
  CLI::Option* prompt = cmd->add_option("-p,--prompt", args->text, "Text to tokenize");
  cmd->add_option("--file", args->file, "Read the text from this file instead")->excludes(prompt);
  cmd->add_flag("--no-bos", args->no_bos,
                "Do not prepend BOS (by default it is prepended when the model's tokenizer "
                "config asks for it)");
  cmd->add_flag("--json", args->json,
                "Print JSON on stdout: ids, their vocabulary pieces, count, bos (with --calib: "
                "windows, tokens_available, warnings)");
  add_calibration_flags(cmd, args->calib, args->calib_files, /*required=*/false);
  add_tokenizer_option(cmd, args->tokenizer);
  cmd->callback([args, prompt, &run] {
    run = [args, given = prompt->count() > 0] {
      if (!args->calib_files.empty()) {
        if (given || !args->file.empty()) fail("tokenize: --calib replaces -p / --file");
        args->calib.files.assign(args->calib_files.begin(), args->calib_files.end());
        // The windows are what quantize calibrates on: each starts with BOS when there is one.
        if (args->no_bos) fail("tokenize: --no-bos does not apply to --calib windows");
        const CalibrationData data = load_calibration_data(
            args->calib, *Tokenizer::load_for_model(args->dir, args->tokenizer));
        if (args->json) {
          nlohmann::ordered_json j;
          j["model"] = args->dir;
          j["tokens_available"] = data.tokens_available;
          j["warnings"] = data.warnings;
          j["windows"] = data.windows;
          fmt::print("{}\n", j.dump());
          return 0;
        }
        for (const auto& w : data.warnings) fmt::print(stderr, "warning: {}\n", w);
        for (const auto& w : data.windows) fmt::print("{}\n", fmt::join(w, " "));
        return 0;
      }
      std::string text = args->text;
      if (!args->file.empty()) {
        std::error_code ec;
        if (!std::filesystem::is_regular_file(args->file, ec))
          fail("{}: not found or not a regular file", args->file);
        const MappedFile f = MappedFile::open(args->file);
        text.assign(reinterpret_cast<const char*>(f.data()), f.size());
        Tokenizer::require_utf8(text, args->file);
      } else if (!given) {
        fail("tokenize: give the text with -p TEXT or --file F");
      } else {
        Tokenizer::require_utf8(text, "--prompt");
      }
      const auto tok = Tokenizer::load_for_model(args->dir, args->tokenizer);
      const bool bos = !args->no_bos && tok->add_bos_by_default();
      const std::vector<int32_t> ids = tok->encode(text, bos);
      if (args->json) {
        nlohmann::ordered_json j;
        j["model"] = args->dir;
        j["count"] = ids.size();
        j["bos"] = bos;
        j["ids"] = ids;
        auto& pieces = j["pieces"] = nlohmann::ordered_json::array();
        for (const int32_t id : ids) pieces.push_back(tok->piece(id));
        fmt::print("{}\n", j.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace));
        return 0;
      }
      fmt::print("{}\n", fmt::join(ids, " "));
      return 0;
    };
  });
}

}  // namespace qf::cli

// qforge: entry point. Parses the command line, runs the chosen subcommand, and turns errors
// into one line on stderr and a non-zero exit code.
#include "cli/commands.h"
#include "core/error.h"

#include <fmt/format.h>

#include <csignal>
#include <cstdio>
#include <new>

int main(int argc, char** argv) {
  // A file-size limit then makes writes fail with EFBIG (reported as an error) instead of
  // killing the process with a half-written output.
  std::signal(SIGXFSZ, SIG_IGN);

  CLI::App app{"qforge: quantize large language models to NVFP4, MXFP4, FP8 and INT4 checkpoints "
               "that inference engines load, natively on any machine."};
  app.set_version_flag("--version", "qforge 0.1.0");
  app.require_subcommand(1);
  qf::cli::Action run;
  qf::cli::register_quantize(app, run);
  qf::cli::register_inspect(app, run);
  qf::cli::register_synth(app, run);
  qf::cli::register_demo(app, run);
  qf::cli::register_generate(app, run);
  qf::cli::register_eval(app, run);
  qf::cli::register_compare(app, run);
  qf::cli::register_bench(app, run);
  qf::cli::register_tokenize(app, run);
  qf::cli::register_sensitivity(app, run);
  qf::cli::register_tune(app, run);
  // CLI11 would only say the word was not expected; name the command that was probably meant.
  if (const std::string unknown = qf::cli::unknown_subcommand(app, argc, argv); !unknown.empty()) {
    fmt::print(stderr, "qforge: error: {}\n", unknown);
    return 1;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    return run ? run() : 0;
  } catch (const qf::Error& e) {
    fmt::print(stderr, "qforge: error: {}\n", e.what());
  } catch (const std::bad_alloc&) {
    fmt::print(stderr, "qforge: error: out of memory\n");
  } catch (const std::exception& e) {
    fmt::print(stderr, "qforge: error: {}\n", e.what());
  }
  return 1;
}

// `qforge bench`: prefill and decode speed of a checkpoint on the CPU.
#include "cli/commands.h"
#include "core/progress.h"
#include "eval/bench.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace qf::cli {

void register_bench(CLI::App& app, Action& run) {
  struct Args {
    std::string dir;
    int64_t prompt = 128, gen = 32;
    int threads = 0;
    bool json = false;
    KernelMode kernels = KernelMode::fast;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand(
      "bench", "Measure prefill and decode speed: tokens/s, weight bytes each decode step reads "
               "and the memory bandwidth that achieves, peak RSS. No tokenizer needed.");
  cmd->add_option("model", args->dir, "Model directory")->required();
  cmd->add_option("--prompt", args->prompt, "Prompt tokens processed in one prefill (default 128)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--gen", args->gen, "Tokens decoded one at a time (default 32)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("-t,--threads", args->threads, "Threads (default: all hardware threads)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_flag("--json", args->json, "Print JSON on stdout");
  add_kernels_option(cmd, args->kernels);
  cmd->callback([args, &run] {
    run = [args] {
      ModelOptions mo;
      mo.threads = args->threads;
      mo.max_seq = args->prompt + args->gen;
      mo.kernels = args->kernels;
      auto model = Model::load(args->dir, mo);
      const BenchResult r = bench_model(*model, args->prompt, args->gen);
      if (args->json) {
        nlohmann::ordered_json j;
        j["prefill_tok_s"] = r.prefill_tok_s;
        j["decode_tok_s"] = r.decode_tok_s;
        j["weight_bytes_per_token"] = r.weight_bytes_per_token;
        j["decode_gbps"] = r.decode_gbps;
        j["peak_rss_bytes"] = r.peak_rss_bytes;
        j["prompt"] = r.prompt;
        j["gen"] = r.gen;
        j["threads"] = r.threads;
        j["quantization"] = model->weights().quantization;
        fmt::print("{}\n", j.dump(2));
      } else {
        fmt::print("{:<26} {}\n", "quantization", model->weights().quantization);
        fmt::print("{:<26} {}\n", "threads", r.threads);
        fmt::print("{:<26} {:.1f} tok/s ({} tokens)\n", "prefill", r.prefill_tok_s, r.prompt);
        fmt::print("{:<26} {:.2f} tok/s ({} tokens)\n", "decode", r.decode_tok_s, r.gen);
        fmt::print("{:<26} {}\n", "weight bytes per token", human_bytes(double(r.weight_bytes_per_token)));
        fmt::print("{:<26} {:.2f} GB/s\n", "decode bandwidth", r.decode_gbps);
        fmt::print("{:<26} {}\n", "peak RSS", human_bytes(double(r.peak_rss_bytes)));
      }
      return 0;
    };
  });
}

}  // namespace qf::cli

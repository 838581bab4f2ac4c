// `qforge synth`: a synthetic Llama checkpoint of a real model's shape, for benchmarks.
#include "cli/commands.h"
#include "core/progress.h"
#include "model/synthetic_checkpoint.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace qf::cli {

void register_synth(CLI::App& app, Action& run) {
  struct Args {
    std::string shape = "tiny", out, dtype = "bf16", max_shard = "5GB";
    int64_t layers = 0;
    uint64_t seed = 0;
    int threads = 0;
    bool force = false, json = false, quiet = false;
  };
  auto args = std::make_shared<Args>();
  std::string shapes_help = "Named shape:";
  for (const auto& s : named_shapes()) shapes_help += fmt::format(" {} ({});", s.name, s.description);
  CLI::App* cmd = app.add_subcommand(
      "synth", "Write a synthetic Llama-style checkpoint with the layer shapes of a real model "
               "and heavy-tailed random weights (for benchmarks; not a trained model).");
  cmd->add_option("--shape", args->shape, shapes_help)->capture_default_str();
  cmd->add_option("-o,--output", args->out, "Output directory")->required();
  cmd->add_option("--layers", args->layers, "Number of decoder layers (default: the shape's)")
      ->check(CLI::Range(int64_t(1), int64_t(1000)));
  cmd->add_option("--dtype", args->dtype, "Weight dtype")
      ->check(name_choice("dtype", {"bf16", "f16", "f32"}))
      ->capture_default_str();
  cmd->add_option("--seed", args->seed, "Random seed (same seed, same bytes)")->capture_default_str();
  cmd->add_option("--max-shard-size", args->max_shard, "Largest shard (e.g. 5GB)")->capture_default_str();
  cmd->add_option("--threads", args->threads, "Worker threads (default: all)")->check(CLI::Range(1, 1024));
  cmd->add_flag("--force", args->force, "Replace the output directory if it exists");
  cmd->add_flag("--json", args->json, "Print the result as JSON");
  cmd->add_flag("-q,--quiet", args->quiet, "No progress bar");
  cmd->callback([args, &run] {
    run = [args] {
      SynthOptions o;
      o.shape = args->shape;
      o.layers = args->layers;
      o.dtype = args->dtype == "bf16" ? DType::BF16 : args->dtype == "f16" ? DType::F16 : DType::F32;
      o.seed = args->seed;
      o.max_shard_bytes = parse_size(args->max_shard);
      o.force = args->force;
      o.threads = args->threads;
      o.progress = !args->quiet && !args->json;
      const SynthReport r = write_synthetic_checkpoint(args->out, o);
      if (args->json) {
        nlohmann::ordered_json j;
        j["output"] = r.output.string();
        j["parameters"] = r.parameters;
        j["bytes"] = r.bytes;
        j["shards"] = r.shards;
        j["seconds"] = r.seconds;
        fmt::print("{}\n", j.dump(2));
      } else {
        fmt::print("qforge synth -> {}: {} parameters, {} in {} shard(s), {:.2f} s\n",
                   r.output.string(), r.parameters, human_bytes(double(r.bytes)), r.shards,
                   r.seconds);
      }
      return 0;
    };
  });
}

}  // namespace qf::cli

// `qforge demo`: the whole job on a built-in default, no download needed: synthesize a small
// Llama checkpoint, quantize it, and show what came out.
#include "cli/commands.h"
#include "core/error.h"
#include "core/progress.h"
#include "engine/model.h"
#include "eval/bench.h"
#include "eval/perplexity.h"
#include "targets/checkpoint_inspector.h"
#include "model/synthetic_checkpoint.h"
#include "pipeline/quantize_checkpoint.h"

#include <fmt/format.h>
#include <unistd.h>

#include <filesystem>

namespace fs = std::filesystem;

namespace qf::cli {

void register_demo(CLI::App& app, Action& run) {
  struct Args {
    std::string format = "nvfp4", shape = "tiny", out;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand(
      "demo", "Synthesize a small Llama checkpoint, quantize it, print the summary, and measure "
              "the result against the original (KL divergence, top-1 agreement, decode speed).");
  cmd->add_option("--format", args->format, "Weight format")
      ->check(name_choice("format", format_name_choices(/*weight_only=*/true)))
      ->capture_default_str();
  cmd->add_option("--shape", args->shape, "Synthetic model shape (see `qforge synth --help`)")
      ->capture_default_str();
  cmd->add_option("-o,--output", args->out,
                  "Keep the results here (default: a temporary directory, removed afterwards)");
  cmd->callback([args, &run] {
    run = [args] {
      const bool keep = !args->out.empty();
      const fs::path root = keep ? fs::path(args->out)
                                 : fs::temp_directory_path() /
                                       ("qforge-demo-" + std::to_string(::getpid()));
      fs::create_directories(root);
      struct Cleanup {
        fs::path dir;
        bool keep;
        ~Cleanup() {
          std::error_code ec;
          if (!keep) fs::remove_all(dir, ec);
        }
      } cleanup{root, keep};

      SynthOptions s;
      s.shape = args->shape;
      s.force = true;
      const SynthReport synth = write_synthetic_checkpoint(root / "model-bf16", s);
      fmt::print("1. synthesized a {} checkpoint: {} parameters, {}\n", args->shape,
                 synth.parameters, human_bytes(double(synth.bytes)));

      QuantizeOptions q;
      q.format = *parse_format(args->format);
      q.force = true;
      const QuantizeReport r = quantize_checkpoint(SourceModel::open(root / "model-bf16"),
                                                   root / "model-quantized", q);
      fmt::print("2. quantized it to {} (ModelOpt Hugging Face format):\n", args->format);
      print_quantize_summary(r);

      const InspectReport i = inspect_checkpoint(root / "model-quantized");
      fmt::print("3. inspected the result: quant_algo {}, {} quantized modules, {:.3f} bits per "
                 "quantized weight, {} on disk\n",
                 i.quant_algo, i.quantized_modules, i.bits_per_quantized_weight(),
                 human_bytes(double(i.total_bytes)));

      // Accuracy and speed of the result against the original, on a fixed pseudo-random token
      // stream (a synthetic model has no tokenizer and no natural text).
      ModelOptions mo;
      auto base = Model::load(root / "model-bf16", mo);
      auto quant = Model::load(root / "model-quantized", mo);
      std::vector<int32_t> ids(4 * 128 + 1);
      uint64_t state = 0x9E3779B97F4A7C15ull;
      for (auto& id : ids) {
        state = state * 6364136223846793005ull + 1442695040888963407ull;
        id = int32_t((state >> 33) % uint64_t(base->vocab_size()));
      }
      const KlResult kl = kl_divergence(*base, *quant, ids, 128);
      fmt::print("4. accuracy against the original on {} tokens: mean KL {:.5f} nats, p99 KL "
                 "{:.5f}, top-1 agreement {:.1f}%\n",
                 kl.tokens, kl.kl_mean, kl.kl_p99, 100 * kl.top1);
      // Speed as `qforge bench` measures it: the fast kernels.
      base->set_kernels(KernelMode::fast);
      quant->set_kernels(KernelMode::fast);
      const BenchResult b0 = bench_model(*base, 64, 32);
      const BenchResult b1 = bench_model(*quant, 64, 32);
      fmt::print("5. decode speed: original {:.1f} tok/s ({} per token), quantized {:.1f} tok/s "
                 "({} per token): {:.2f}x\n",
                 b0.decode_tok_s, human_bytes(double(b0.weight_bytes_per_token)), b1.decode_tok_s,
                 human_bytes(double(b1.weight_bytes_per_token)),
                 b0.decode_tok_s > 0 ? b1.decode_tok_s / b0.decode_tok_s : 0.0);
      if (keep) fmt::print("results kept in {}\n", root.string());
      return 0;
    };
  });
}

}  // namespace qf::cli

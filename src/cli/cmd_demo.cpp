// `qforge demo`: the whole job on a built-in default, no download needed: synthesize a small
// Llama checkpoint (or take a real one with --model), quantize it, and show what came out, with
// what each figure means.
#include "cli/commands.h"
#include "core/error.h"
#include "core/progress.h"
#include "engine/generate.h"
#include "engine/model.h"
#include "io/tokenizer.h"
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
namespace {

// The text a real model is measured on: plain English in the register of the small story models
// people try first (written for qforge; no licence attached).
constexpr std::string_view kDemoText =
    "Once upon a time, there was a little girl named Lily. She loved to play outside in the "
    "park with her friends. One day, she saw a big red ball under a tree. She ran to the ball "
    "and picked it up. It was soft and round. Lily wanted to share the ball with her friend "
    "Tom, so she walked to the sandbox where he was building a castle. \"Tom, look what I "
    "found!\" she said. Tom smiled and said, \"Let's play catch!\" They threw the ball back "
    "and forth until the sun went down. Then their moms called them home for dinner. Lily was "
    "tired but happy. She gave the ball to her mom and said, \"Can we come back tomorrow?\" Her "
    "mom laughed and said yes. That night, Lily dreamed about the big red ball and all the fun "
    "she had with Tom in the park.";
constexpr std::string_view kDemoPrompt = "Once upon a time";

std::string continuation(Model& m, const Tokenizer& tok, const std::vector<int32_t>& prompt) {
  const std::vector<int32_t> out = generate(m, prompt, 32, SamplingOptions{}, tok.eos_id(), {});
  std::string text = tok.decode(out);
  for (char& c : text)
    if (c == '\n') c = ' ';
  return text;
}

}  // namespace

void register_demo(CLI::App& app, Action& run) {
  struct Args {
    std::string format = "nvfp4", shape = "tiny", out, model;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand(
      "demo", "Synthesize a small Llama checkpoint (or take a real one with --model), quantize "
              "it, print the summary, and measure the result against the original (KL "
              "divergence, top-1 agreement, text before and after, decode speed), saying what "
              "each figure means.");
  cmd->add_option("--format", args->format, "Weight format")
      ->check(name_choice("format", format_name_choices(/*weight_only=*/true)))
      ->capture_default_str();
  cmd->add_option("--shape", args->shape, "Synthetic model shape (see `qforge synth --help`)")
      ->capture_default_str();
  cmd->add_option("--model", args->model,
                  "A real unquantized checkpoint with its tokenizer to use instead of a synthetic "
                  "one (random weights say nothing about accuracy); measured on a built-in "
                  "English paragraph")
      ->check(CLI::ExistingDirectory);
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

      const bool real = !args->model.empty();
      fs::path source = args->model;
      if (real) {
        fmt::print("1. took the checkpoint {}\n", source.string());
      } else {
        SynthOptions s;
        s.shape = args->shape;
        s.force = true;
        source = root / "model-bf16";
        const SynthReport synth = write_synthetic_checkpoint(source, s);
        fmt::print("1. synthesized a {} checkpoint: {} parameters, {}, random weights (no "
                   "download needed; `qforge demo --model DIR` does the same with a real model)\n",
                   args->shape, synth.parameters, human_bytes(double(synth.bytes)));
      }

      QuantizeOptions q;
      q.format = *parse_format(args->format);
      q.force = true;
      const QuantizeReport r =
          quantize_checkpoint(SourceModel::open(source), root / "model-quantized", q);
      fmt::print("2. quantized it to {} (ModelOpt Hugging Face format):\n", args->format);
      print_quantize_summary(r);

      const InspectReport i = inspect_checkpoint(root / "model-quantized");
      fmt::print("3. inspected the result: quant_algo {}, {} quantized modules, {:.3f} bits per "
                 "quantized weight, {} on disk\n",
                 i.quant_algo, i.quantized_modules, i.bits_per_quantized_weight(),
                 human_bytes(double(i.total_bytes)));

      ModelOptions mo;
      auto base = Model::load(source, mo);
      auto quant = Model::load(root / "model-quantized", mo);
      std::unique_ptr<Tokenizer> tok;
      std::vector<int32_t> ids;
      if (real) {
        tok = Tokenizer::load(source);
        ids = tok->encode(kDemoText, tok->bos_id() >= 0);
      } else {
        // No natural text for random weights: a fixed pseudo-random token stream.
        ids.resize(4 * 128 + 1);
        uint64_t state = 0x9E3779B97F4A7C15ull;
        for (auto& id : ids) {
          state = state * 6364136223846793005ull + 1442695040888963407ull;
          id = int32_t((state >> 33) % uint64_t(base->vocab_size()));
        }
      }
      const int64_t ctx = std::min<int64_t>(128, base->max_seq());
      const KlResult kl = kl_divergence(*base, *quant, ids, ctx);
      fmt::print("4. accuracy against the original on {} tokens{}: mean KL {:.5f} nats, p99 KL "
                 "{:.5f}, top-1 agreement {:.1f}%\n",
                 kl.tokens, real ? " of English text" : " of random ids", kl.kl_mean, kl.kl_p99,
                 100 * kl.top1);
      fmt::print("   KL: how far the quantized model's next-token distribution is from the "
                 "original's (0 = identical), averaged over positions, and at the worst 1%.\n"
                 "   top-1 agreement: how often both pick the same most likely next token.\n");
      if (!real)
        fmt::print("   With random weights every next-token distribution is almost flat, so the "
                   "slightest change in the logits\n   changes the top choice: the low agreement "
                   "is a property of the random model, not of {}.\n   For a real measure use "
                   "`qforge demo --model DIR` or `qforge eval kl BASE QUANT --text FILE`.\n",
                   args->format);
      if (real) {
        const std::vector<int32_t> prompt = tok->encode(kDemoPrompt, tok->add_bos_by_default());
        fmt::print("5. text after \"{}\" (greedy, 32 tokens):\n   original:  {}\n   quantized: "
                   "{}\n",
                   kDemoPrompt, continuation(*base, *tok, prompt),
                   continuation(*quant, *tok, prompt));
      }
      // Speed as `qforge bench` measures it: the fast kernels.
      base->set_kernels(KernelMode::fast);
      quant->set_kernels(KernelMode::fast);
      const BenchResult b0 = bench_model(*base, 64, 32);
      const BenchResult b1 = bench_model(*quant, 64, 32);
      fmt::print("{}. decode speed: original {:.1f} tok/s ({} per token), quantized {:.1f} tok/s "
                 "({} per token): {:.2f}x\n",
                 real ? 6 : 5, b0.decode_tok_s, human_bytes(double(b0.weight_bytes_per_token)), b1.decode_tok_s,
                 human_bytes(double(b1.weight_bytes_per_token)),
                 b0.decode_tok_s > 0 ? b1.decode_tok_s / b0.decode_tok_s : 0.0);
      if (b0.weight_bytes_per_token < (uint64_t(64) << 20))
        fmt::print("   Decode reads every weight once per token, so the gain follows the bytes read; "
                   "a model of a few MB\n   sits in the CPU caches, where fixed costs dominate and "
                   "this ratio means little\n   (`qforge bench` on a model of hundreds of MB "
                   "measures it).\n");
      if (keep) fmt::print("results kept in {}\n", root.string());
      return 0;
    };
  });
}

}  // namespace qf::cli

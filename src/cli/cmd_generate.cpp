// `qforge generate`: text from a prompt, streamed to stdout as it is produced.
#include "cli/commands.h"
#include "core/error.h"
#include "engine/generate.h"
#include "io/tokenizer.h"

#include <fmt/format.h>

#include <cstdio>

namespace qf::cli {

void register_generate(CLI::App& app, Action& run) {
  struct Args {
    std::string dir, prompt, tokenizer;
    int64_t n = 128;
    float temp = 0.f, top_p = 1.f;
    uint64_t seed = 0;
    int threads = 0;
    KernelMode kernels = KernelMode::fast;
    std::optional<KvCacheType> kv_cache;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand(
      "generate", "Generate text with a checkpoint (original or quantized) on the CPU, streaming "
                  "it to stdout. Greedy unless --temp is above 0.");
  cmd->add_option("model", args->dir, "Model directory (with its tokenizer files)")->required();
  cmd->add_option("-p,--prompt", args->prompt,
                  "Prompt text; BOS is prepended when the tokenizer has one (default: empty, "
                  "i.e. generate from BOS)");
  cmd->add_option("-n,--n-predict", args->n, "Number of tokens to generate (default 128)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--temp", args->temp,
                  "Sampling temperature; 0 picks the most likely token (default 0)")
      ->check(finite_range(0.0, 1000.0));
  cmd->add_option("--top-p", args->top_p,
                  "Nucleus sampling: keep the most likely tokens up to this probability mass "
                  "(default 1.0 = all; only with --temp > 0)")
      ->check(finite_range(0.0, 1.0));
  cmd->add_option("--seed", args->seed, "Random seed of the sampler (default 0)");
  cmd->add_option("-t,--threads", args->threads, "Threads (default: all hardware threads)")
      ->check(CLI::NonNegativeNumber);
  add_kernels_option(cmd, args->kernels);
  add_kv_cache_option(cmd, args->kv_cache, KvCacheType::bf16);
  add_tokenizer_option(cmd, args->tokenizer);
  cmd->callback([args, &run] {
    run = [args] {
      const auto tok = Tokenizer::load_for_model(args->dir, args->tokenizer);
      ModelOptions mo;
      mo.threads = args->threads;
      mo.kernels = args->kernels;
      mo.huge_page_weights = true;
      mo.kv_cache = args->kv_cache;
      mo.kv_cache_default = KvCacheType::bf16;
      auto model = Model::load(args->dir, mo);
      std::vector<int32_t> prompt = tok->encode(args->prompt, tok->bos_id() >= 0);
      if (prompt.empty()) fail("{}: the prompt is empty and the tokenizer has no BOS", args->dir);
      fmt::print("{}", args->prompt);
      std::fflush(stdout);
      int32_t prev = prompt.back();
      SamplingOptions so{args->temp, args->top_p, args->seed};
      const auto out = generate(*model, prompt, args->n, so, tok->eos_id(), [&](int32_t id) {
        if (id != tok->eos_id()) fmt::print("{}", tok->decode_next(prev, id));
        std::fflush(stdout);
        prev = id;
      });
      fmt::print("\n");
      if (int64_t(out.size()) < args->n && (out.empty() || out.back() != tok->eos_id()))
        fmt::print(stderr,
                   "qforge: generation stopped after {} tokens: prompt + output reached the "
                   "model's context limit of {} tokens\n",
                   out.size(), model->max_seq());
      return 0;
    };
  });
}

}  // namespace qf::cli

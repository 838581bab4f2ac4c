// `qforge eval ppl`, `qforge eval kl` and `qforge compare`: perplexity of a model, how far a
// quantized model's next-token distributions are from the original's, and the same for several
// variants at once, over a text file.
#include "cli/commands.h"
#include "core/error.h"
#include "core/progress.h"
#include "eval/compare.h"
#include "eval/perplexity.h"
#include "io/json_file.h"
#include "eval/text.h"
#include "io/tokenizer.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace qf::cli {
namespace {

struct EvalArgs {
  std::string text, tokenizer;
  int64_t ctx = 256;
  int64_t max_chars = 0;
  int threads = 0;
  bool json = false;
  KernelMode kernels = KernelMode::exact;
  std::optional<KvCacheType> kv_cache;
};

void add_common(CLI::App* cmd, EvalArgs& a) {
  cmd->add_option("--text", a.text, "UTF-8 text file to evaluate on")->required();
  cmd->add_option("--ctx", a.ctx,
                  "Tokens per window; windows overlap by one token and each starts from "
                  "position 0 (default 256)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--max-chars", a.max_chars,
                  "Use only the first N characters of the text (default 0 = all)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("-t,--threads", a.threads, "Threads (default: all hardware threads)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_flag("--json", a.json, "Print JSON on stdout");
  add_kernels_option(cmd, a.kernels);
  add_kv_cache_option(cmd, a.kv_cache, KvCacheType::f32);
  add_tokenizer_option(cmd, a.tokenizer);
}

// The token stream of the protocol: BOS once at the start (when the tokenizer has one, whose
// id goes to *bos; -1 otherwise).
std::vector<int32_t> stream_ids(const std::string& model_dir, const EvalArgs& a,
                                int32_t* bos = nullptr) {
  const auto tok = Tokenizer::load_for_model(model_dir, a.tokenizer);
  if (bos) *bos = tok->bos_id();
  return eval_text_ids(a.text, a.max_chars, *tok);
}

EvalProgress progress_bar(std::unique_ptr<Progress>& bar, const std::string& label,
                          int64_t total) {
  bar = std::make_unique<Progress>(label, ProgressUnit::tokens, double(total),
                                   Progress::stderr_is_terminal());
  return [&bar, last = int64_t(0)](int64_t done, int64_t) mutable {
    bar->advance(double(done - last));
    last = done;
  };
}

}  // namespace

void register_eval(CLI::App& app, Action& run) {
  CLI::App* eval = app.add_subcommand(
      "eval", "Evaluate checkpoints on a text: perplexity (ppl) or the KL divergence of a "
              "quantized model from its original (kl).");
  eval->require_subcommand(1);

  auto pa = std::make_shared<EvalArgs>();
  auto p_model = std::make_shared<std::string>();
  auto p_protocol = std::make_shared<std::string>("qforge");
  CLI::App* ppl = eval->add_subcommand(
      "ppl", "Perplexity of MODEL on --text: BOS once at the start, windows of --ctx input "
             "tokens overlapping by one, each from position 0; ppl = exp(mean NLL).");
  ppl->add_option("model", *p_model, "Model directory (with its tokenizer files)")->required();
  add_common(ppl, *pa);
  ppl->add_option("--protocol", *p_protocol,
                  "qforge: the windows above; llama.cpp: llama-perplexity's (chunks of --ctx "
                  "tokens, each starting with BOS, the second half of each scored), to compare "
                  "with llama.cpp on the same file (default qforge)")
      ->check(CLI::IsMember({"qforge", "llama.cpp"}));
  ppl->callback([pa, p_model, p_protocol, &run] {
    run = [pa, p_model, p_protocol] {
      ModelOptions mo;
      mo.threads = pa->threads;
      mo.kernels = pa->kernels;
      mo.kv_cache = pa->kv_cache;
      mo.llama_cpp_attention = *p_protocol == "llama.cpp";
      auto model = Model::load(*p_model, mo);
      int32_t bos = -1;
      const auto ids = stream_ids(*p_model, *pa, &bos);
      std::unique_ptr<Progress> bar;
      const bool llama_cpp = *p_protocol == "llama.cpp";
      if (llama_cpp && bos < 0)
        fail("--protocol llama.cpp needs a tokenizer with a BOS token");
      const auto r =
          llama_cpp ? perplexity_llama_cpp(*model, ids, pa->ctx, bos,
                                           progress_bar(bar, "perplexity", int64_t(ids.size())))
                    : perplexity(*model, ids, pa->ctx,
                                 progress_bar(bar, "perplexity", int64_t(ids.size()) - 1));
      bar->finish();
      if (pa->json) {
        nlohmann::ordered_json j;
        j["ppl"] = r.ppl;
        j["tokens"] = r.tokens;
        j["nll_mean"] = r.nll_mean;
        j["ctx"] = pa->ctx;
        j["protocol"] = *p_protocol;
        fmt::print("{}\n", j.dump(2));
      } else {
        fmt::print("perplexity {:.5f} over {} tokens (ctx {}{})\n", r.ppl, r.tokens, pa->ctx,
                   llama_cpp ? ", llama.cpp protocol" : "");
      }
      return 0;
    };
  });

  auto ka = std::make_shared<EvalArgs>();
  auto k_models = std::make_shared<std::pair<std::string, std::string>>();
  CLI::App* kl = eval->add_subcommand(
      "kl", "Per-token KL(BASE || QUANT) of the next-token distributions on --text (mean and "
            "99th percentile, nats), top-1 agreement, and both perplexities. The text is "
            "tokenized with BASE's tokenizer (or --tokenizer's). A quantized BASE with an "
            "unquantized QUANT is taken for swapped arguments and warned about.");
  kl->add_option("base", k_models->first, "Reference model directory")->required();
  kl->add_option("quant", k_models->second, "Quantized model directory")->required();
  add_common(kl, *ka);
  kl->callback([ka, k_models, &run] {
    run = [ka, k_models] {
      ModelOptions mo;
      mo.threads = ka->threads;
      mo.kernels = ka->kernels;
      mo.kv_cache = ka->kv_cache;
      auto base = Model::load(k_models->first, mo);
      auto quant = Model::load(k_models->second, mo);
      std::vector<std::string> warnings;
      // KL is not symmetric: with the arguments swapped the numbers look plausible but measure
      // the original against the quantized model.
      if (base->weights().quantization != "none" && quant->weights().quantization == "none")
        warnings.push_back(fmt::format(
            "BASE {} is quantized ({}) and QUANT {} is not: the arguments look swapped; "
            "eval kl takes the original model first (eval kl {} {})",
            k_models->first, base->weights().quantization, k_models->second, k_models->second,
            k_models->first));
      for (const auto& w : warnings) fmt::print(stderr, "qforge: warning: {}\n", w);
      const auto ids = stream_ids(k_models->first, *ka);
      std::unique_ptr<Progress> bar;
      const auto r = kl_divergence(*base, *quant, ids, ka->ctx,
                                   progress_bar(bar, "kl", int64_t(ids.size()) - 1));
      bar->finish();
      if (ka->json) {
        nlohmann::ordered_json j;
        j["kl_mean"] = r.kl_mean;
        j["kl_p99"] = r.kl_p99;
        j["top1"] = r.top1;
        j["ppl_base"] = r.ppl_base;
        j["ppl_quant"] = r.ppl_quant;
        j["tokens"] = r.tokens;
        j["warnings"] = warnings;
        fmt::print("{}\n", j.dump(2));
      } else {
        fmt::print("{:<22} {:.6f}\n", "KL mean (nats)", r.kl_mean);
        fmt::print("{:<22} {:.6f}\n", "KL p99 (nats)", r.kl_p99);
        fmt::print("{:<22} {:.4f}\n", "top-1 agreement", r.top1);
        fmt::print("{:<22} {:.5f}\n", "perplexity (base)", r.ppl_base);
        fmt::print("{:<22} {:.5f}\n", "perplexity (quant)", r.ppl_quant);
        fmt::print("{:<22} {}\n", "tokens", r.tokens);
      }
      return 0;
    };
  });
}

void register_compare(CLI::App& app, Action& run) {
  struct Args : EvalArgs {
    std::string base, html;
    std::vector<std::string> variants;
  };
  auto a = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand(
      "compare", "Measure several quantized variants of one model against it on the same text in "
                 "one run: size, bits per weight, perplexity, KL mean and p99, top-1 agreement "
                 "(the base model's logits are computed once per window). Table, --json, --html.");
  cmd->add_option("base", a->base, "Original (reference) model directory")->required();
  cmd->add_option("variants", a->variants, "Quantized model directories")->required();
  add_common(cmd, *a);
  cmd->add_option("--html", a->html,
                  "Also write a self-contained HTML page (table and a plot of KL against size)");
  cmd->callback([a, &run] {
    run = [a] {
      ModelOptions mo;
      mo.threads = a->threads;
      mo.kernels = a->kernels;
      mo.kv_cache = a->kv_cache;
      const auto ids = stream_ids(a->base, *a);
      std::vector<std::filesystem::path> variants(a->variants.begin(), a->variants.end());
      std::unique_ptr<Progress> bar;
      CompareResult r = compare_models(a->base, variants, ids, a->ctx, mo,
                                       progress_bar(bar, "compare", int64_t(ids.size()) - 1));
      bar->finish();
      r.text = a->text;
      if (!a->html.empty()) write_text_file(a->html, compare_html(r));
      if (a->json) {
        fmt::print("{}\n", compare_json(r).dump(2));
      } else {
        fmt::print("{}", compare_table(r));
        if (!a->html.empty()) fmt::print("HTML report: {}\n", a->html);
      }
      return 0;
    };
  });
}

}  // namespace qf::cli

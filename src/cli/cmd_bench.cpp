// `qforge bench`: prefill and decode speed of one or more checkpoints on the CPU, each measured
// several times (median and range).
#include "cli/commands.h"
#include "core/progress.h"
#include "eval/bench.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <memory>
#include <vector>

namespace qf::cli {
namespace {

nlohmann::ordered_json series_json(const std::string& dir, const std::string& quantization,
                                   const BenchSeries& s, int repeat) {
  const BenchResult& r = s.median;
  nlohmann::ordered_json j;
  j["model"] = dir;
  j["quantization"] = quantization;
  j["prefill_tok_s"] = r.prefill_tok_s;
  j["decode_tok_s"] = r.decode_tok_s;
  j["batch"] = r.batch;
  j["decode_tok_s_per_sequence"] = r.decode_tok_s_per_sequence;
  j["prefill_tok_s_min"] = s.prefill_min;
  j["prefill_tok_s_max"] = s.prefill_max;
  j["decode_tok_s_min"] = s.decode_min;
  j["decode_tok_s_max"] = s.decode_max;
  j["weight_bytes_per_token"] = r.weight_bytes_per_token;
  j["decode_gbps"] = r.decode_gbps;
  j["peak_rss_bytes"] = r.peak_rss_bytes;
  j["kv_cache"] = std::string(kv_cache_type_name(r.kv_cache));
  j["kv_cache_bytes"] = r.kv_cache_bytes;
  j["mamba_state_bytes"] = r.mamba_state_bytes;
  j["prompt"] = r.prompt;
  j["gen"] = r.gen;
  j["threads"] = r.threads;
  j["repeat"] = repeat;
  if (r.products_s > 0) {
    // FLOPs of the Linears only (attention's and the head's left out), for prefill and products.
    j["linear_gflop_per_token"] = r.linear_flops_per_token / 1e9;
    j["prefill_linear_gflops"] = r.linear_flops_per_token * s.median.prefill_tok_s / 1e9;
    j["products_gflops"] = s.products_flop_s / 1e9;
    j["prefill_of_products"] = s.prefill_of_products.median;
    j["prefill_of_products_min"] = s.prefill_of_products.min;
    j["prefill_of_products_max"] = s.prefill_of_products.max;
  }
  return j;
}

}  // namespace

void register_bench(CLI::App& app, Action& run) {
  struct Args {
    std::vector<std::string> dirs;
    std::vector<int64_t> prompts{128}, batches{1};
    int64_t gen = 32;
    int threads = 0, repeat = 3;
    bool json = false, alternate = false, vs_gemm = false;
    KernelMode kernels = KernelMode::fast;
    std::optional<KvCacheType> kv_cache;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand(
      "bench", "Measure prefill and decode speed of one or more models: tokens/s (median of "
               "--repeat runs, with the range), weight bytes each decode step reads and the "
               "memory bandwidth that achieves, peak RSS. No tokenizer needed.");
  cmd->add_option("models", args->dirs, "Model directories (several: one table)")->required();
  cmd->add_option("--prompt", args->prompts,
                  "Prompt tokens processed in one prefill; several (64,4096 or the flag repeated): "
                  "each model is measured at each length, one row each (default 128). Each run "
                  "reserves its sequences' KV caches for prompt + gen before the clock starts; a "
                  "model's cache never shrinks, so the KV bytes reported cover the largest run of "
                  "that model so far")
      ->check(CLI::PositiveNumber)
      ->delimiter(',')
      ->allow_extra_args(false);  // one value per --prompt: the models may follow it
  cmd->add_option("--gen", args->gen, "Tokens decoded one at a time (default 32)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--batch", args->batches,
                  "Sequences decoded together, each weight read once per step for all of them "
                  "(each prefilled on its own first); decode tok/s is then the sum over the "
                  "sequences, and the JSON also gives it per sequence; several (1,8 or the flag "
                  "repeated): each model at each prompt length is measured at each, one row each "
                  "(default 1)")
      ->check(CLI::Range(int64_t(1), int64_t(4096)))
      ->delimiter(',')
      ->allow_extra_args(false);
  cmd->add_option("--repeat", args->repeat,
                  "Runs per model; the median and the range are reported (default 3)")
      ->check(CLI::Range(1, 1000));
  cmd->add_option("-t,--threads", args->threads, "Threads (default: all hardware threads)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_flag("--alternate", args->alternate,
                "Load every model first, then run the rows (each model at each --prompt and "
                "--batch) in turns, one run of each per round, and compare each with the first "
                "row by the median over rounds of their same-round ratio (with its range): fair on "
                "a machine whose speed drifts, at the cost of holding all models in memory at "
                "once, which peak RSS then covers (default: one model at a time, all its runs, "
                "then the next; ratios of the medians)");
  cmd->add_flag("--vs-gemm", args->vs_gemm,
                "After each prefill, run every layer's Linear products alone at the prompt length "
                "(one at a time, the same kernels and threads, on random activations: the GEMM "
                "kernel's rate on this model's shapes) and report the prefill's rate as a fraction "
                "of theirs, the median (and range) of the runs' same-run ratios, with both rates "
                "in GFLOP/s of the Linears' FLOPs; not for models with MoE layers (default: off)");
  cmd->add_flag("--json", args->json,
                "Print JSON on stdout (one object; with several rows {\"models\": [...]})");
  add_kernels_option(cmd, args->kernels);
  add_kv_cache_option(cmd, args->kv_cache, KvCacheType::bf16);
  cmd->callback([args, &run] {
    run = [args] {
      ModelOptions mo;
      mo.threads = args->threads;
      mo.max_seq = *std::max_element(args->prompts.begin(), args->prompts.end()) + args->gen;
      mo.kernels = args->kernels;
      mo.huge_page_weights = true;
      mo.kv_cache = args->kv_cache;
      mo.kv_cache_default = KvCacheType::bf16;
      std::vector<nlohmann::ordered_json> rows;
      std::vector<RatioOverRounds> prefill_vs_first, decode_vs_first;
      if (args->alternate) {
        std::vector<std::unique_ptr<Model>> loaded;
        std::vector<BenchCase> cases;
        std::vector<std::string> case_dirs;
        for (const std::string& dir : args->dirs) {
          loaded.push_back(Model::load(dir, mo));
          if (args->vs_gemm) check_prefill_products(*loaded.back(), dir);
          for (int64_t prompt : args->prompts)
            for (int64_t batch : args->batches) {
              cases.push_back({loaded.back().get(), prompt, batch});
              case_dirs.push_back(dir);
            }
        }
        const AlternatingBench a =
            bench_alternating(cases, args->gen, args->repeat, args->vs_gemm);
        for (size_t c = 0; c < cases.size(); ++c)
          rows.push_back(series_json(case_dirs[c], cases[c].model->weights().quantization,
                                     a.series[c], args->repeat));
        prefill_vs_first = a.prefill_vs_first;
        decode_vs_first = a.decode_vs_first;
      } else {
        for (const std::string& dir : args->dirs) {
          // One model in memory at a time; peak RSS is the process's, so it covers those before.
          auto model = Model::load(dir, mo);
          if (args->vs_gemm) check_prefill_products(*model, dir);
          for (int64_t prompt : args->prompts)
            for (int64_t batch : args->batches) {
              const BenchSeries s =
                  bench_repeated(*model, prompt, args->gen, args->repeat, batch, args->vs_gemm);
              rows.push_back(series_json(dir, model->weights().quantization, s, args->repeat));
              const double p = s.median.prefill_tok_s / rows[0]["prefill_tok_s"].get<double>(),
                           d = s.median.decode_tok_s / rows[0]["decode_tok_s"].get<double>();
              prefill_vs_first.push_back({p, p, p});
              decode_vs_first.push_back({d, d, d});
            }
        }
      }
      // Against the first row: the speedups, and the decode speedup the weight bytes read per step
      // allow (a decode that streams its weights at the same rate as the first row's reaches it).
      for (size_t m = 0; m < rows.size() && rows.size() > 1; ++m) {
        const double limit = double(rows[0]["weight_bytes_per_token"].get<uint64_t>()) /
                             double(rows[m]["weight_bytes_per_token"].get<uint64_t>());
        rows[m]["alternate"] = args->alternate;
        rows[m]["prefill_vs_first"] = prefill_vs_first[m].median;
        rows[m]["decode_vs_first"] = decode_vs_first[m].median;
        if (args->alternate) {
          rows[m]["prefill_vs_first_min"] = prefill_vs_first[m].min;
          rows[m]["prefill_vs_first_max"] = prefill_vs_first[m].max;
          rows[m]["decode_vs_first_min"] = decode_vs_first[m].min;
          rows[m]["decode_vs_first_max"] = decode_vs_first[m].max;
        }
        rows[m]["byte_limit_vs_first"] = limit;
        rows[m]["decode_of_byte_limit"] = decode_vs_first[m].median / limit;
      }
      // After the models, so its buffer is not in their peak RSS.
      const double stream = stream_read_gbps(rows[0]["threads"].get<int>());
      for (auto& j : rows) j["decode_fraction_of_stream"] = j["decode_gbps"].get<double>() / stream;
      if (args->json) {
        if (rows.size() == 1) {
          rows[0]["stream_read_gbps"] = stream;
          fmt::print("{}\n", rows[0].dump(2));
        } else {
          nlohmann::ordered_json j;
          j["models"] = rows;
          j["stream_read_gbps"] = stream;
          fmt::print("{}\n", j.dump(2));
        }
        return 0;
      }
      const auto range = [](const nlohmann::ordered_json& j, const char* key) {
        return fmt::format("{:.1f} ({:.1f}-{:.1f})", j[key].get<double>(),
                           j[std::string(key) + "_min"].get<double>(),
                           j[std::string(key) + "_max"].get<double>());
      };
      // One row per model, prompt length and batch: the length and the batch join the name
      // where there are several.
      const auto label = [&](const nlohmann::ordered_json& j) {
        std::string m = j["model"].get<std::string>();
        if (args->prompts.size() > 1) m += fmt::format(" (prompt {})", j["prompt"].get<int64_t>());
        if (args->batches.size() > 1) m += fmt::format(" (batch {})", j["batch"].get<int64_t>());
        return m;
      };
      size_t w = 5;
      for (const auto& j : rows) w = std::max(w, label(j).size());
      fmt::print("{:<{}}  {:>24}  {:>24}  {:>11}  {:>16}  {:>10}  {:>15}  {}\n", "model", w,
                 "prefill tok/s (range)", "decode tok/s (range)", "bytes/token",
                 "GB/s (of STREAM)", "peak RSS", "KV cache", "quantization");
      for (const auto& j : rows)
        fmt::print("{:<{}}  {:>24}  {:>24}  {:>11}  {:>16}  {:>10}  {:>15}  {}\n",
                   label(j), w, range(j, "prefill_tok_s"),
                   range(j, "decode_tok_s"),
                   human_bytes(double(j["weight_bytes_per_token"].get<uint64_t>())),
                   fmt::format("{:.2f} ({:.0f}%)", j["decode_gbps"].get<double>(),
                               100 * j["decode_fraction_of_stream"].get<double>()),
                   human_bytes(double(j["peak_rss_bytes"].get<uint64_t>())),
                   fmt::format("{} {}", j["kv_cache"].get<std::string>(),
                               human_bytes(double(j["kv_cache_bytes"].get<uint64_t>()))),
                   j["quantization"].get<std::string>());
      fmt::print("{} threads, prompt {} tokens, {} decoded, median of {} runs; GB/s = weight bytes "
                 "per step x decode steps per second; STREAM read measured in this run: {:.2f} "
                 "GB/s\n",
                 rows[0]["threads"].get<int>(), fmt::join(args->prompts, " / "), args->gen,
                 args->repeat, stream);
      if (rows.size() > 1) {
        fmt::print("\nAgainst the first row ({}); byte limit = its weight bytes per decode step / "
                   "this row's:\n",
                   args->alternate ? "runs in turns, medians of the same-round ratios"
                                   : "ratios of the medians; --alternate for same-round ratios");
        fmt::print("{:<{}}  {:>8}  {:>24}  {:>10}  {:>12}\n", "model", w, "prefill",
                   args->alternate ? "decode (range)" : "decode", "byte limit", "of the limit");
        for (size_t m = 1; m < rows.size(); ++m) {
          const auto& j = rows[m];
          const std::string decode =
              args->alternate ? fmt::format("{:.3f}x ({:.3f}-{:.3f})", decode_vs_first[m].median,
                                            decode_vs_first[m].min, decode_vs_first[m].max)
                              : fmt::format("{:.3f}x", decode_vs_first[m].median);
          fmt::print("{:<{}}  {:>7.3f}x  {:>24}  {:>9.3f}x  {:>12.3f}\n",
                     label(j), w, j["prefill_vs_first"].get<double>(), decode,
                     j["byte_limit_vs_first"].get<double>(),
                     j["decode_of_byte_limit"].get<double>());
        }
      }
      if (args->vs_gemm) {
        fmt::print("\nPrefill against its Linear products run alone (GFLOP/s of the Linears' "
                   "FLOPs; the fraction: median of same-run ratios):\n");
        fmt::print("{:<{}}  {:>15}  {:>16}  {:>24}\n", "model", w, "prefill GFLOP/s",
                   "products GFLOP/s", "prefill / products");
        for (const auto& j : rows)
          fmt::print("{:<{}}  {:>15.1f}  {:>16.1f}  {:>24}\n", label(j), w,
                     j["prefill_linear_gflops"].get<double>(), j["products_gflops"].get<double>(),
                     fmt::format("{:.3f} ({:.3f}-{:.3f})", j["prefill_of_products"].get<double>(),
                                 j["prefill_of_products_min"].get<double>(),
                                 j["prefill_of_products_max"].get<double>()));
      }
      if (args->batches.size() == 1 && args->batches[0] > 1)
        fmt::print("{} sequences decoded together: tok/s are summed over them ({:.1f} decode tok/s "
                   "per sequence for the first model)\n",
                   args->batches[0], rows[0]["decode_tok_s_per_sequence"].get<double>());
      else if (args->batches.size() > 1)
        fmt::print("Batches of {} sequences decoded together: a row's tok/s are summed over its "
                   "sequences\n",
                   fmt::join(args->batches, " / "));
      return 0;
    };
  });
}

}  // namespace qf::cli

// End-to-end tests of `qforge eval`, `generate` and `bench` on the fixture models: the reference
// perplexity, the published greedy texts, KL of every quantized export against its original,
// and one-line errors for bad input.
#include "core/error.h"
#include "eval/text.h"
#include "test_util.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>

namespace qf {
namespace {

namespace fs = std::filesystem;

std::string model(const char* name) {
  return "'" + (test::fixtures_dir() / "models" / name).string() + "'";
}
std::string corpus() {
  return "'" + (test::fixtures_dir() / "corpora" / "tinystories_valid_subset.txt").string() + "'";
}

nlohmann::json run_json(const std::string& args) {
  const auto r = test::run_qforge(args);
  EXPECT_EQ(r.exit_code, 0) << args << "\n" << r.err;
  return nlohmann::json::parse(r.out);
}

void expect_one_line_error(const test::CommandResult& r, const std::string& needle) {
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("qforge: error: "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(needle), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
}

TEST(EvalE2E, Stories260KPerplexityMatchesReference) {
  QF_REQUIRE_FIXTURES();
  const auto j = run_json("eval ppl " + model("stories260K-hf") + " --text " + corpus() +
                          " --max-chars 20000 --ctx 256 --json");
  EXPECT_NEAR(j["ppl"].get<double>(), 4.07327, 0.0005);
  EXPECT_EQ(j["tokens"].get<int64_t>(), 9601);
}

TEST(EvalE2E, GreedyGenerationReproducesPublishedTexts) {
  QF_REQUIRE_FIXTURES();
  auto r = test::run_qforge("generate " + model("stories260K-hf") + " -n 60");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out.rfind(
                "Once upon a time, there was a little girl named Lily. She loved to play outside "
                "in the park. One day, she saw a big, red ball. She wanted to play with it, but "
                "it was too high",
                0),
            0u)
      << r.out;
  r = test::run_qforge("generate " + model("tinystories-656K-hf") + " -p 'Once upon a time' -n 25");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out.rfind("Once upon a time, a little girl named Lily lived in a small house with "
                        "her mom, dad, and her dog, Spot",
                        0),
            0u)
      << r.out;
}

TEST(EvalE2E, SeededSamplingIsReproducible) {
  QF_REQUIRE_FIXTURES();
  const std::string cmd =
      "generate " + model("tinystories-656K-hf") + " -p 'The dog' -n 20 --temp 0.8 --top-p 0.9 --seed 7";
  const auto a = test::run_qforge(cmd), b = test::run_qforge(cmd);
  ASSERT_EQ(a.exit_code, 0) << a.err;
  EXPECT_EQ(a.out, b.out);
}

TEST(EvalE2E, KlOfAModelAgainstItselfIsZero) {
  QF_REQUIRE_FIXTURES();
  const auto j = run_json("eval kl " + model("tinystories-656K-hf") + " " +
                          model("tinystories-656K-hf") + " --text " + corpus() +
                          " --max-chars 3000 --json");
  EXPECT_EQ(j["kl_mean"].get<double>(), 0.0);
  EXPECT_EQ(j["kl_p99"].get<double>(), 0.0);
  EXPECT_EQ(j["top1"].get<double>(), 1.0);
  EXPECT_EQ(j["ppl_base"].get<double>(), j["ppl_quant"].get<double>());
  EXPECT_GT(j["tokens"].get<int64_t>(), 500);
}

// Every format through both exporters, on both models: loads, and stays close to the original.
TEST(EvalE2E, KlOfEveryQuantizedExport) {
  QF_REQUIRE_FIXTURES();
  test::ScratchDir tmp;
  for (const char* m : {"stories260K-hf", "tinystories-656K-hf"}) {
    for (const char* fmt : {"nvfp4", "mxfp4", "fp8", "int4"}) {
      for (const char* exp : {"modelopt", "compressed-tensors"}) {
        const std::string out = (tmp / (std::string(m) + fmt + exp)).string();
        const bool small = std::string(m) == "stories260K-hf";
        const std::string group = std::string(fmt) == "int4" && small ? " --group-size 32" : "";
        const auto q = test::run_qforge("quantize " + model(m) + " -o '" + out + "' --format " +
                                        fmt + " --export " + exp + group);
        ASSERT_EQ(q.exit_code, 0) << q.err;
        const auto j = run_json("eval kl " + model(m) + " '" + out + "' --text " + corpus() +
                                " --max-chars 4000 --json");
        SCOPED_TRACE(std::string(m) + " " + fmt + " " + exp);
        const double kl = j["kl_mean"].get<double>();
        EXPECT_TRUE(std::isfinite(kl));
        EXPECT_GT(kl, 0.0);
        EXPECT_LT(kl, std::string(fmt) == "fp8" ? 0.02 : 0.25);
        EXPECT_TRUE(std::isfinite(j["kl_p99"].get<double>()));
        EXPECT_GT(j["top1"].get<double>(), std::string(fmt) == "fp8" ? 0.9 : 0.65);
        EXPECT_LT(j["ppl_quant"].get<double>(), 1.2 * j["ppl_base"].get<double>());
      }
    }
  }
}

TEST(EvalE2E, BenchReportsItsFields) {
  QF_REQUIRE_FIXTURES();
  const auto j = run_json("bench " + model("stories260K-hf") + " --prompt 16 --gen 8 --json");
  for (const char* k : {"prefill_tok_s", "decode_tok_s", "decode_gbps"})
    EXPECT_GT(j[k].get<double>(), 0.0) << k;
  // 7 Linears x 5 layers + the tied F32 output head, all F32.
  EXPECT_EQ(j["weight_bytes_per_token"].get<uint64_t>(),
            4u * (5 * (64 * 64 * 2 + 32 * 64 * 2 + 3 * 64 * 172) + 512 * 64));
  EXPECT_GT(j["peak_rss_bytes"].get<uint64_t>(), 0u);
  // BF16 by default: 5 layers x (K + V) x 32 positions (24 run, whole tiles of 16) x 4 KV heads
  // of 8 x 2 bytes.
  EXPECT_EQ(j["kv_cache"], "bf16");
  EXPECT_EQ(j["kv_cache_bytes"].get<uint64_t>(), 5u * 2 * 32 * 32 * 2);
}

// --kv-cache chooses the cache's storage; perplexity moves little from the F32 cache's.
TEST(EvalE2E, KvCacheTypes) {
  QF_REQUIRE_FIXTURES();
  const auto j = run_json("bench " + model("stories260K-hf") +
                          " --prompt 16 --gen 8 --repeat 1 --kv-cache fp8 --json");
  EXPECT_EQ(j["kv_cache"], "fp8");
  EXPECT_EQ(j["kv_cache_bytes"].get<uint64_t>(), 5u * 2 * 32 * 32);
  const std::string ppl = "eval ppl " + model("tinystories-656K-hf") + " --text " + corpus() +
                          " --max-chars 3000 --json --kv-cache ";
  const double f32 = run_json(ppl + "f32")["ppl"].get<double>();
  for (const char* t : {"bf16", "f16", "fp8", "auto"}) {
    const double p = run_json(ppl + t)["ppl"].get<double>();
    EXPECT_NEAR(p, f32, (t[0] == 'f' && t[1] == 'p' ? 2e-2 : 2e-3) * f32) << t;
    if (std::string(t) == "auto") EXPECT_EQ(p, f32);  // no KV scales: F32 in eval
    else EXPECT_NE(p, f32) << t;
  }
  const auto bad = test::run_qforge(ppl + "int8");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.err.find("unknown kv-cache 'int8'"), std::string::npos) << bad.err;
}

// Several models in one table, each the median of --repeat runs with its range.
TEST(EvalE2E, BenchSeveralModelsWithRepetitions) {
  QF_REQUIRE_FIXTURES();
  const auto j = run_json("bench " + model("stories260K-hf") + " " + model("tinystories-656K-hf") +
                          " --prompt 8 --gen 4 --repeat 3 --json");
  ASSERT_EQ(j["models"].size(), 2u);
  for (const auto& m : j["models"]) {
    EXPECT_EQ(m["repeat"], 3);
    for (const char* k : {"prefill_tok_s", "decode_tok_s"}) {
      const double v = m[k].get<double>();
      EXPECT_LE(m[std::string(k) + "_min"].get<double>(), v) << k;
      EXPECT_GE(m[std::string(k) + "_max"].get<double>(), v) << k;
    }
  }
  EXPECT_NE(j["models"][0]["model"].get<std::string>().find("stories260K-hf"), std::string::npos);
  const auto text = test::run_qforge("bench " + model("stories260K-hf") + " --prompt 8 --gen 4");
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("median of 3 runs"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("stories260K-hf"), std::string::npos) << text.out;
}

// Against the first row: speedups, the byte limit (its weight bytes per step / this row's) and
// the decode speedup as a fraction of it; with --alternate the rows run in turns and the
// speedups are medians of same-round ratios, with their range.
TEST(EvalE2E, BenchComparesWithTheFirstRow) {
  QF_REQUIRE_FIXTURES();
  const std::string models = model("stories260K-hf") + " " + model("tinystories-656K-hf");
  for (const bool alternate : {false, true}) {
    SCOPED_TRACE(alternate ? "alternate" : "one model after the other");
    const auto j = run_json("bench " + models + " --prompt 8 --gen 4 --repeat 3 --json" +
                            (alternate ? " --alternate" : ""));
    ASSERT_EQ(j["models"].size(), 2u);
    const auto& first = j["models"][0];
    const auto& second = j["models"][1];
    EXPECT_EQ(first["alternate"], alternate);
    EXPECT_EQ(first["decode_vs_first"], 1.0);
    EXPECT_EQ(first["byte_limit_vs_first"], 1.0);
    const double limit = double(first["weight_bytes_per_token"].get<uint64_t>()) /
                         double(second["weight_bytes_per_token"].get<uint64_t>());
    EXPECT_DOUBLE_EQ(second["byte_limit_vs_first"].get<double>(), limit);
    EXPECT_DOUBLE_EQ(second["decode_of_byte_limit"].get<double>(),
                     second["decode_vs_first"].get<double>() / limit);
    const double d = second["decode_vs_first"].get<double>();
    if (alternate) {
      EXPECT_LE(second["decode_vs_first_min"].get<double>(), d);
      EXPECT_GE(second["decode_vs_first_max"].get<double>(), d);
      // A same-round ratio lies between the extremes of the two models' runs.
      EXPECT_GE(d, second["decode_tok_s_min"].get<double>() / first["decode_tok_s_max"].get<double>());
      EXPECT_LE(d, second["decode_tok_s_max"].get<double>() / first["decode_tok_s_min"].get<double>());
    } else {
      EXPECT_DOUBLE_EQ(d, second["decode_tok_s"].get<double>() / first["decode_tok_s"].get<double>());
      EXPECT_FALSE(second.contains("decode_vs_first_min"));
    }
  }
  // Several prompt lengths: a row per model and length, in turns with --alternate.
  const auto j = run_json("bench " + model("stories260K-hf") +
                          " --prompt 8,24 --gen 4 --repeat 2 --alternate --json");
  ASSERT_EQ(j["models"].size(), 2u);
  EXPECT_EQ(j["models"][0]["prompt"], 8);
  EXPECT_EQ(j["models"][1]["prompt"], 24);
  EXPECT_EQ(j["models"][1]["byte_limit_vs_first"], 1.0);
  // The cache one model holds grows to the longest prompt run so far.
  EXPECT_GE(j["models"][1]["kv_cache_bytes"].get<uint64_t>(),
            j["models"][0]["kv_cache_bytes"].get<uint64_t>());
  const auto text = test::run_qforge("bench --prompt 8 --prompt 16 " + models +
                                     " --gen 4 --repeat 2 --alternate");
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("runs in turns, medians of the same-round ratios"), std::string::npos)
      << text.out;
  EXPECT_NE(text.out.find("byte limit"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("tinystories-656K-hf (prompt 16)"), std::string::npos) << text.out;
  // Several batches: a row per batch, in turns, the batch against batch 1 in the same rounds.
  const auto b = run_json("bench " + model("stories260K-hf") +
                          " --prompt 8 --gen 4 --batch 1,3 --repeat 2 --alternate --json");
  ASSERT_EQ(b["models"].size(), 2u);
  EXPECT_EQ(b["models"][0]["batch"], 1);
  EXPECT_EQ(b["models"][1]["batch"], 3);
  EXPECT_DOUBLE_EQ(b["models"][1]["decode_tok_s"].get<double>(),
                   3 * b["models"][1]["decode_tok_s_per_sequence"].get<double>());
  EXPECT_GT(b["models"][1]["decode_vs_first"].get<double>(), 0.0);
  // Every sequence's cache was reserved for prompt + gen = 12 positions before the clock, the
  // same room as one sequence alone (bench's KV cache covers every sequence run so far).
  const auto one = run_json("bench " + model("stories260K-hf") +
                            " --prompt 8 --gen 4 --batch 1 --repeat 1 --json");
  EXPECT_EQ(b["models"][1]["kv_cache_bytes"].get<uint64_t>(),
            3 * one["kv_cache_bytes"].get<uint64_t>());
  const auto bt = test::run_qforge("bench " + model("stories260K-hf") +
                                   " --prompt 8 --gen 4 --batch 1 --batch 2 --repeat 1");
  ASSERT_EQ(bt.exit_code, 0) << bt.err;
  EXPECT_NE(bt.out.find("stories260K-hf (batch 2)"), std::string::npos) << bt.out;
}

// --vs-gemm: every layer's Linears timed alone after each prefill. Their FLOPs per token are the
// config's (2 x rows x cols per Linear), both rates in GFLOP/s of them, and the prefill's share
// a median of same-run ratios within its range; an MoE model is refused before any run.
TEST(EvalE2E, BenchVsGemmTimesTheProductsAlone) {
  QF_REQUIRE_FIXTURES();
  // stories260K: hidden 64, intermediate 172, 5 layers, 4 KV heads of 8 dims.
  const double flops = 2.0 * 5 * (2 * 64 * 64 + 2 * 32 * 64 + 3 * 172 * 64);
  for (const bool alternate : {false, true}) {
    SCOPED_TRACE(alternate ? "alternate" : "one model after the other");
    const auto j = run_json("bench " + model("stories260K-hf") +
                            " --prompt 32 --gen 2 --repeat 3 --vs-gemm --json" +
                            (alternate ? " --alternate" : ""));
    EXPECT_DOUBLE_EQ(j["linear_gflop_per_token"].get<double>(), flops / 1e9);
    EXPECT_DOUBLE_EQ(j["prefill_linear_gflops"].get<double>(),
                     flops / 1e9 * j["prefill_tok_s"].get<double>());
    EXPECT_GT(j["products_gflops"].get<double>(), 0.0);
    const double f = j["prefill_of_products"].get<double>();
    EXPECT_GT(f, 0.0);
    EXPECT_LE(j["prefill_of_products_min"].get<double>(), f);
    EXPECT_GE(j["prefill_of_products_max"].get<double>(), f);
  }
  const auto plain = run_json("bench " + model("stories260K-hf") + " --prompt 8 --gen 2 --json");
  EXPECT_FALSE(plain.contains("prefill_of_products"));
  const auto text = test::run_qforge("bench " + model("stories260K-hf") +
                                     " --prompt 16 --gen 2 --repeat 1 --vs-gemm");
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("Prefill against its Linear products run alone"), std::string::npos)
      << text.out;
  const fs::path moe = fs::path(QFORGE_SOURCE_DIR) / "tests/data/conformance/mixtral";
  expect_one_line_error(
      test::run_qforge("bench " + test::quote(moe) + " --prompt 8 --gen 2 --vs-gemm"),
      "is an MoE block");
}

TEST(EvalE2E, BadInputIsAOneLineError) {
  QF_REQUIRE_FIXTURES();
  test::ScratchDir tmp;
  test::write_file(tmp / "bad.txt", std::string("Once upon a \xC3\x28 time"));
  expect_one_line_error(test::run_qforge("eval ppl " + model("stories260K-hf") + " --text '" +
                                         (tmp / "bad.txt").string() + "'"),
                        "not valid UTF-8");
  expect_one_line_error(test::run_qforge("eval ppl " + model("stories260K-hf") + " --text " +
                                         corpus() + " --ctx 1024"),
                        "max_position_embeddings");
  // A model directory without its tokenizer files.
  const fs::path src = test::fixtures_dir() / "models" / "stories260K-hf";
  fs::create_directories(tmp / "notok");
  for (const char* f : {"config.json", "model.safetensors"})
    fs::create_symlink(src / f, tmp / "notok" / f);
  const auto r = test::run_qforge("generate '" + (tmp / "notok").string() + "' -p hi -n 2");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  expect_one_line_error(test::run_qforge("bench " + model("stories260K-hf") + " --prompt 500 --gen 50"),
                        "context");
}

TEST(EvalE2E, HelpExplainsFlagsWithDefaults) {
  for (const char* cmd : {"generate", "eval ppl", "eval kl", "bench"}) {
    const auto r = test::run_qforge(std::string(cmd) + " --help");
    EXPECT_EQ(r.exit_code, 0) << cmd;
    EXPECT_NE(r.out.find("default"), std::string::npos) << cmd << "\n" << r.out;
  }
}

TEST(EvalText, Utf8ValidationAndCharacterTruncation) {
  test::ScratchDir tmp;
  test::write_file(tmp / "a.txt", "h\xC3\xA9llo \xE2\x82\xAC!");
  EXPECT_EQ(read_eval_text(tmp / "a.txt", 0), "h\xC3\xA9llo \xE2\x82\xAC!");
  EXPECT_EQ(read_eval_text(tmp / "a.txt", 2), "h\xC3\xA9");
  EXPECT_EQ(read_eval_text(tmp / "a.txt", 7), "h\xC3\xA9llo \xE2\x82\xAC");
  for (const std::string& bad : {std::string("\xC0\xAF"), std::string("\xED\xA0\x80"),
                                std::string("ab\xE2\x82"), std::string("\xF5\x80\x80\x80")}) {
    test::write_file(tmp / "b.txt", bad);
    EXPECT_THROW(read_eval_text(tmp / "b.txt", 0), Error);
  }
  EXPECT_THROW(read_eval_text(tmp / "missing.txt", 0), Error);
}

}  // namespace
}  // namespace qf

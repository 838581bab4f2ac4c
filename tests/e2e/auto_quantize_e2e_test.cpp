// End to end: `quantize --auto` with each target measured by `qforge inspect`, recipes saved and
// replayed byte for byte, and the one-line error of an unreachable target.
#include "plan/budget_solver.h"
#include "test_util.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>

namespace fs = std::filesystem;

namespace qf {
namespace {

using test::model_dir;
using test::quote;

std::string auto_cmd(const fs::path& out) {
  return "quantize " + quote(model_dir("tinystories-656K-hf")) + " -o " + quote(out) + " --calib " +
         quote(test::fixtures_dir() / "corpora" / "tinyshakespeare.txt") +
         " --calib-samples 8 --calib-seq 64 --threads 2 -q --auto";
}

TEST(AutoQuantize, TargetBitsIsMetAndRecipeReplaysIdentically) {
  QF_REQUIRE_FIXTURES();
  test::ScratchDir dir;
  auto r = test::run_qforge(auto_cmd(dir / "a") + " --target-bits 5 --save-recipe " +
                            quote(dir / "plan.json"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = test::inspect_json(dir / "a");
  const double bits = j["bits_per_linear_weight"].get<double>();
  EXPECT_LE(bits, 5.0);
  EXPECT_GT(bits, 4.5);  // the budget is spent, not wasted on NVFP4 everywhere
  ASSERT_TRUE(fs::exists(dir / "plan.json"));
  r = test::run_qforge("quantize " + quote(model_dir("tinystories-656K-hf")) + " -o " + quote(dir / "b") +
                       " -q --recipe " + quote(dir / "plan.json"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(test::read_file(dir / "a" / "model.safetensors"),
            test::read_file(dir / "b" / "model.safetensors"));
  EXPECT_EQ(test::read_file(dir / "a" / "config.json"), test::read_file(dir / "b" / "config.json"));
}

TEST(AutoQuantize, ExactScoresMeetTheTargetToo) {
  QF_REQUIRE_FIXTURES();
  test::ScratchDir dir;
  auto r = test::run_qforge(auto_cmd(dir / "e") + " --auto-exact --target-bits 5");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_LE(test::inspect_json(dir / "e")["bits_per_linear_weight"].get<double>(), 5.0);
  r = test::run_qforge("quantize " + quote(model_dir("tinystories-656K-hf")) + " -o " +
                       quote(dir / "f") + " -q --auto-exact");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("need --auto"), std::string::npos) << r.err;
}

TEST(AutoQuantize, TargetSizeAndFitMemoryAreMet) {
  QF_REQUIRE_FIXTURES();
  test::ScratchDir dir;
  const auto original = test::inspect_json(model_dir("tinystories-656K-hf"));
  // Halfway between the checkpoint and a rough all-4-bit size.
  const uint64_t size = original["total_bytes"].get<uint64_t>() * 6 / 10;
  auto r = test::run_qforge(auto_cmd(dir / "s") + fmt::format(" --target-size {}", size));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_LE(test::inspect_json(dir / "s")["total_bytes"].get<uint64_t>(), size);

  // TinyStories-656K: 2 layers, 4 KV heads of 16.
  const uint64_t kv = kv_cache_bytes(2, 4, 16, 256, 1, 2);
  const uint64_t memory = size + kv;
  r = test::run_qforge(auto_cmd(dir / "m") +
                       fmt::format(" --fit-memory {} --context 256", memory));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_LE(test::inspect_json(dir / "m")["tensor_bytes"].get<uint64_t>() + kv, memory);
}

TEST(AutoQuantize, FitMemoryCountsAnFp8KvCache) {
  QF_REQUIRE_FIXTURES();
  test::ScratchDir dir;
  // A long context: the KV cache dwarfs the model. In FP8 it takes half the BF16 bytes, so this
  // budget (the whole original checkpoint plus an FP8 cache) is met only if the cache is
  // counted in FP8.
  const auto original = test::inspect_json(model_dir("tinystories-656K-hf"));
  const uint64_t kv8 = kv_cache_bytes(2, 4, 16, 100000, 1, 1);
  const uint64_t memory = original["tensor_bytes"].get<uint64_t>() + kv8;
  auto r = test::run_qforge(auto_cmd(dir / "m") +
                            fmt::format(" --fit-memory {} --context 100000", memory));
  EXPECT_NE(r.exit_code, 0);  // a BF16 cache of 2 x kv8 does not fit
  EXPECT_NE(r.err.find("cannot be met"), std::string::npos) << r.err;
  r = test::run_qforge(auto_cmd(dir / "m") +
                       fmt::format(" --fit-memory {} --context 100000 --kv-cache fp8", memory));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_LE(test::inspect_json(dir / "m")["tensor_bytes"].get<uint64_t>() + kv8, memory);
}

// A throughput target for batched decode: 8 sequences at 4096 tokens read 8 KV caches per step
// (the weights once). In BF16 the caches dominate this tiny model's step and no plan reaches
// 1.5x; in FP8 they halve and even the unquantized Linears do.
TEST(AutoQuantize, MinSpeedupCountsTheBatchsKvCacheReads) {
  QF_REQUIRE_FIXTURES();
  test::ScratchDir dir;
  const std::string cmd = auto_cmd(dir / "t") + " --dry-run --json --min-speedup 1.5";
  auto r = test::run_qforge(cmd + " --context 4096 --batch 8");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("--min-speedup 1.5 --context 4096 --batch 8 cannot be met"),
            std::string::npos) << r.err;
  r = test::run_qforge(cmd + " --context 4096 --batch 8 --kv-cache fp8");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_GE(j["auto"]["achieved"].get<double>(), 1.5);
  EXPECT_NE(j["auto"]["solved"].get<std::string>().find("8 sequences per step"),
            std::string::npos) << j["auto"];
  r = test::run_qforge(cmd + " --batch 8");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("needs --context"), std::string::npos) << r.err;
}

TEST(AutoQuantize, ExcludedModulesOnlyKeep) {
  QF_REQUIRE_FIXTURES();
  test::ScratchDir dir;
  const std::string o_proj = "model.layers.0.self_attn.o_proj";
  const auto r = test::run_qforge(auto_cmd(dir / "x") + " --target-bits 6 --exclude '" + o_proj +
                                  "' --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto report = nlohmann::json::parse(r.out);
  bool kept = false;
  for (const auto& e : report["excluded"])
    if (e["name"] == o_proj) {
      kept = true;
      EXPECT_NE(e["reason"].get<std::string>().find("--exclude"), std::string::npos) << e;
    }
  EXPECT_TRUE(kept);
  // The kept F32 o_proj is counted in the budget, so the target still holds.
  EXPECT_LE(test::inspect_json(dir / "x")["bits_per_linear_weight"].get<double>(), 6.0);
}

TEST(AutoQuantize, FourAndAHalfBitsReachableOnBothFixtures) {
  QF_REQUIRE_FIXTURES();
  for (const std::string m : {"stories260K-hf", "tinystories-656K-hf"}) {
    test::ScratchDir dir;
    const auto r = test::run_qforge(
        "quantize " + quote(model_dir(m)) + " -o " + quote(dir / "a") + " --calib " +
        quote(test::fixtures_dir() / "corpora" / "tinyshakespeare.txt") +
        " --calib-samples 8 --calib-seq 64 --threads 2 --auto --target-bits 4.5");
    ASSERT_EQ(r.exit_code, 0) << m << ": " << r.err;
    // NVFP4 alone cannot (4.5 bits plus its tensor scale): the candidates were extended.
    EXPECT_NE(r.err.find("candidates extended with mxfp4,int4,int4:channel"), std::string::npos)
        << r.err;
    EXPECT_LE(test::inspect_json(dir / "a")["bits_per_linear_weight"].get<double>(), 4.5) << m;
    const auto kl = test::run_qforge(
        "eval kl " + quote(model_dir(m)) + " " + quote(dir / "a") + " --text " +
        quote(test::fixtures_dir() / "corpora" / "tinystories_valid_subset.txt") +
        " --max-chars 2000 --json --threads 2");
    ASSERT_EQ(kl.exit_code, 0) << kl.err;
    EXPECT_LT(nlohmann::json::parse(kl.out)["kl_mean"].get<double>(), 0.5) << m;
  }
}

TEST(AutoQuantize, OnlyFormatsTheExportCanWriteAreOffered) {
  QF_REQUIRE_FIXTURES();
  test::ScratchDir dir;
  // compressed-tensors packs INT4 in int32 words: stories260K's 172-input down_proj cannot be
  // INT4 there, so 4.5 bits is out of reach (its floor is FP8 for those), and a reachable target
  // is met without any module silently left unquantized.
  const std::string base = "quantize " + quote(model_dir("stories260K-hf")) + " --calib " +
                           quote(test::fixtures_dir() / "corpora" / "tinyshakespeare.txt") +
                           " --calib-samples 8 --calib-seq 64 --threads 2 -q --auto "
                           "--export compressed-tensors";
  auto r = test::run_qforge(base + " -o " + quote(dir / "x") + " --target-bits 4.5");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("cannot be met: the smallest choice gives 5.2"), std::string::npos) << r.err;
  r = test::run_qforge(base + " -o " + quote(dir / "y") + " --target-bits 5.3 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["modules_excluded"].get<int>(), 0);
  EXPECT_LE(test::inspect_json(dir / "y")["bits_per_linear_weight"].get<double>(), 5.3);
}

TEST(AutoQuantize, UnreachableTargetNamesTheClosest) {
  QF_REQUIRE_FIXTURES();
  test::ScratchDir dir;
  const auto r = test::run_qforge(auto_cmd(dir / "x") + " --target-bits 2");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_EQ(r.err.rfind("qforge: error: --target-bits 2", 0), 0u) << r.err;
  EXPECT_NE(r.err.find("cannot be met"), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_FALSE(fs::exists(dir / "x"));
  const auto r2 = test::run_qforge(auto_cmd(dir / "x"));
  EXPECT_NE(r2.err.find("--auto needs exactly one of"), std::string::npos) << r2.err;
}

size_t count_of(const std::string& s, const std::string& needle) {
  size_t n = 0;
  for (size_t at = s.find(needle); at != std::string::npos; at = s.find(needle, at + 1)) ++n;
  return n;
}

TEST(AutoQuantize, HtmlReportShowsCurvePlanAndSettings) {
  QF_REQUIRE_FIXTURES();
  test::ScratchDir dir;
  const fs::path page = dir / "plan <1>.html";
  auto r = test::run_qforge(auto_cmd(dir / "a") + " --target-bits 5 --json --html " + quote(page));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["html"], page.string());
  const std::string html = test::read_file(page);
  EXPECT_EQ(count_of(html, "class=\"chosen\""), 1u);
  EXPECT_EQ(count_of(html, "class=\"target\""), 1u);
  EXPECT_NE(html.find("target: --target-bits 5"), std::string::npos);
  EXPECT_NE(html.find("<polyline"), std::string::npos);
  const size_t plan = html.find("<table class=\"plan\">");
  ASSERT_NE(plan, std::string::npos);
  const std::string rows = html.substr(plan, html.find("</tbody>", plan) - plan);
  EXPECT_EQ(count_of(rows, "<tr"), j["auto"]["units"].size() + 1);
  EXPECT_NE(html.find("<h2>Modules kept</h2>"), std::string::npos);
  EXPECT_NE(html.find("lm_head"), std::string::npos);
  EXPECT_NE(html.find("tinyshakespeare.txt"), std::string::npos);
  EXPECT_NE(html.find("<th>sequence length</th><td>64</td>"), std::string::npos);
  EXPECT_NE(html.find("<th>formats considered</th><td>nvfp4, fp8"), std::string::npos);
  // Without --json the path is the summary's last line; without --auto --html is refused.
  r = test::run_qforge(auto_cmd(dir / "b") + " --target-bits 5 --dry-run --html " +
                       quote(dir / "b.html"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("html report"), std::string::npos) << r.out;
  EXPECT_TRUE(fs::exists(dir / "b.html"));
  r = test::run_qforge("quantize " + quote(model_dir("tinystories-656K-hf")) + " -o " +
                       quote(dir / "c") + " -q --html " + quote(dir / "c.html"));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("--html needs --auto"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace qf

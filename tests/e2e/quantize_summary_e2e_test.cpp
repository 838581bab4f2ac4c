// End to end: the summary `quantize` ends with says what to do next: the serve command lines
// per engine, what would quantize each skipped module and the head, the --auto choice per unit
// with what was solved, and a wall time that includes calibration, algorithms and --auto.
#include "test_util.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace fs = std::filesystem;

namespace qf {
namespace {

using test::model_dir;
using test::quote;

std::string calib() {
  return " --calib " + quote(test::fixtures_dir() / "corpora" / "tinyshakespeare.txt") +
         " --calib-samples 8 --calib-seq 64";
}

bool has(const std::string& text, const std::string& what) {
  return text.find(what) != std::string::npos;
}

TEST(QuantizeSummary, ServeLinesHeadAndSkippedModuleHints) {
  QF_REQUIRE_FIXTURES();
  test::ScratchDir dir;
  const fs::path out = dir / "nv";
  // Not -q: stderr is not a terminal here, so no bar may be drawn anyway.
  auto r = test::run_qforge("quantize " + quote(model_dir("stories260K-hf")) + " -o " +
                            quote(out) + " --threads 2");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_FALSE(has(r.err, "\r")) << r.err;
  EXPECT_FALSE(has(r.err, "ETA")) << r.err;
  const std::string& s = r.out;
  EXPECT_TRUE(has(s, "vllm serve " + out.string() + " --quantization modelopt_fp4")) << s;
  EXPECT_TRUE(has(s, "python -m sglang.launch_server --model-path " + out.string())) << s;
  EXPECT_TRUE(has(s, "trtllm-serve " + out.string())) << s;
  EXPECT_TRUE(has(s, "--quantize-lm-head quantizes it")) << s;
  // stories260K's 172-input down_proj does not fit NVFP4's block of 16.
  EXPECT_TRUE(has(s, "model.layers.0.mlp.down_proj")) << s;
  EXPECT_TRUE(has(s, "to quantize: --auto picks a format that fits it")) << s;
  EXPECT_TRUE(has(s, "int4:channel")) << s;
  EXPECT_TRUE(has(s, "time (wall, everything)")) << s;
}

TEST(QuantizeSummary, Int4SkippedModulesPointAtChannelGroups) {
  QF_REQUIRE_FIXTURES();
  test::ScratchDir dir;
  auto r = test::run_qforge("quantize " + quote(model_dir("stories260K-hf")) + " -o " +
                            quote(dir / "i4") + " --format int4 --group-size 32 -q");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(has(r.out, "to quantize: --group-size channel")) << r.out;
  // vLLM's ModelOpt loader does not take W4A16_AWQ: said, with the way out.
  EXPECT_TRUE(has(r.out, "does not load")) << r.out;
  EXPECT_TRUE(has(r.out, "--export compressed-tensors")) << r.out;
}

TEST(QuantizeSummary, JsonCarriesServeHintsAndTimes) {
  QF_REQUIRE_FIXTURES();
  test::ScratchDir dir;
  auto r = test::run_qforge("quantize " + quote(model_dir("stories260K-hf")) + " -o " +
                            quote(dir / "g") + " --format int4 --group-size channel --algo gptq" +
                            calib() + " --export compressed-tensors --json --threads 2");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  ASSERT_TRUE(j["serve"].is_array());
  ASSERT_EQ(j["serve"].size(), 3u);
  EXPECT_EQ(j["serve"][0]["engine"], "vLLM");
  EXPECT_EQ(j["serve"][0]["support"], "loads");
  EXPECT_EQ(j["serve"][0]["command"], "vllm serve " + (dir / "g").string());
  EXPECT_EQ(j["serve"][2]["engine"], "TensorRT-LLM");
  EXPECT_EQ(j["serve"][2]["support"], "does not load");
  EXPECT_TRUE(j["lm_head_hint"].get<std::string>().find("--quantize-lm-head") !=
              std::string::npos);
  // The wall time holds calibration, the algorithm and writing.
  const double parts = j["calib_seconds"].get<double>() + j["algo_seconds"].get<double>() +
                       j["write_seconds"].get<double>();
  EXPECT_GT(j["algo_seconds"].get<double>(), 0.0);
  EXPECT_GE(j["seconds"].get<double>(), parts);
}

TEST(QuantizeSummary, AutoPrintsTheSolvedTargetAndTheUnitTable) {
  QF_REQUIRE_FIXTURES();
  test::ScratchDir dir;
  const std::string cmd = "quantize " + quote(model_dir("tinystories-656K-hf")) + " -o " +
                          quote(dir / "a") + calib() + " --threads 2 --auto --target-bits 5";
  auto r = test::run_qforge(cmd + " -q");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string& s = r.out;
  EXPECT_TRUE(has(s, "--auto --target-bits 5: least total predicted error over")) << s;
  EXPECT_TRUE(has(s, "with the Linear weights averaging at most 5 bits per weight")) << s;
  EXPECT_FALSE(has(s, "target value")) << s;
  EXPECT_TRUE(has(s, "predicted error")) << s;
  EXPECT_TRUE(has(s, "model.layers.0.self_attn.q_proj+k_proj+v_proj")) << s;
  EXPECT_TRUE(has(s, "--auto plan")) << s;  // in the time breakdown

  r = test::run_qforge("quantize " + quote(model_dir("tinystories-656K-hf")) + " -o " +
                       quote(dir / "b") + calib() + " --threads 2 --auto --target-bits 5 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  ASSERT_TRUE(j.contains("auto"));
  const auto& a = j["auto"];
  EXPECT_EQ(a["target"], "--target-bits 5");
  EXPECT_LE(a["achieved"].get<double>(), 5.0);
  EXPECT_LE(a["linear_bytes"].get<uint64_t>(), a["budget_bytes"].get<uint64_t>());
  ASSERT_GT(a["units"].size(), 0u);
  for (const auto& u : a["units"]) {
    EXPECT_TRUE(u.contains("unit") && u.contains("format") && u.contains("bits") &&
                u.contains("predicted_error"));
    EXPECT_GE(u["predicted_error"].get<double>(), 0.0);
  }
  EXPECT_GT(j["plan_seconds"].get<double>(), 0.0);
  EXPECT_GE(j["seconds"].get<double>(), j["plan_seconds"].get<double>());
}

TEST(QuantizeSummary, DryRunShowsServeLinesForTheNamedOutput) {
  QF_REQUIRE_FIXTURES();
  auto r = test::run_qforge("quantize " + quote(model_dir("stories260K-hf")) +
                            " --dry-run --format fp8 --activations fp8 -o planned" + calib() +
                            " -q");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(has(r.out, "vllm serve planned --quantization modelopt")) << r.out;
}

}  // namespace
}  // namespace qf

// End to end: every weight format x every calibrated weight algorithm that applies to it
// (mse, awq, gptq, awq+gptq) on both fixture models: the command succeeds, quantizes the
// modules its format can hold, and the engine runs the result with a sane KL. The finer checks
// of each algorithm live in tests/algo and the other e2e files.
#include "test_util.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <string>

namespace qf {
namespace {

using test::eval_kl;
using test::model_dir;
using test::quote;

class AlgorithmMatrixE2E : public ::testing::TestWithParam<const char*> {};

TEST_P(AlgorithmMatrixE2E, EveryFormatWithEveryWeightAlgorithm) {
  QF_REQUIRE_FIXTURES();
  const std::string m = GetParam();
  test::ScratchDir tmp;
  // INT4 groups of 32 divide every in_features of both models except stories260K's 172.
  for (const std::string f : {"nvfp4", "mxfp4", "int4 --group-size 32", "fp8"}) {
    for (const std::string algo : {"mse", "awq", "gptq", "awq+gptq"}) {
      SCOPED_TRACE(m + " " + f + " " + algo);
      const auto out = tmp / (f.substr(0, 5) + algo);
      const auto r = test::run_qforge(
          "quantize " + quote(model_dir(m)) + " -o " + quote(out) + " --format " + f + " --algo " +
          algo + " --calib " + quote(test::fixtures_dir() / "corpora" / "tinyshakespeare.txt") +
          " --calib-samples 8 --calib-seq 64 --seed 2 --threads 2 -q --json");
      ASSERT_EQ(r.exit_code, 0) << r.err;
      const auto summary = nlohmann::json::parse(r.out);
      EXPECT_EQ(summary["algo"], algo);
      // 7 Linears per layer (stories260K: 5 layers, its 172-input down_proj left out of the
      // block formats; TinyStories-656K: 2 layers).
      const int expected = m == "tinystories-656K-hf" ? 14 : f == "fp8" ? 35 : 30;
      EXPECT_EQ(summary["modules_quantized"].get<int>(), expected) << r.out;
      const auto kl = eval_kl(m, out);
      ASSERT_TRUE(kl.contains("kl_mean"));
      EXPECT_TRUE(std::isfinite(kl["kl_mean"].get<double>()));
      EXPECT_GT(kl["kl_mean"].get<double>(), 0.0);
      // Measured (4000 chars): 0.005 (FP8) to 0.13 (MXFP4) on stories260K.
      EXPECT_LT(kl["kl_mean"].get<double>(), 0.35);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, AlgorithmMatrixE2E,
                         ::testing::Values("stories260K-hf", "tinystories-656K-hf"),
                         [](const auto& p) {
                           std::string s = p.param;
                           return s.substr(0, s.find('-'));
                         });

}  // namespace
}  // namespace qf

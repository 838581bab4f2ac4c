// End to end: --algo local_hessian and local_hessian+gptq on both fixture models, both exports:
// the static-block NVFP4 checkpoint loads in the engine and beats round to nearest on eval kl.
#include "io/checkpoint.h"
#include "test_util.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>

namespace fs = std::filesystem;

namespace qf {
namespace {

using test::model_dir;
using test::quote;

const std::string kCalib = test::shakespeare_calib(16, 128, 3) + " -q";

class LocalHessianE2E : public ::testing::TestWithParam<std::string> {};

TEST_P(LocalHessianE2E, BeatsRoundToNearest) {
  QF_REQUIRE_FIXTURES();
  const std::string m = GetParam();
  test::ScratchDir tmp;
  const auto base = test::run_qforge("quantize " + quote(model_dir(m)) + " -o " + quote(tmp / "max") +
                                     " --format nvfp4 -q");
  ASSERT_EQ(base.exit_code, 0) << base.err;
  const double kl_max = test::eval_kl_mean(m, tmp / "max");
  for (const char* algo : {"local_hessian", "local_hessian+gptq"})
    for (const char* exp : {"modelopt", "compressed-tensors"}) {
      SCOPED_TRACE(m + " " + algo + " " + exp);
      const fs::path out = tmp / (std::string(algo) + exp);
      const auto r = test::run_qforge("quantize " + quote(model_dir(m)) + " -o " + quote(out) +
                                      " --format nvfp4 --algo " + algo + " --export " + exp + kCalib);
      ASSERT_EQ(r.exit_code, 0) << r.err;
      const Checkpoint c = Checkpoint::open(out);
      EXPECT_NE(c.find("model.layers.0.self_attn.q_proj.weight_scale"), nullptr);
      const double kl = test::eval_kl_mean(m, out);
      EXPECT_TRUE(std::isfinite(kl));
      EXPECT_LT(kl, kl_max);
    }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, LocalHessianE2E,
                         ::testing::Values("stories260K-hf", "tinystories-656K-hf"),
                         [](const auto& p) {
                           std::string s = p.param;
                           for (char& ch : s)
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return s;
                         });

TEST(LocalHessianE2EErrors, OtherFormatsAreAClearError) {
  QF_REQUIRE_FIXTURES();
  test::ScratchDir tmp;
  const auto r = test::run_qforge("quantize " + quote(model_dir("stories260K-hf")) + " -o " +
                                  quote(tmp / "o") + " --format int4 --algo local_hessian" + kCalib);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("--algo local_hessian needs --format nvfp4"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace qf

// End to end: --algo tune (block-wise quantization-aware tuning) on stories260K through the
// CLI: the export reads back (inspect), KL against the base falls below the init's, the --json
// summary carries the per-layer block errors, and bad flags are refused in one line before
// any work.
#include "test_util.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <map>

namespace fs = std::filesystem;

namespace qf {
namespace {

using test::model_dir;
using test::quote;

const std::string kCalib = test::shakespeare_calib(16, 128, 0);

TEST(BlockTuneE2E, TuningLowersKlBelowTheInitAndTheExportReadsBack) {
  QF_REQUIRE_FIXTURES();
  const std::string m = "stories260K-hf";
  test::ScratchDir tmp;
  const std::string q = "quantize " + quote(model_dir(m)) + " -o ";
  const auto a = test::run_qforge(q + quote(tmp / "max") + " --algo max -q");
  ASSERT_EQ(a.exit_code, 0) << a.err;
  for (const char* exp : {"modelopt", "compressed-tensors"}) {
    SCOPED_TRACE(exp);
    const fs::path out = tmp / (std::string("tune-") + exp);
    const auto r = test::run_qforge(q + quote(out) + " --algo tune --tune-iters 40 --tune-batch 4"
                                    " --json --export " + exp + kCalib);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const auto j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["algo"], "tune");
    ASSERT_EQ(j["tuned_layers"].size(), 5u);
    for (const auto& l : j["tuned_layers"])
      EXPECT_LE(l["block_mse_tuned"].get<double>(), l["block_mse_init"].get<double>());
    const auto in = test::run_qforge("inspect " + quote(out));
    ASSERT_EQ(in.exit_code, 0) << in.err;
    EXPECT_NE(in.out.find("quantized modules            30"), std::string::npos) << in.out;
    EXPECT_LT(test::eval_kl_mean(m, out), test::eval_kl_mean(m, tmp / "max"));
  }
}

TEST(BlockTuneE2E, RefusalsAreOneLineBeforeWork) {
  QF_REQUIRE_FIXTURES();
  test::ScratchDir tmp;
  const std::string q =
      "quantize " + quote(model_dir("stories260K-hf")) + " -o " + quote(tmp / "o");
  const std::map<std::string, std::string> cases = {
      {" --algo tune", "--algo tune needs calibration data"},
      {" --algo tune --tune-iters 0" + kCalib, "--tune-iters must be in [1, 100000], not 0"},
      {" --algo tune --tune-lr 2" + kCalib, "--tune-lr must be in (0, 1]"},
      {" --algo tune --tune-batch 32" + kCalib,
       "--tune-batch 32 needs at least as many calibration windows; --calib-samples is 16"},
      {" --algo gptq --tune-iters 5" + kCalib, "--tune-* flags apply to --algo tune"},
      {" --algo tune --format fp8 --activations fp8" + kCalib,
       "block-wise tuning takes the block formats"},
      {" --algo tune --format int8 --activations int8" + kCalib,
       "--format int8 supports --algo smoothquant or max, not tune"},
      {" --algo tune --export gguf --format q4_0", "GGUF takes max, imatrix or gptq"},
  };
  for (const auto& [flags, msg] : cases) {
    const auto r = test::run_qforge(q + flags);
    EXPECT_EQ(r.exit_code, 1) << flags;
    EXPECT_NE(r.err.find(msg), std::string::npos) << flags << ": " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_FALSE(fs::exists(tmp / "o"));
  }
}

}  // namespace
}  // namespace qf

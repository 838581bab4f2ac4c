// End to end: `qforge tune --from QUANT` starts from a checkpoint quantized before: from a GPTQ
// export it gives the same bytes as `tune --algo gptq` (the start is exactly that export), for
// MXFP4 and for compressed-tensors too; a checkpoint that is not what tune would export (another
// model, format, --exclude, quantized activations) fails with one line before any training.
#include "io/checkpoint.h"
#include "test_util.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>

namespace fs = std::filesystem;

namespace qf {
namespace {

using test::model_dir;
using test::quote;

const std::string kCalib = test::shakespeare_calib(24, 64, 0) + " -q";
const std::string kTrain = " --steps 3 --batch 4 --eval-samples 4 --threads 2 --json";

void expect_same_files(const fs::path& a, const fs::path& b) {
  for (const char* f : {"model.safetensors", "config.json"})
    EXPECT_EQ(test::read_file(a / f), test::read_file(b / f)) << f;
}

class TuneFromE2E : public ::testing::TestWithParam<std::string> {};

TEST_P(TuneFromE2E, StartsExactlyWhereTheCheckpointIs) {
  QF_REQUIRE_FIXTURES();
  test::ScratchDir tmp;
  const std::string base = quote(model_dir("stories260K-hf"));
  const std::string flags = GetParam();
  const auto q = test::run_qforge("quantize " + base + " -o " + quote(tmp / "gptq") + flags +
                                  " --algo gptq" + kCalib);
  ASSERT_EQ(q.exit_code, 0) << q.err;
  const auto from = test::run_qforge("tune " + base + " -o " + quote(tmp / "from") + flags +
                                     " --from " + quote(tmp / "gptq") + kTrain + kCalib);
  ASSERT_EQ(from.exit_code, 0) << from.err;
  const auto direct = test::run_qforge("tune " + base + " -o " + quote(tmp / "direct") + flags +
                                       " --algo gptq" + kTrain + kCalib);
  ASSERT_EQ(direct.exit_code, 0) << direct.err;
  const nlohmann::json jf = nlohmann::json::parse(from.out), jd = nlohmann::json::parse(direct.out);
  if (flags.find("compressed-tensors") == std::string::npos) {
    EXPECT_EQ(jf["eval_kl_before"], jd["eval_kl_before"]);
    EXPECT_EQ(jf["eval_kl_after"], jd["eval_kl_after"]);
    expect_same_files(tmp / "from", tmp / "direct");
    return;
  }
  // compressed-tensors stores 1 / global_scale: the engine's inverse of it (which --from
  // trains with) may differ from the quantizer's own by an ulp, so the runs agree to rounding;
  // the stored values come back unchanged.
  EXPECT_NEAR(jf["eval_kl_before"].get<double>(), jd["eval_kl_before"].get<double>(), 1e-6);
  const Checkpoint a = Checkpoint::open(tmp / "gptq"), b = Checkpoint::open(tmp / "from");
  int globals = 0;
  for (const CheckpointTensor& t : a.tensors()) {
    if (!t.name.ends_with(".weight_global_scale")) continue;
    const CheckpointTensor* u = b.find(t.name);
    ASSERT_NE(u, nullptr) << t.name;
    const TensorData x = read_tensor(t), y = read_tensor(*u);
    EXPECT_EQ(std::memcmp(x.view.data, y.view.data, 4), 0) << t.name;
    ++globals;
  }
  EXPECT_GT(globals, 0);
}

INSTANTIATE_TEST_SUITE_P(Formats, TuneFromE2E,
                         ::testing::Values(" --format nvfp4", " --format mxfp4",
                                           " --format nvfp4 --export compressed-tensors"));

TEST(TuneFromE2EErrors, ACheckpointTuneWouldNotWriteFailsWithOneLine) {
  QF_REQUIRE_FIXTURES();
  test::ScratchDir tmp;
  const std::string base = quote(model_dir("stories260K-hf"));
  const auto q = test::run_qforge("quantize " + base + " -o " + quote(tmp / "q") +
                                  " --format nvfp4 -q");
  ASSERT_EQ(q.exit_code, 0) << q.err;
  const std::string from = " --from " + quote(tmp / "q");
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"tune " + base + from + " --algo gptq", "exclude each other"},
      {"tune " + base + from + " --format mxfp4", "not --format mxfp4"},
      {"tune " + base + from + " --exclude '*q_proj'", "q_proj is NVFP4 there but unquantized"},
      {"tune " + base + from + " --activations nvfp4", "quantized activations"},
      {"tune " + base + " --from " + quote(tmp / "missing"), "is not a directory"},
      {"tune " + base + " --from " + base, "is unquantized there"},
      {"tune " + quote(model_dir("tinystories-656K-hf")) + from, "not a quantization of"},
  };
  for (const auto& [cmd, message] : bad) {
    const auto r = test::run_qforge(cmd + " -o " + quote(tmp / "o") + " --steps 2" + kCalib);
    EXPECT_NE(r.exit_code, 0) << cmd;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << cmd << ": " << r.err;
    EXPECT_NE(r.err.find(message), std::string::npos) << cmd << ": " << r.err;
    EXPECT_FALSE(fs::exists(tmp / "o")) << cmd;
  }
}

}  // namespace
}  // namespace qf

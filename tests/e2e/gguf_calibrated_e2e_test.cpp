// The importance-weighted and calibrated GGUF paths on a fixture Llama: `--calib --algo gptq`
// and `--calib --algo imatrix` give lower KL than round to nearest, `--imatrix FILE` (a
// llama-imatrix output committed as a fuzz seed) is applied to every blk.* tensor, and the
// refusals name the problem.
#include "test_util.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

namespace qf {
namespace {

namespace fs = std::filesystem;

// Calibration text disjoint from eval_kl's (the first 4000 characters of the same corpus).
fs::path calib_text(const test::ScratchDir& tmp) {
  std::ifstream in(test::fixtures_dir() / "corpora" / "tinystories_valid_subset.txt", std::ios::binary);
  std::string s{std::istreambuf_iterator<char>(in), {}};
  const fs::path p = tmp / "calib.txt";
  test::write_file(p, s.substr(200000, 60000));
  return p;
}

nlohmann::json quantize(const std::string& args) {
  const auto r = test::run_qforge("quantize " + test::quote(test::model_dir("stories260K-hf")) +
                                  " --export gguf --json " + args);
  EXPECT_EQ(r.exit_code, 0) << r.err << r.out;
  return r.exit_code == 0 ? nlohmann::json::parse(r.out) : nlohmann::json{};
}

TEST(GgufCalibratedE2e, CalibratedQ4_0AndNvfp4BeatRoundToNearest) {
  QF_REQUIRE_FIXTURES();
  test::ScratchDir tmp;
  const std::string calib = " --calib " + test::quote(calib_text(tmp)) + " --calib-samples 32 --calib-seq 128";
  for (const std::string format : {"q4_0", "nvfp4"}) {
    SCOPED_TRACE(format);
    const fs::path rtn = tmp / (format + "-rtn.gguf"), gptq = tmp / (format + "-gptq.gguf"),
                   imat = tmp / (format + "-imat.gguf");
    quantize("--format " + format + " -o " + test::quote(rtn));
    const auto j = quantize("--format " + format + " -o " + test::quote(gptq) + calib);
    EXPECT_EQ(j["algo"], "gptq");  // the default with --calib
    EXPECT_GT(j["calib_tokens"].get<int64_t>(), 0);
    int gptq_tensors = 0;
    for (const auto& t : j["tensors"])
      gptq_tensors += t["note"].get<std::string>().find("GPTQ") != std::string::npos;
    EXPECT_EQ(gptq_tensors, 5 * 6);  // every blk.* Linear but ffn_down (row 172: a float fallback)
    quantize("--format " + format + " -o " + test::quote(imat) + calib + " --algo imatrix");
    const double kl_rtn = test::eval_kl("stories260K-hf", rtn)["kl_mean"].get<double>();
    const double kl_gptq = test::eval_kl("stories260K-hf", gptq)["kl_mean"].get<double>();
    const double kl_imat = test::eval_kl("stories260K-hf", imat)["kl_mean"].get<double>();
    EXPECT_LT(kl_gptq, 0.9 * kl_rtn) << kl_gptq << " vs " << kl_rtn;
    EXPECT_LT(kl_imat, kl_rtn) << kl_imat << " vs " << kl_rtn;
  }
}

TEST(GgufCalibratedE2e, ImatrixFileFromLlamaImatrixIsApplied) {
  QF_REQUIRE_FIXTURES();
  test::ScratchDir tmp;
  const fs::path imatrix =
      fs::path(QFORGE_SOURCE_DIR) / "tests/fuzz/corpus/imatrix/stories260K.gguf";
  const auto j = quantize("--format q4_0 -o " + test::quote(tmp / "a.gguf") + " --imatrix " +
                          test::quote(imatrix));
  EXPECT_EQ(j["algo"], "imatrix");
  EXPECT_EQ(j["imatrix_entries"], 5 * 6);
  // The legacy format of the same tool reads too.
  const auto k = quantize("--format q4_0 -o " + test::quote(tmp / "b.gguf") + " --imatrix " +
                          test::quote(imatrix.parent_path() / "stories260K.dat"));
  EXPECT_EQ(k["imatrix_entries"], 5 * 6);
}

TEST(GgufCalibratedE2e, Refusals) {
  QF_REQUIRE_FIXTURES();
  test::ScratchDir tmp;
  const std::string base = "quantize " + test::quote(test::model_dir("tinystories-656K-hf")) +
                           " -o " + test::quote(tmp / "x.gguf") + " --export gguf --format q4_0 ";
  // An importance matrix of another model: rows of 64 against rows of 128.
  auto r = test::run_qforge(base + "--imatrix " +
                            test::quote(fs::path(QFORGE_SOURCE_DIR) /
                                        "tests/fuzz/corpus/imatrix/stories260K.gguf"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("--imatrix: blk.0.attn_q.weight has 64 values"), std::string::npos) << r.err;
  r = test::run_qforge(base + "--algo gptq");
  EXPECT_NE(r.err.find("--algo gptq needs --calib"), std::string::npos) << r.err;
  r = test::run_qforge(base + "--calib x.txt --calib-quantized-inputs");
  EXPECT_NE(r.err.find("--calib-quantized-inputs is not supported"), std::string::npos) << r.err;
  r = test::run_qforge(base + "--algo awq");
  EXPECT_NE(r.err.find("GGUF takes max, imatrix or gptq"), std::string::npos) << r.err;
  r = test::run_qforge("quantize " + test::quote(test::model_dir("stories260K-hf")) + " -o " +
                       test::quote(tmp / "y") + " --format nvfp4 --imatrix x.dat");
  EXPECT_NE(r.err.find("--imatrix (a llama.cpp importance matrix) needs --export gguf"),
            std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(tmp / "x.gguf"));
}

}  // namespace
}  // namespace qf

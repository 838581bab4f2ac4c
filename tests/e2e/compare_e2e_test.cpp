// `qforge compare`: one run over several variants gives each the numbers `eval kl` gives it
// alone, plus sizes, and writes the HTML page; and `bench` over several models with repetitions.
#include "test_util.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace fs = std::filesystem;

namespace qf {
namespace {

using test::quote;

TEST(CompareCli, VariantsMatchEvalKlAndTheReportIsWritten) {
  QF_REQUIRE_FIXTURES();
  test::ScratchDir dir;
  const fs::path m = test::model_dir("stories260K-hf");
  ASSERT_EQ(test::run_qforge("quantize " + quote(m) + " -o " + quote(dir / "nvfp4") + " -q").exit_code, 0);
  ASSERT_EQ(test::run_qforge("quantize " + quote(m) + " -o " + quote(dir / "fp8") +
                             " --format fp8 -q").exit_code, 0);
  const std::string text =
      " --text " + quote(test::fixtures_dir() / "corpora" / "tinystories_valid_subset.txt") +
      " --max-chars 4000 --ctx 128";
  const auto r = test::run_qforge("compare " + quote(m) + " " + quote(dir / "nvfp4") + " " +
                                  quote(dir / "fp8") + text + " --json --html " +
                                  quote(dir / "report.html"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["variants"].size(), 2u);
  for (int k = 0; k < 2; ++k) {
    const auto& v = j["variants"][size_t(k)];
    const auto kl = test::run_qforge("eval kl " + quote(m) + " " + quote(v["model"].get<std::string>()) +
                                     text + " --json");
    ASSERT_EQ(kl.exit_code, 0) << kl.err;
    const auto e = nlohmann::json::parse(kl.out);
    EXPECT_EQ(v["kl_mean"], e["kl_mean"]);
    EXPECT_EQ(v["kl_p99"], e["kl_p99"]);
    EXPECT_EQ(v["top1"], e["top1"]);
    EXPECT_EQ(v["ppl"], e["ppl_quant"]);
    EXPECT_EQ(j["base"]["ppl"], e["ppl_base"]);
    EXPECT_LT(v["bytes"].get<uint64_t>(), j["base"]["bytes"].get<uint64_t>());
  }
  const std::string html = test::read_file(dir / "report.html");
  EXPECT_NE(html.find("<svg"), std::string::npos);
  EXPECT_NE(html.find(">nvfp4<"), std::string::npos);
  EXPECT_NE(html.find(">fp8<"), std::string::npos);
  const auto table = test::run_qforge("compare " + quote(m) + " " + quote(dir / "fp8") + text);
  ASSERT_EQ(table.exit_code, 0) << table.err;
  EXPECT_NE(table.out.find("KL mean"), std::string::npos) << table.out;
}

}  // namespace
}  // namespace qf

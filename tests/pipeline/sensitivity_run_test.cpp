// Sensitivity analysis on real checkpoints: proxy and exact scores on both fixture models, a
// synthetic sensitive layer ranked first by both, and the `qforge sensitivity` command.
#include "io/checkpoint.h"
#include "io/safetensors_writer.h"
#include "pipeline/sensitivity_run.h"
#include "test_util.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstring>
#include <iostream>

namespace fs = std::filesystem;

namespace qf {
namespace {

using test::model_dir;
using test::quote;

fs::path calib_file() { return test::fixtures_dir() / "corpora" / "tinyshakespeare.txt"; }

SensitivityOptions small_options(bool exact) {
  SensitivityOptions o;
  o.calib.files = {calib_file()};
  o.calib.samples = 8;
  o.calib.seq_len = 64;
  o.calib.seed = 1;
  o.formats = {*parse_format_choice("nvfp4"), *parse_format_choice("fp8")};
  o.exact = exact;
  o.threads = 2;
  return o;
}

class SensitivityFixtures : public ::testing::TestWithParam<std::string> {};

TEST_P(SensitivityFixtures, ProxyAndExactAgreeInRank) {
  QF_REQUIRE_FIXTURES();
  const SensitivityResult r = run_sensitivity(SourceModel::open(model_dir(GetParam())), small_options(true));
  ASSERT_FALSE(r.units.empty());
  ASSERT_EQ(r.proxy.size(), r.units.size());
  ASSERT_EQ(r.exact.size(), r.units.size());
  for (size_t u = 0; u < r.units.size(); ++u)
    for (size_t c = 0; c < r.units[u].candidates.size(); ++c) {
      EXPECT_TRUE(std::isfinite(r.proxy[u][c]) && r.proxy[u][c] >= 0) << r.units[u].name;
      EXPECT_TRUE(std::isfinite(r.exact[u][c]) && r.exact[u][c] >= 0) << r.units[u].name;
      if (r.units[u].candidates[c].choice.is_keep()) {
        EXPECT_EQ(r.exact[u][c], 0.0);
      }
    }
  // Monotone: more bytes never scores worse.
  for (size_t u = 0; u < r.units.size(); ++u)
    for (size_t a = 0; a < r.units[u].candidates.size(); ++a)
      for (size_t b = 0; b < r.units[u].candidates.size(); ++b)
        if (r.units[u].candidates[a].bytes > r.units[u].candidates[b].bytes) {
          EXPECT_LE(r.monotone[u][a], r.monotone[u][b]);
        }
  size_t rows = 0;
  for (const auto& u : r.units)
    for (const auto& c : u.candidates) rows += c.choice.is_keep() ? 0 : 1;
  EXPECT_EQ(r.report.rows.size(), rows);
  ASSERT_FALSE(std::isnan(r.report.rank_correlation));
  std::cout << GetParam() << ": proxy vs exact Spearman " << r.report.rank_correlation << "\n";
  // The proxy must carry information about the exact measure (measured with these options:
  // 0.85 on stories260K, 0.47 on TinyStories-656K, where the layer-local proxy still
  // overweights o_proj/down_proj against q/k/v; 0.80 and 0.29 before the errors were taken
  // relative to the residual stream).
  EXPECT_GT(r.report.rank_correlation, 0.3);
}

INSTANTIATE_TEST_SUITE_P(Models, SensitivityFixtures,
                         ::testing::Values("stories260K-hf", "tinystories-656K-hf"),
                         [](const auto& p) {
                           return p.param == "stories260K-hf" ? std::string("stories260K")
                                                              : std::string("tinystories656K");
                         });

// A copy of stories260K whose layer-2 q/k/v weights have an outlier input column in every NVFP4
// block: max calibration then crushes the other weights of each block. (Naturally that unit ranks
// fourth of the NVFP4 rows.)
fs::path write_sensitive_copy(const fs::path& dir, const std::string& prefix) {
  const fs::path src = model_dir("stories260K-hf");
  fs::create_directories(dir);
  for (const char* f : {"config.json", "tokenizer.model", "tokenizer_config.json"})
    fs::copy_file(src / f, dir / f);
  const Checkpoint c = Checkpoint::open(src);
  std::vector<TensorSpec> specs;
  for (const auto& t : c.tensors()) specs.push_back({t.name, t.entry->dtype, t.entry->shape});
  SafetensorsWriter w(dir / "model.safetensors", specs);
  for (const auto& t : c.tensors()) {
    const TensorView v = t.file->view(*t.entry);
    std::vector<std::byte> bytes(v.data, v.data + v.nbytes);
    if (t.name.rfind(prefix, 0) == 0 && t.name.find("o_proj") == std::string::npos &&
        t.name.find("_proj.weight") != std::string::npos) {
      EXPECT_EQ(v.dtype, DType::F32);
      auto* f = reinterpret_cast<float*>(bytes.data());
      for (int64_t r = 0; r < v.rows(); ++r)
        for (int64_t col = 0; col < v.cols(); col += 16) f[r * v.cols() + col] *= 40.f;
    }
    w.write(t.name, bytes);
  }
  w.finish();
  return dir;
}

TEST(Sensitivity, SyntheticSensitiveLayerRanksFirst) {
  QF_REQUIRE_FIXTURES();
  test::ScratchDir dir;
  const std::string module = "model.layers.2.self_attn.q_proj+k_proj+v_proj";
  const fs::path m = write_sensitive_copy(dir / "model", "model.layers.2.self_attn.");
  const SensitivityResult r = run_sensitivity(SourceModel::open(m), small_options(true));
  // The most sensitive NVFP4 row, by proxy and by exact.
  const SensitivityRow* top_proxy = nullptr;
  const SensitivityRow* top_exact = nullptr;
  for (const auto& row : r.report.rows) {
    if (row.format != "nvfp4") continue;
    if (!top_proxy || row.proxy > top_proxy->proxy) top_proxy = &row;
    if (!top_exact || *row.exact > *top_exact->exact) top_exact = &row;
  }
  ASSERT_TRUE(top_proxy && top_exact);
  EXPECT_EQ(top_proxy->name, module);
  EXPECT_EQ(top_exact->name, module);
  // And through the CLI, the table's first line names it.
  const auto out = test::run_qforge("sensitivity " + quote(m) + " --calib " + quote(calib_file()) +
                                    " --calib-samples 8 --calib-seq 64 --formats nvfp4 --json -q");
  ASSERT_EQ(out.exit_code, 0) << out.err;
  const auto j = nlohmann::json::parse(out.out);
  ASSERT_FALSE(j["modules"].empty());
  EXPECT_EQ(j["modules"][0]["name"], module);
}

TEST(SensitivityCli, TableJsonAndHtml) {
  QF_REQUIRE_FIXTURES();
  test::ScratchDir dir;
  const std::string base = "sensitivity " + quote(model_dir("tinystories-656K-hf")) + " --calib " +
                           quote(calib_file()) + " --calib-samples 4 --calib-seq 32 --threads 2";
  auto r = test::run_qforge(base + " --exact --json -q --html " + quote(dir / "report.html"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  ASSERT_TRUE(j["modules"].is_array());
  EXPECT_FALSE(j["modules"].empty());
  EXPECT_TRUE(j["rank_correlation"].is_number());
  EXPECT_TRUE(j["modules"][0]["exact"].is_number());
  for (const char* key : {"calib_tokens", "calib_seconds", "proxy_seconds", "exact_seconds"})
    EXPECT_TRUE(j[key].is_number()) << key;
  const std::string html = test::read_file(dir / "report.html");
  EXPECT_NE(html.find("<svg"), std::string::npos);
  EXPECT_EQ(html.find("http://"), std::string::npos);
  r = test::run_qforge(base + " --formats nvfp4,mxfp4,fp8,int4 -q");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("mxfp4"), std::string::npos) << r.out;
  // Fewer proxy rows: same modules, finite non-negative scores.
  r = test::run_qforge(base + " --proxy-rows 16 --json -q");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto few = nlohmann::json::parse(r.out);
  ASSERT_EQ(few["modules"].size(), j["modules"].size());
  for (const auto& m : few["modules"]) EXPECT_GE(m["proxy"].get<double>(), 0.0);
  r = test::run_qforge(base + " --proxy-rows 0 -q");
  EXPECT_NE(r.exit_code, 0);
  r = test::run_qforge(base + " --formats nvfp5 -q");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("--formats: unknown format 'nvfp5'"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace qf

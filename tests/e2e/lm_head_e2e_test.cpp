// End to end: `quantize --quantize-lm-head` on the tied stories260K fixture, both exports: the
// head is written quantized under lm_head, the embedding keeps its dtype, config.json is untied,
// neither quantization config names lm_head as excluded, the engine loads and runs the quantized
// head (eval kl sane), and the default still keeps the head.
#include "engine/weights.h"
#include "io/checkpoint.h"
#include "kernels/linear.h"
#include "test_util.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>

namespace fs = std::filesystem;

namespace qf {
namespace {

const std::string kModel = "stories260K-hf";
fs::path model_dir() { return test::fixtures_dir() / "models" / kModel; }
std::string q(const fs::path& p) { return fmt::format("'{}'", p.string()); }

nlohmann::json read_json(const fs::path& p) {
  std::ifstream f(p);
  return nlohmann::json::parse(f);
}

bool names(const nlohmann::json& list, const std::string& module) {
  return std::find(list.begin(), list.end(), module) != list.end();
}

nlohmann::json eval_kl(const fs::path& out) {
  const auto r = test::run_qforge(
      "eval kl " + q(model_dir()) + " " + q(out) + " --text " +
      q(test::fixtures_dir() / "corpora" / "tinystories_valid_subset.txt") +
      " --max-chars 4000 --json");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return r.exit_code == 0 ? nlohmann::json::parse(r.out) : nlohmann::json::object();
}

TEST(LmHeadE2E, QuantizedHeadIsUntiedLoadedAndSane) {
  QF_REQUIRE_FIXTURES();
  test::ScratchDir tmp;
  ASSERT_TRUE(read_json(model_dir() / "config.json").value("tie_word_embeddings", false));
  const auto d = test::run_qforge("quantize " + q(model_dir()) + " -o " + q(tmp / "default") +
                                  " --format nvfp4 -q --json");
  ASSERT_EQ(d.exit_code, 0) << d.err;
  EXPECT_FALSE(nlohmann::json::parse(d.out)["lm_head_quantized"].get<bool>());
  const double kl_default = eval_kl(tmp / "default").value("kl_mean", NAN);
  ASSERT_TRUE(std::isfinite(kl_default));
  {
    // The default keeps the head: tied, no lm_head tensors, lm_head excluded.
    const Checkpoint c = Checkpoint::open(tmp / "default");
    EXPECT_EQ(c.find("lm_head.weight_scale"), nullptr);
    EXPECT_TRUE(read_json(tmp / "default" / "config.json")["tie_word_embeddings"].get<bool>());
    EXPECT_TRUE(names(read_json(tmp / "default" / "hf_quant_config.json")["quantization"]
                          ["exclude_modules"], "lm_head"));
  }
  for (const char* exp : {"modelopt", "compressed-tensors"}) {
    SCOPED_TRACE(exp);
    const fs::path out = tmp / exp;
    const auto r = test::run_qforge("quantize " + q(model_dir()) + " -o " + q(out) +
                                    " --format nvfp4 --quantize-lm-head --json --export " + exp);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_TRUE(nlohmann::json::parse(r.out)["lm_head_quantized"].get<bool>());
    EXPECT_NE(r.err.find("lm_head is quantized"), std::string::npos) << r.err;

    const Checkpoint c = Checkpoint::open(out);
    const CheckpointTensor* scale = c.find("lm_head.weight_scale");
    ASSERT_NE(scale, nullptr);
    EXPECT_EQ(scale->entry->dtype, DType::F8_E4M3);
    const CheckpointTensor* embed = c.find("model.embed_tokens.weight");
    ASSERT_NE(embed, nullptr);
    EXPECT_EQ(embed->entry->dtype, DType::F32);  // the fixture's dtype, unquantized
    EXPECT_EQ(embed->entry->shape, (Shape{512, 64}));

    const auto config = read_json(out / "config.json");
    EXPECT_FALSE(config["tie_word_embeddings"].get<bool>());
    const auto& qc = config["quantization_config"];
    EXPECT_FALSE(names(qc["ignore"], "lm_head"));
    // llm-compressor names only Linears in `ignore`; ModelOpt lists the embedding too.
    EXPECT_EQ(names(qc["ignore"], "model.embed_tokens"), std::string(exp) == "modelopt");
    if (std::string(exp) == "modelopt") {
      const auto hq = read_json(out / "hf_quant_config.json")["quantization"];
      EXPECT_FALSE(names(hq["exclude_modules"], "lm_head"));
      EXPECT_TRUE(names(hq["exclude_modules"], "model.embed_tokens"));
    }

    // The engine reads the head as NVFP4 (the quantized matrix-vector kernels).
    const ModelWeights mw = ModelWeights::load(out);
    EXPECT_EQ(mw.lm_head.w.format, WeightFormat::nvfp4);
    EXPECT_EQ(mw.lm_head.w.rows, 512);
    EXPECT_EQ(mw.embed.dtype, DType::F32);

    // Sane: finite, small, and a little worse than with the head kept (it adds error).
    const auto kl = eval_kl(out);
    const double kl_mean = kl.value("kl_mean", NAN);
    EXPECT_TRUE(std::isfinite(kl_mean));
    EXPECT_GE(kl_mean, kl_default * 0.9);
    EXPECT_LT(kl_mean, 0.5);
    EXPECT_GT(kl.value("top1", 0.0), 0.5) << kl.dump();
  }
}

TEST(LmHeadE2E, NotDivisibleIsAClearError) {
  QF_REQUIRE_FIXTURES();
  test::ScratchDir tmp;
  // hidden_size 64 is not a multiple of the INT4 group of 128.
  const auto r = test::run_qforge("quantize " + q(model_dir()) + " -o " + q(tmp / "o") +
                                  " --format int4 --quantize-lm-head -q");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("lm_head cannot be quantized"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace qf

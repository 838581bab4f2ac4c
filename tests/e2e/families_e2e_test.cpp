// Every family (dense and mixture-of-experts) end to end through the CLI on the conformance models (tiny random weights,
// vocab 256, given a byte-level tokenizer here): weight-only NVFP4 in both exports, AWQ with
// calibration (which exercises folding into norms, or pre_quant_scale where a family has no
// foldable norm), the engine loading each export, and `eval kl` against the original.
#include "io/safetensors.h"
#include "io/safetensors_writer.h"
#include "test_util.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>

namespace qf {
namespace {

namespace fs = std::filesystem;
using test::quote;
using test::run_qforge;

class FamilyE2E : public ::testing::TestWithParam<std::string> {};

TEST_P(FamilyE2E, QuantizeEvalBothExportsAndAwq) {
  QF_REQUIRE_FIXTURES();
  const fs::path src = fs::path(QFORGE_SOURCE_DIR) / "tests/data/conformance" / GetParam();
  if (!fs::exists(src)) GTEST_SKIP() << "conformance data missing";
  test::ScratchDir dir;
  test::copy_conformance_case(src, dir / "model");
  const fs::path fx = test::fixtures_dir() / "corpora";
  const std::string text = " --text " + quote(fx / "tinystories_valid_subset.txt") +
                           " --max-chars 3000 --ctx 128 --json";
  const std::string calib = " --calib " + quote(fx / "tinyshakespeare.txt") +
                            " --calib-samples 4 --calib-seq 64";
  struct Run {
    std::string name, flags;
  };
  for (const Run& run : {Run{"nvfp4-modelopt", ""}, Run{"nvfp4-ct", "--export compressed-tensors"},
                         Run{"awq-modelopt", "--algo awq" + calib},
                         Run{"awq-ct", "--algo awq --export compressed-tensors" + calib},
                         Run{"fp8-w8a8", "--format fp8 --activations fp8" + calib}}) {
    SCOPED_TRACE(run.name);
    const fs::path out = dir / run.name;
    const auto q = run_qforge("quantize " + quote(dir / "model") + " -o " + quote(out) + " " +
                              run.flags + " --json -q");
    ASSERT_EQ(q.exit_code, 0) << q.err;
    const auto summary = nlohmann::json::parse(q.out);
    EXPECT_EQ(summary["modules_excluded"], 0) << q.out;
    const auto kl = run_qforge("eval kl " + quote(dir / "model") + " " + quote(out) + text);
    ASSERT_EQ(kl.exit_code, 0) << kl.err;
    const auto j = nlohmann::json::parse(kl.out);
    const double mean = j["kl_mean"].get<double>();
    EXPECT_TRUE(std::isfinite(mean) && mean > 0 && mean < 0.5) << kl.out;
    EXPECT_GT(j["top1"].get<double>(), 0.5) << kl.out;
  }
}

// DeepSeek-V3 end to end on both conformance cases, with a multi-token-prediction layer added
// as hub checkpoints hold it: every Linear whose in_features fits the block is quantized
// (experts, shared experts, the MLA projections), AWQ folds into the latent norms, the
// MTP tensors are copied, the engine loads each export, and the FP8 KV cache is refused.
class DeepSeekE2E : public ::testing::TestWithParam<std::string> {};

TEST_P(DeepSeekE2E, QuantizeEvalAwqAndCopiedMtpLayer) {
  QF_REQUIRE_FIXTURES();
  const fs::path src = fs::path(QFORGE_SOURCE_DIR) / "tests/data/conformance" / GetParam();
  if (!fs::exists(src)) GTEST_SKIP() << "conformance data missing";
  test::ScratchDir dir;
  const fs::path model = dir / "model";
  fs::create_directories(model);
  fs::copy_file(src / "config.json", model / "config.json");
  test::write_file(model / "tokenizer.json", test::byte_level_tokenizer());
  const std::string mtp = "model.layers.3.eh_proj.weight";
  {
    const SafetensorsFile in = SafetensorsFile::open(src / "model.safetensors");
    std::vector<TensorSpec> specs;
    for (const auto& e : in.tensors()) specs.push_back({e.name, e.dtype, e.shape});
    specs.push_back({mtp, DType::BF16, {64, 128}});
    SafetensorsWriter out(model / "model.safetensors", specs);
    for (const auto& e : in.tensors()) out.write(e.name, std::span(in.view(e).data, in.view(e).nbytes));
    out.write(mtp, std::vector<std::byte>(size_t(64 * 128 * 2), std::byte{0x3c}));
    out.finish();
  }
  // deepseek_v3_q_direct's experts have moe_intermediate_size 24: their down_proj (2 layers x 8)
  // cannot take blocks of 16.
  const int excluded = GetParam() == "deepseek_v3_q_direct" ? 16 : 0;
  const fs::path fx = test::fixtures_dir() / "corpora";
  const std::string text = " --text " + quote(fx / "tinystories_valid_subset.txt") +
                           " --max-chars 3000 --ctx 128 --json";
  const std::string calib = " --calib " + quote(fx / "tinyshakespeare.txt") +
                            " --calib-samples 4 --calib-seq 64";
  for (const auto& [name, flags] : std::vector<std::pair<std::string, std::string>>{
           {"nvfp4", ""},
           {"awq-ct", "--algo awq --export compressed-tensors" + calib},
           {"w4a4", "--qformat nvfp4" + calib},
           {"fp8-w8a8", "--format fp8 --activations fp8" + calib}}) {
    SCOPED_TRACE(name);
    const fs::path out = dir / name;
    const auto q = run_qforge("quantize " + quote(model) + " -o " + quote(out) + " " + flags +
                              " --json -q");
    ASSERT_EQ(q.exit_code, 0) << q.err;
    const auto summary = nlohmann::json::parse(q.out);
    EXPECT_EQ(summary["modules_excluded"], name == "fp8-w8a8" ? 0 : excluded) << q.out;
    const SafetensorsFile written = SafetensorsFile::open(out / "model.safetensors");
    EXPECT_NE(written.find(mtp), nullptr);
    if (name == "awq-ct") {
      // compressed-tensors has no pre_quant_scale: q_b_proj's and kv_b_proj's AWQ scales are
      // folded into the latent norms.
      const SafetensorsFile orig = SafetensorsFile::open(src / "model.safetensors");
      for (const std::string norm : {"kv_a_layernorm", "q_a_layernorm"}) {
        const std::string t = "model.layers.1.self_attn." + norm + ".weight";
        if (!orig.find(t)) continue;  // no q LoRA
        const TensorView a = orig.view(*orig.find(t)), b = written.view(*written.find(t));
        ASSERT_EQ(a.nbytes, b.nbytes);
        EXPECT_NE(std::memcmp(a.data, b.data, a.nbytes), 0) << t;
      }
    }
    const auto kl = run_qforge("eval kl " + quote(model) + " " + quote(out) + text);
    ASSERT_EQ(kl.exit_code, 0) << kl.err;
    const auto j = nlohmann::json::parse(kl.out);
    const double mean = j["kl_mean"].get<double>();
    EXPECT_TRUE(std::isfinite(mean) && mean > 0 && mean < 0.5) << kl.out;
  }
  const auto kv = run_qforge("quantize " + quote(model) + " -o " + quote(dir / "kv") +
                             " --kv-cache fp8" + calib + " -q");
  EXPECT_NE(kv.exit_code, 0);
  EXPECT_NE(kv.err.find("multi-head latent attention"), std::string::npos) << kv.err;
}

INSTANTIATE_TEST_SUITE_P(Conformance, DeepSeekE2E,
                         ::testing::Values("deepseek_v3", "deepseek_v3_q_direct"),
                         [](const auto& param_info) { return param_info.param; });

// generate stops with a message at the model's context limit instead of failing or running on.
TEST(GenerateE2E, StopsAtTheContextLimitWithAMessage) {
  const fs::path src = fs::path(QFORGE_SOURCE_DIR) / "tests/data/conformance/llama_v4";
  if (!fs::exists(src)) GTEST_SKIP() << "conformance data missing";
  test::ScratchDir dir;
  fs::copy(src, dir / "model");
  test::write_file(dir / "model" / "tokenizer.json", test::byte_level_tokenizer());
  auto config = nlohmann::json::parse(test::read_file(dir / "model" / "config.json"));
  config["max_position_embeddings"] = 40;
  test::write_file(dir / "model" / "config.json", config.dump());
  const auto r = run_qforge("generate " + quote(dir / "model") + " -p 'Hello world' -n 100");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("generation stopped after 29 tokens"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("context limit of 40 tokens"), std::string::npos) << r.err;
}

INSTANTIATE_TEST_SUITE_P(Conformance, FamilyE2E,
                         ::testing::Values("llama_bias_headdim", "mistral_sliding", "qwen2",
                                           "qwen3", "phi3_longrope", "gemma3", "granite",
                                           "olmo2", "mixtral", "qwen2_moe", "qwen3_moe",
                                           "qwen3_moe_fused", "gpt_oss"),
                         [](const auto& param_info) { return param_info.param; });

}  // namespace
}  // namespace qf

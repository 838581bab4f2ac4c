// The serve-command table against the engine notes: the right --quantization per ModelOpt
// algorithm, KV-cache flags, and honest refusals where an engine does not load a format.
#include "targets/serving.h"

#include <gtest/gtest.h>

namespace qf {
namespace {

const ServeCommand& engine(const std::vector<ServeCommand>& all, const std::string& name) {
  for (const ServeCommand& c : all)
    if (c.engine == name) return c;
  static const ServeCommand none;
  ADD_FAILURE() << "no entry for " << name;
  return none;
}

ServeQuery query(ExportFormat target, std::set<Format> formats, ActQuant act = ActQuant::none) {
  ServeQuery q;
  q.target = target;
  q.formats = std::move(formats);
  q.activations = act;
  q.output = "out/model";
  return q;
}

TEST(Serving, ModelOptNvfp4W4A4LoadsEverywhereOnItsHardware) {
  const auto s = serve_commands(query(ExportFormat::modelopt, {Format::nvfp4}, ActQuant::nvfp4));
  ASSERT_EQ(s.size(), 3u);
  EXPECT_EQ(engine(s, "vLLM").command, "vllm serve out/model --quantization modelopt_fp4");
  EXPECT_EQ(engine(s, "vLLM").support, EngineSupport::loads);
  EXPECT_EQ(engine(s, "SGLang").command,
            "python -m sglang.launch_server --model-path out/model --quantization modelopt_fp4");
  EXPECT_NE(engine(s, "SGLang").note.find("Blackwell"), std::string::npos);
  EXPECT_EQ(engine(s, "TensorRT-LLM").command, "trtllm-serve out/model");
  EXPECT_EQ(engine(s, "TensorRT-LLM").support, EngineSupport::loads);
}

TEST(Serving, EnginesThatDoNotLoadAFormatSaySoAndPointElsewhere) {
  const auto s = serve_commands(query(ExportFormat::modelopt, {Format::int4}));
  EXPECT_EQ(engine(s, "vLLM").support, EngineSupport::no);
  EXPECT_TRUE(engine(s, "vLLM").command.empty());
  EXPECT_NE(engine(s, "vLLM").note.find("--export compressed-tensors"), std::string::npos);
  EXPECT_EQ(engine(s, "TensorRT-LLM").support, EngineSupport::loads);

  const auto ct = serve_commands(query(ExportFormat::compressed_tensors, {Format::int4}));
  EXPECT_EQ(engine(ct, "vLLM").command, "vllm serve out/model");  // read from config.json
  EXPECT_EQ(engine(ct, "vLLM").support, EngineSupport::loads);
  EXPECT_EQ(engine(ct, "TensorRT-LLM").support, EngineSupport::no);
  EXPECT_NE(engine(ct, "TensorRT-LLM").note.find("--export modelopt"), std::string::npos);
}

TEST(Serving, UncoveredCombinationsAreUnverifiedNotGuessed) {
  const auto s = serve_commands(query(ExportFormat::modelopt, {Format::nvfp4}));  // W4A16
  EXPECT_EQ(engine(s, "SGLang").support, EngineSupport::unverified);
  EXPECT_EQ(engine(s, "TensorRT-LLM").support, EngineSupport::unverified);
  EXPECT_EQ(engine(s, "vLLM").support, EngineSupport::loads);
}

TEST(Serving, MixedPrecisionAndKvCache) {
  ServeQuery q = query(ExportFormat::modelopt, {Format::nvfp4, Format::int4});
  EXPECT_EQ(engine(serve_commands(q), "vLLM").support, EngineSupport::no);
  q = query(ExportFormat::compressed_tensors, {Format::nvfp4, Format::fp8});
  q.kv_fp8 = true;
  const auto s = serve_commands(q);
  EXPECT_EQ(engine(s, "vLLM").command, "vllm serve out/model --kv-cache-dtype fp8");
  EXPECT_NE(engine(s, "SGLang").command.find("--kv-cache-dtype fp8_e4m3"), std::string::npos);
}

TEST(Serving, QuantizedHeadIsNotPromised) {
  ServeQuery q = query(ExportFormat::modelopt, {Format::nvfp4}, ActQuant::nvfp4);
  q.lm_head_quantized = true;
  const auto s = serve_commands(q);
  EXPECT_EQ(engine(s, "SGLang").support, EngineSupport::no);
  EXPECT_EQ(engine(s, "vLLM").support, EngineSupport::unverified);
  EXPECT_NE(engine(s, "vLLM").note.find("recent vLLM builds"), std::string::npos);
}

TEST(Serving, OddPathsAreQuotedAndNothingQuantizedServesNothing) {
  ServeQuery q = query(ExportFormat::modelopt, {Format::fp8}, ActQuant::fp8);
  q.output = "my model";
  EXPECT_EQ(engine(serve_commands(q), "vLLM").command,
            "vllm serve 'my model' --quantization modelopt");
  q.formats.clear();
  EXPECT_TRUE(serve_commands(q).empty());
}

// gpt-oss's quantized experts: vLLM's gpt-oss loader reads neither ModelOpt's fused NVFP4
// scales (vllm-project/vllm#46641) nor llm-compressor's linearised experts; the rest is not
// covered by the notes, so nothing claims "loads".
TEST(Serving, GptOssExpertsFollowEachEnginesGptOssLoader) {
  for (const ExportFormat t : {ExportFormat::modelopt, ExportFormat::compressed_tensors}) {
    ServeQuery q = query(t, {Format::nvfp4}, ActQuant::nvfp4);
    q.gpt_oss_experts = true;
    const auto s = serve_commands(q);
    EXPECT_EQ(engine(s, "vLLM").support, EngineSupport::no);
    EXPECT_NE(engine(s, "vLLM").note.find(t == ExportFormat::modelopt ? "46641" : "fused names"),
              std::string::npos) << engine(s, "vLLM").note;
    for (const ServeCommand& c : s) EXPECT_NE(c.support, EngineSupport::loads) << c.engine;
  }
  // Without quantized experts (they stayed BF16) the target's own verdict stands.
  ServeQuery q = query(ExportFormat::modelopt, {Format::nvfp4}, ActQuant::nvfp4);
  EXPECT_EQ(engine(serve_commands(q), "vLLM").support, EngineSupport::loads);
}

}  // namespace
}  // namespace qf

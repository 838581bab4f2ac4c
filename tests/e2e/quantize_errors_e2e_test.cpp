// End to end: what `qforge quantize` does with bad input, existing outputs, a full disk,
// exclusions and sharding. Every failure must be one line naming the problem, a non-zero exit,
// and no output directory (nor temporary directory) left behind.
#include "io/checkpoint.h"
#include "io/json_file.h"
#include "io/safetensors_writer.h"
#include "test_util.h"

#include <gtest/gtest.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstring>
#include <functional>
#include <random>

namespace fs = std::filesystem;

namespace qf {
namespace {

using test::quote;

// A one-layer Llama small enough to build in a test: hidden 32, intermediate 64.
struct TinyModel {
  std::map<std::string, Shape> shapes;
  std::function<float(const std::string&, int64_t)> value = [](const std::string& name, int64_t i) {
    std::mt19937 rng(uint32_t(std::hash<std::string>()(name) + size_t(i)));
    return std::normal_distribution<float>(0.f, 0.05f)(rng);
  };
  DType weight_dtype = DType::F32;
  nlohmann::ordered_json config = {
      {"architectures", {"LlamaForCausalLM"}}, {"model_type", "llama"}, {"hidden_size", 32},
      {"intermediate_size", 64}, {"num_hidden_layers", 1}, {"num_attention_heads", 2},
      {"num_key_value_heads", 1}, {"vocab_size", 16}, {"rms_norm_eps", 1e-5},
      {"tie_word_embeddings", true}};

  TinyModel() {
    shapes = {{"model.embed_tokens.weight", {16, 32}},
              {"model.layers.0.input_layernorm.weight", {32}},
              {"model.layers.0.self_attn.q_proj.weight", {32, 32}},
              {"model.layers.0.self_attn.k_proj.weight", {16, 32}},
              {"model.layers.0.self_attn.v_proj.weight", {16, 32}},
              {"model.layers.0.self_attn.o_proj.weight", {32, 32}},
              {"model.layers.0.post_attention_layernorm.weight", {32}},
              {"model.layers.0.mlp.gate_proj.weight", {64, 32}},
              {"model.layers.0.mlp.up_proj.weight", {64, 32}},
              {"model.layers.0.mlp.down_proj.weight", {32, 64}},
              {"model.norm.weight", {32}}};
  }

  void write(const fs::path& dir) const {
    fs::create_directories(dir);
    write_json_file(dir / "config.json", config);
    std::vector<TensorSpec> specs;
    for (const auto& [name, shape] : shapes)
      specs.push_back({name, name.find("proj") != std::string::npos ? weight_dtype : DType::F32, shape});
    SafetensorsWriter w(dir / "model.safetensors", specs);
    for (const auto& spec : specs) {
      std::vector<std::byte> bytes(spec.nbytes());
      for (int64_t i = 0; i < shape_numel(spec.shape); ++i) {
        const float v = value(spec.name, i);
        if (spec.dtype == DType::F32) std::memcpy(bytes.data() + 4 * i, &v, 4);
        else if (spec.dtype == DType::I8) bytes[size_t(i)] = std::byte(int8_t(v * 100));
      }
      w.write(spec.name, bytes);
    }
    w.finish();
    test::write_file(dir / "tokenizer_config.json", "{}");
  }
};

// No finished or temporary output next to `out`.
void expect_nothing_left(const fs::path& out) {
  EXPECT_FALSE(fs::exists(out)) << out;
  for (const auto& e : fs::directory_iterator(out.parent_path()))
    EXPECT_EQ(e.path().filename().string().find(".qforge-tmp"), std::string::npos) << e.path();
}

void expect_one_line_error(const test::CommandResult& r, const std::string& phrase) {
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find(phrase), std::string::npos) << r.err;
  EXPECT_EQ(r.err.rfind("qforge: error: ", 0), 0u) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
}

TEST(QuantizeCli, TinyModelQuantizesAndExistingOutputNeedsForce) {
  test::ScratchDir dir;
  TinyModel().write(dir / "model");
  const std::string cmd = "quantize " + quote(dir / "model") + " -o " + quote(dir / "out") + " -q";
  auto r = test::run_qforge(cmd);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("bits per quantized weight"), std::string::npos) << r.out;
  EXPECT_TRUE(fs::exists(dir / "out" / "tokenizer_config.json"));
  r = test::run_qforge(cmd);
  expect_one_line_error(r, "already exists (use --force");
  r = test::run_qforge(cmd + " --force --format fp8");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(read_json_file(dir / "out" / "config.json")["quantization_config"]["quant_algo"],
            "FP8_PER_CHANNEL_PER_TOKEN");
}

// `quantize P/model -o P --force` once deleted the input with everything else under P.
TEST(QuantizeCli, ForceNeverDeletesTheInput) {
  test::ScratchDir dir;
  TinyModel().write(dir / "p" / "model");
  const auto r = test::run_qforge("quantize " + quote(dir / "p" / "model") + " -o " +
                                  quote(dir / "p") + " -q --force");
  expect_one_line_error(r, "--force would delete the input");
  EXPECT_TRUE(fs::exists(dir / "p" / "model" / "config.json"));
}

// A staging directory left by a killed run is removed by the next run and reported.
TEST(QuantizeCli, StaleStagingDirectoryIsRemovedAndReported) {
  test::ScratchDir dir;
  TinyModel().write(dir / "model");
  const fs::path stale = dir / ".out.qforge-tmp-2147483646";  // no such process
  fs::create_directories(stale);
  test::write_file(stale / "model.safetensors", "partial");
  const auto r = test::run_qforge("quantize " + quote(dir / "model") + " -o " + quote(dir / "out"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_FALSE(fs::exists(stale));
  EXPECT_NE((r.out + r.err).find("removed, left by an interrupted run"), std::string::npos)
      << r.out << r.err;
}

TEST(QuantizeCli, NanWeightIsNamed) {
  test::ScratchDir dir;
  TinyModel m;
  m.value = [](const std::string& name, int64_t i) {
    return name.find("up_proj") != std::string::npos && i == 77 ? NAN : 0.01f;
  };
  m.write(dir / "model");
  const auto r = test::run_qforge("quantize " + quote(dir / "model") + " -o " + quote(dir / "out") + " -q");
  expect_one_line_error(r, "tensor 'model.layers.0.mlp.up_proj.weight' has 1 NaN or Inf");
  expect_nothing_left(dir / "out");
}

// NaN/Inf in a tensor that is copied, not quantized (here the embedding), is an error naming
// it, or with --allow-nonfinite a warning naming it.
TEST(QuantizeCli, NanInACopiedTensorIsAnErrorOrANamedWarning) {
  test::ScratchDir dir;
  TinyModel m;
  m.value = [](const std::string& name, int64_t i) {
    return name.find("embed_tokens") != std::string::npos && i == 5 ? INFINITY : 0.01f;
  };
  m.write(dir / "model");
  const std::string cmd = "quantize " + quote(dir / "model") + " -o " + quote(dir / "out");
  auto r = test::run_qforge(cmd + " -q");
  expect_one_line_error(r, "tensor 'model.embed_tokens.weight' has 1 NaN or Inf values");
  expect_nothing_left(dir / "out");
  r = test::run_qforge(cmd + " --allow-nonfinite");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("'model.embed_tokens.weight' has 1 NaN or Inf values, copied as it is"),
            std::string::npos)
      << r.err;
}

// Outputs the engine would reject were once written and kept: a config whose vocab_size does
// not match the embedding, or an untied model without its head. They now fail before the
// rename, naming the reason, and leave nothing behind.
TEST(QuantizeCli, OutputThatWouldNotLoadIsNotKept) {
  test::ScratchDir dir;
  TinyModel m;
  m.config["vocab_size"] = 20;
  m.write(dir / "model");
  auto r = test::run_qforge("quantize " + quote(dir / "model") + " -o " + quote(dir / "out") + " -q");
  expect_one_line_error(r, "does not load in qforge's engine");
  expect_nothing_left(dir / "out");
  TinyModel untied;
  untied.config["tie_word_embeddings"] = false;
  untied.write(dir / "untied");
  r = test::run_qforge("quantize " + quote(dir / "untied") + " -o " + quote(dir / "out") + " -q");
  expect_one_line_error(r, "does not load in qforge's engine");
  expect_nothing_left(dir / "out");
}

// An all-zero Linear quantizes (to zero codes, finite scales) and is reported.
TEST(QuantizeCli, AllZeroWeightEncodesWithoutNan) {
  test::ScratchDir dir;
  TinyModel m;
  m.value = [](const std::string&, int64_t) { return 0.f; };
  m.write(dir / "model");
  const auto r = test::run_qforge("quantize " + quote(dir / "model") + " -o " + quote(dir / "out"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("model.layers.0.mlp.down_proj: every weight quantizes to zero"),
            std::string::npos)
      << r.err;
  const Checkpoint c = Checkpoint::open(dir / "out");
  const CheckpointTensor* ws2 = c.find("model.layers.0.mlp.down_proj.weight_scale_2");
  ASSERT_NE(ws2, nullptr);
  float g;
  std::memcpy(&g, ws2->file->view(*ws2->entry).data, 4);
  EXPECT_EQ(g, 1.0f);
  const CheckpointTensor* s = c.find("model.layers.0.mlp.down_proj.weight_scale");
  const TensorView v = s->file->view(*s->entry);
  for (size_t i = 0; i < v.nbytes; ++i) EXPECT_EQ(uint8_t(v.data[i]), 0x38);  // 1.0, not NaN
}

TEST(QuantizeCli, UnsupportedArchitectureAndWrongTensors) {
  test::ScratchDir dir;
  TinyModel m;
  m.config["model_type"] = "gpt2";
  m.config["architectures"] = {"GPT2LMHeadModel"};
  m.write(dir / "gpt2");
  auto r = test::run_qforge("quantize " + quote(dir / "gpt2") + " -o " + quote(dir / "out") + " -q");
  expect_one_line_error(r, "unsupported architecture 'GPT2LMHeadModel'");

  TinyModel wrong_shape;
  wrong_shape.shapes["model.layers.0.mlp.up_proj.weight"] = {48, 32};
  wrong_shape.write(dir / "shape");
  r = test::run_qforge("quantize " + quote(dir / "shape") + " -o " + quote(dir / "out") + " -q");
  expect_one_line_error(r, "'model.layers.0.mlp.up_proj.weight' has shape [48, 32]");

  TinyModel int8;
  int8.weight_dtype = DType::I8;
  int8.write(dir / "int8");
  r = test::run_qforge("quantize " + quote(dir / "int8") + " -o " + quote(dir / "out") + " -q");
  expect_one_line_error(r, "has dtype I8");
  expect_nothing_left(dir / "out");
}

TEST(QuantizeCli, BrokenCheckpointsAreNamed) {
  QF_REQUIRE_FIXTURES();
  test::ScratchDir dir;
  const fs::path src = test::fixtures_dir() / "models" / "stories260K-hf";
  // Truncated shard.
  fs::create_directories(dir / "trunc");
  for (const auto& e : fs::directory_iterator(src)) fs::copy_file(e.path(), dir / "trunc" / e.path().filename());
  fs::permissions(dir / "trunc" / "model.safetensors", fs::perms::owner_write, fs::perm_options::add);
  fs::resize_file(dir / "trunc" / "model.safetensors", 500000);
  auto r = test::run_qforge("quantize " + quote(dir / "trunc") + " -o " + quote(dir / "out") + " -q");
  expect_one_line_error(r, "model.safetensors");
  // Index naming a missing shard, and one escaping the directory.
  for (const std::string shard : {"model-00002-of-00002.safetensors", "../evil.safetensors"}) {
    const fs::path d = dir / ("index" + std::to_string(shard.size()));
    fs::create_directories(d);
    fs::copy_file(src / "config.json", d / "config.json");
    fs::copy_file(src / "model.safetensors", d / "model-00001-of-00002.safetensors");
    nlohmann::ordered_json index;
    index["metadata"]["total_size"] = 1;
    index["weight_map"]["model.norm.weight"] = "model-00001-of-00002.safetensors";
    index["weight_map"]["model.embed_tokens.weight"] = shard;
    write_json_file(d / "model.safetensors.index.json", index);
    r = test::run_qforge("quantize " + quote(d) + " -o " + quote(dir / "out") + " -q");
    EXPECT_NE(r.exit_code, 0);
    EXPECT_NE(r.err.find(shard), std::string::npos) << r.err;
  }
  expect_nothing_left(dir / "out");
}

TEST(QuantizeCli, DiskFullFailsCleanly) {
  QF_REQUIRE_FIXTURES();
  test::ScratchDir dir;
  const fs::path src = test::fixtures_dir() / "models" / "tinystories-656K-hf";
  // A 256 kB file-size limit: the first output shard cannot be written.
  const auto r = test::run_qforge(
      "quantize " + quote(src) + " -o " + quote(dir / "out") + " -q --format fp8", "ulimit -f 256;");
  expect_one_line_error(r, "write failed");
  expect_nothing_left(dir / "out");
}

TEST(QuantizeCli, ExcludeTakesWholeFusedGroups) {
  test::ScratchDir dir;
  TinyModel().write(dir / "model");
  const auto r = test::run_qforge("quantize " + quote(dir / "model") + " -o " + quote(dir / "out") +
                                  " -q --json --exclude '*k_proj' --exclude '*.down_proj'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["modules_quantized"], 3);  // o_proj, gate_proj, up_proj
  EXPECT_EQ(j["modules_excluded"], 4);   // q, k, v (fused), down_proj
  const auto ignore = read_json_file(dir / "out" / "config.json")["quantization_config"]["ignore"];
  EXPECT_EQ(ignore, nlohmann::json({"lm_head", "model.embed_tokens", "model.layers.0.mlp.down_proj",
                                    "model.layers.0.self_attn.k_proj",
                                    "model.layers.0.self_attn.q_proj",
                                    "model.layers.0.self_attn.v_proj"}));
  const Checkpoint c = Checkpoint::open(dir / "out");
  EXPECT_EQ(c.find("model.layers.0.self_attn.q_proj.weight")->entry->dtype, DType::F32);
  EXPECT_EQ(c.find("model.layers.0.mlp.up_proj.weight")->entry->dtype, DType::U8);
}

TEST(QuantizeCli, ShardsWithIndexAndKeepsInputsUntouched) {
  QF_REQUIRE_FIXTURES();
  test::ScratchDir dir;
  const fs::path src = test::fixtures_dir() / "models" / "tinystories-656K-hf";
  const std::string before = test::read_file(src / "model.safetensors");
  const auto mtime = fs::last_write_time(src / "model.safetensors");
  const auto r = test::run_qforge("quantize " + quote(src) + " -o " + quote(dir / "out") +
                                  " -q --json --max-shard-size 300kB");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_GT(j["shards"].get<int>(), 1);
  ASSERT_TRUE(fs::exists(dir / "out" / "model.safetensors.index.json"));
  const Checkpoint c = Checkpoint::open(dir / "out");
  EXPECT_EQ(int(c.shards().size()), j["shards"].get<int>());
  // The tied embedding (stored as lm_head with an alias) is written once, under its own name.
  ASSERT_NE(c.find("model.embed_tokens.weight"), nullptr);
  EXPECT_EQ(c.find("lm_head.weight"), nullptr);
  EXPECT_EQ(test::read_file(src / "model.safetensors"), before);
  EXPECT_EQ(fs::last_write_time(src / "model.safetensors"), mtime);
}

TEST(QuantizeCli, SynthThenQuantizeAndDemo) {
  test::ScratchDir dir;
  auto r = test::run_qforge("synth --shape tiny --layers 1 -o " + quote(dir / "synth") + " -q --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_GT(nlohmann::json::parse(r.out)["parameters"].get<int64_t>(), 0);
  // Same seed, same bytes.
  r = test::run_qforge("synth --shape tiny --layers 1 -o " + quote(dir / "synth2") + " -q");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(test::read_file(dir / "synth" / "model.safetensors"),
            test::read_file(dir / "synth2" / "model.safetensors"));
  r = test::run_qforge("quantize " + quote(dir / "synth") + " -o " + quote(dir / "q") +
                       " --format int4 --export compressed-tensors -q --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["modules_excluded"], 0);
  r = test::run_qforge("demo");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("W4A16_NVFP4"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("top-1 agreement"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("decode speed"), std::string::npos) << r.out;
  // On random weights the demo says what its low top-1 agreement means.
  EXPECT_NE(r.out.find("a property of the random model"), std::string::npos) << r.out;
  r = test::run_qforge("synth --shape llama-9000 -o " + quote(dir / "x"));
  expect_one_line_error(r, "unknown shape 'llama-9000'");
}

// With a real model the demo measures English text and shows the text before and after.
TEST(QuantizeCli, DemoOnARealModelShowsTextBeforeAndAfter) {
  QF_REQUIRE_FIXTURES();
  const auto r = test::run_qforge("demo --model " + quote(test::model_dir("stories260K-hf")));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("tokens of English text"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("original:  , there was a little girl"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("quantized: "), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("property of the random model"), std::string::npos) << r.out;
}

TEST(QuantizeCli, HelpExplainsEveryFlag) {
  const auto r = test::run_qforge("quantize --help");
  EXPECT_EQ(r.exit_code, 0);
  for (const char* flag : {"--format", "--export", "--exclude", "--threads", "--max-shard-size",
                           "--force", "--json", "--group-size"})
    EXPECT_NE(r.out.find(flag), std::string::npos) << flag;
}

}  // namespace
}  // namespace qf

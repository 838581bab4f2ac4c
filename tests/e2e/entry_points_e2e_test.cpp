// End to end: the entry points users know from other tools -- ModelOpt's --qformat names,
// did-you-mean for mistyped names, quantize --dry-run, --tokenizer DIR, synth's tokenizer, YAML
// recipes, the refusal of already-quantized inputs, and eval kl's swapped-argument warning.
#include "test_util.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>

namespace qf {
namespace {

namespace fs = std::filesystem;
using test::quote;
using test::run_qforge;

fs::path stories() { return test::model_dir("stories260K-hf"); }
std::string corpus() {
  return quote(test::fixtures_dir() / "corpora" / "tinyshakespeare.txt");
}
std::string small_calib() { return " --calib " + corpus() + " --calib-samples 4 --calib-seq 32"; }
std::string eval_text() {
  return " --text " + quote(test::fixtures_dir() / "corpora" / "tinystories_valid_subset.txt") +
         " --max-chars 2000";
}

nlohmann::json dry_run(const std::string& flags) {
  const auto r = run_qforge("quantize " + quote(stories()) + " --dry-run --json -q " + flags);
  EXPECT_EQ(r.exit_code, 0) << flags << "\n" << r.err;
  return r.exit_code == 0 ? nlohmann::json::parse(r.out) : nlohmann::json::object();
}

void expect_error(const std::string& args, const std::string& message) {
  const auto r = run_qforge(args);
  EXPECT_NE(r.exit_code, 0) << args;
  EXPECT_NE(r.err.find(message), std::string::npos) << args << "\n" << r.err;
}

TEST(EntryPointsE2E, QFormatNamesStandForFlags) {
  QF_REQUIRE_FIXTURES();
  struct Case {
    std::string qformat, format, activations, algo;
  };
  for (const Case& c : {Case{"nvfp4", "nvfp4", "nvfp4", "max"},
                        Case{"W4A16_NVFP4", "nvfp4", "none", "max"},
                        Case{"nvfp4_awq", "nvfp4", "nvfp4", "awq"},
                        Case{"fp8", "fp8", "fp8", "max"},
                        Case{"int4_awq", "int4", "none", "awq"},
                        Case{"int8_sq", "int8", "int8", "smoothquant"}}) {
    const auto j = dry_run("--qformat " + c.qformat + small_calib());
    EXPECT_EQ(j.value("format", ""), c.format) << c.qformat;
    EXPECT_EQ(j.value("activations", ""), c.activations) << c.qformat;
    EXPECT_EQ(j.value("algo", ""), c.algo) << c.qformat;
  }
  // int4_awq's group 128 does not divide stories260K's 64 inputs: every module is kept, saying so.
  const auto int4 = dry_run("--qformat int4_awq" + small_calib());
  ASSERT_FALSE(int4["modules"].empty());
  EXPECT_EQ(int4["modules"][0]["format"], "keep");
  // An explicit --group-size refines int4_awq.
  const auto int4_32 = dry_run("--qformat int4_awq --group-size 32" + small_calib());
  EXPECT_EQ(int4_32["modules"][0]["format"], "int4:32");

  const std::string q = "quantize " + quote(stories()) + " --dry-run ";
  expect_error(q + "--qformat w4a8_awq" + small_calib(),
               "--qformat w4a8_awq (INT4 AWQ weights with FP8 activations (W4A8_AWQ)) cannot be "
               "expressed: qforge has no INT4-weight / FP8-activation scheme");
  expect_error(q + "--qformat fp8 --format nvfp4" + small_calib(),
               "--qformat fp8 sets --format fp8, which conflicts with --format nvfp4");
  expect_error(q + "--qformat int8_sq --algo max" + small_calib(),
               "--qformat int8_sq sets --algo smoothquant, which conflicts with --algo max");
  expect_error(q + "--qformat nvfp4 --activations none" + small_calib(),
               "--qformat nvfp4 sets --activations nvfp4, which conflicts with --activations none");
  // Agreeing flags are fine; a calibrated name without data says what it needs.
  dry_run("--qformat fp8 --format fp8 --activations fp8" + small_calib());
  expect_error(q + "--qformat fp8", "--activations fp8 needs calibration data");
}

TEST(EntryPointsE2E, QFormatWritesWhatItsFlagsWrite) {
  QF_REQUIRE_FIXTURES();
  test::ScratchDir dir;
  const std::string base = "quantize " + quote(stories()) + " -q" + small_calib();
  ASSERT_EQ(run_qforge(base + " -o " + quote(dir / "a") + " --qformat FP8").exit_code, 0);
  ASSERT_EQ(run_qforge(base + " -o " + quote(dir / "b") + " --format fp8 --activations fp8").exit_code,
            0);
  EXPECT_EQ(test::read_file(dir / "a" / "model.safetensors"),
            test::read_file(dir / "b" / "model.safetensors"));
  EXPECT_EQ(test::read_file(dir / "a" / "config.json"), test::read_file(dir / "b" / "config.json"));
}

TEST(EntryPointsE2E, UnknownNamesSuggestTheClosest) {
  QF_REQUIRE_FIXTURES();
  test::ScratchDir dir;
  const std::string q = "quantize " + quote(stories()) + " -o " + quote(dir / "o") + " ";
  expect_error(q + "--format nvfp5", "unknown format 'nvfp5'; did you mean 'nvfp4'?");
  expect_error(q + "--algo gtpq", "unknown algorithm 'gtpq'; did you mean 'gptq'?");
  expect_error(q + "--export modelop", "unknown export format 'modelop'; did you mean 'modelopt'?");
  expect_error(q + "--activations fp9", "unknown activation format 'fp9'; did you mean 'fp8'?");
  expect_error(q + "--kv-cache fp9", "unknown kv-cache format 'fp9'; did you mean 'fp8'?");
  expect_error(q + "--kernels fsat", "unknown kernels 'fsat'; did you mean 'fast'?");
  expect_error(q + "--qformat nvfp5", "unknown qformat 'nvfp5'; did you mean 'nvfp4'?");
  expect_error(q + "--format zzz", "unknown format 'zzz' (choices: nvfp4");
  expect_error("quantise " + quote(stories()), "unknown command 'quantise'; did you mean 'quantize'?");
  expect_error("eval ppx " + quote(stories()), "unknown command 'ppx'; did you mean 'ppl'?");
  expect_error("synth --shape llama-8c -o " + quote(dir / "s"),
               "unknown shape 'llama-8c'; did you mean 'llama-8b'?");
  expect_error("sensitivity " + quote(stories()) + " --formats nvfp4,mxfp5" + small_calib(),
               "--formats: unknown format 'mxfp5'; did you mean 'mxfp4'?");
  EXPECT_FALSE(fs::exists(dir / "o"));
}

TEST(EntryPointsE2E, DryRunPredictsTheRunWithoutWriting) {
  QF_REQUIRE_FIXTURES();
  test::ScratchDir dir;
  for (const std::string flags : {"", " --format int4 --group-size channel",
                                  " --export compressed-tensors --quantize-lm-head",
                                  " --max-shard-size 300KB"}) {
    const std::string q = "quantize " + quote(stories()) + " -o " + quote(dir / "o") + flags;
    auto r = run_qforge(q + " --dry-run");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.out.find("nothing written"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("bytes out (predicted)"), std::string::npos) << r.out;
    EXPECT_FALSE(fs::exists(dir / "o")) << flags;
    r = run_qforge(q + " --dry-run --json");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const auto plan = nlohmann::json::parse(r.out);
    EXPECT_TRUE(plan["dry_run"].get<bool>());
    EXPECT_FALSE(fs::exists(dir / "o"));
    r = run_qforge(q + " --json -q");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const auto done = nlohmann::json::parse(r.out);
    for (const char* key : {"bytes_in", "bytes_out", "quantized_weights", "bits_per_quantized_weight",
                            "shards", "modules_quantized", "modules_excluded", "format", "excluded"})
      EXPECT_EQ(plan[key], done[key]) << key << flags;
    fs::remove_all(dir / "o");
  }
  // The table names each module, its format and bits, and why a module is kept.
  const auto plan = dry_run("");
  ASSERT_TRUE(plan.contains("modules"));
  bool kept_down = false;
  for (const auto& m : plan["modules"]) {
    if (m["name"].get<std::string>().ends_with("down_proj")) {
      EXPECT_EQ(m["format"], "keep");
      EXPECT_NE(m["reason"].get<std::string>().find("not a multiple"), std::string::npos);
      EXPECT_EQ(m["bits"].get<double>(), 32.0);
      kept_down = true;
    } else {
      EXPECT_EQ(m["format"], "nvfp4");
      // 4-bit codes, an E4M3 scale per 16, and the module's FP32 tensor scale.
      EXPECT_GT(m["bits"].get<double>(), 4.5);
      EXPECT_LT(m["bits"].get<double>(), 4.52);
    }
  }
  EXPECT_TRUE(kept_down);
  // --recipe plans (YAML too) are previewed like the rest.
  test::write_file(dir / "r.yaml", "rules:\n  - match: '*.mlp.*'\n    format: fp8\n");
  const auto mixed = dry_run("--recipe " + quote(dir / "r.yaml"));
  EXPECT_EQ(mixed["format"], "mixed");
  // No output directory is needed, and plan errors still come first.
  expect_error("quantize " + quote(stories()) + " --dry-run --activations nvfp4",
               "--activations nvfp4 needs calibration data");
  expect_error("quantize " + quote(stories()), "-o/--output is required (unless --dry-run)");
}

TEST(EntryPointsE2E, TokenizerFromAnotherDirectory) {
  QF_REQUIRE_FIXTURES();
  test::ScratchDir dir;
  const fs::path bare = dir / "bare";  // the weights without a tokenizer
  fs::create_directories(bare);
  fs::copy_file(stories() / "config.json", bare / "config.json");
  fs::copy_file(stories() / "model.safetensors", bare / "model.safetensors");
  const std::string tok = " --tokenizer " + quote(stories());

  expect_error("generate " + quote(bare) + " -n 4", "no tokenizer");
  auto with = run_qforge("generate " + quote(bare) + tok + " -p 'Once upon' -n 8");
  auto own = run_qforge("generate " + quote(stories()) + " -p 'Once upon' -n 8");
  ASSERT_EQ(with.exit_code, 0) << with.err;
  EXPECT_EQ(with.out, own.out);
  with = run_qforge("tokenize " + quote(bare) + tok + " -p 'Hello world' --json");
  own = run_qforge("tokenize " + quote(stories()) + " -p 'Hello world' --json");
  ASSERT_EQ(with.exit_code, 0) << with.err;
  EXPECT_EQ(nlohmann::json::parse(with.out)["ids"], nlohmann::json::parse(own.out)["ids"]);
  with = run_qforge("eval ppl " + quote(bare) + tok + eval_text() + " --json");
  own = run_qforge("eval ppl " + quote(stories()) + eval_text() + " --json");
  ASSERT_EQ(with.exit_code, 0) << with.err;
  EXPECT_EQ(with.out, own.out);
  with = run_qforge("sensitivity " + quote(bare) + tok + small_calib() + " --json -q");
  ASSERT_EQ(with.exit_code, 0) << with.err;

  // quantize calibrates with it and carries its files into an output that has none.
  const std::string flags = " -q --kv-cache fp8" + small_calib();
  auto r = run_qforge("quantize " + quote(bare) + " -o " + quote(dir / "q1") + flags);
  EXPECT_NE(r.exit_code, 0);
  r = run_qforge("quantize " + quote(bare) + tok + " -o " + quote(dir / "q1") + flags);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = run_qforge("quantize " + quote(stories()) + " -o " + quote(dir / "q2") + flags);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(test::read_file(dir / "q1" / "model.safetensors"),
            test::read_file(dir / "q2" / "model.safetensors"));
  EXPECT_EQ(test::read_file(dir / "q1" / "tokenizer.model"),
            test::read_file(stories() / "tokenizer.model"));
  EXPECT_TRUE(fs::exists(dir / "q1" / "tokenizer_config.json"));
}

TEST(EntryPointsE2E, SynthWritesATokenizerThatCalibrationAndGenerateUse) {
  QF_REQUIRE_FIXTURES();
  test::ScratchDir dir;
  const fs::path s = dir / "s";
  auto r = run_qforge("synth --shape tiny --layers 1 -q -o " + quote(s));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(fs::exists(s / "tokenizer.json"));
  EXPECT_TRUE(fs::exists(s / "tokenizer_config.json"));
  r = run_qforge("quantize " + quote(s) + " -o " + quote(dir / "q") +
                 " -q --qformat nvfp4 --kv-cache fp8" + small_calib());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = run_qforge("generate " + quote(s) + " -p 'the cat' -n 8");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(r.out.starts_with("the cat")) << r.out;
  r = run_qforge("generate " + quote(dir / "q") + " -p 'the cat' -n 8");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = run_qforge("eval ppl " + quote(s) + eval_text() + " --ctx 64 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
}

TEST(EntryPointsE2E, QuantizedInputsAreRefusedNamingTheFormat) {
  QF_REQUIRE_FIXTURES();
  test::ScratchDir dir;
  ASSERT_EQ(run_qforge("quantize " + quote(stories()) + " -q -o " + quote(dir / "ct") +
                       " --export compressed-tensors").exit_code,
            0);
  ASSERT_EQ(run_qforge("quantize " + quote(stories()) + " -q -o " + quote(dir / "mo") +
                       " --format fp8").exit_code,
            0);
  const std::string tail = "; quantize takes an unquantized BF16/F16/F32 checkpoint";
  auto r = run_qforge("quantize " + quote(dir / "ct") + " -o " + quote(dir / "x"));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_EQ(r.err, "qforge: error: " + (dir / "ct" / "config.json").string() +
                       ": already quantized (compressed-tensors nvfp4-pack-quantized)" + tail + "\n");
  r = run_qforge("quantize " + quote(dir / "mo") + " --dry-run");
  EXPECT_NE(r.err.find((dir / "mo" / "config.json").string() + ": already quantized (modelopt "),
            std::string::npos)
      << r.err;
  // Without its configs, the tensors give it away.
  test::write_file(dir / "mo" / "config.json", test::read_file(stories() / "config.json"));
  fs::remove(dir / "mo" / "hf_quant_config.json");
  r = run_qforge("quantize " + quote(dir / "mo") + " -o " + quote(dir / "x"));
  EXPECT_NE(r.err.find((dir / "mo" / "model.safetensors").string() + ": already quantized (tensor '"),
            std::string::npos)
      << r.err;
  r = run_qforge("sensitivity " + quote(dir / "ct") + small_calib());
  EXPECT_NE(r.err.find("already quantized (compressed-tensors nvfp4-pack-quantized); sensitivity "
                       "takes"),
            std::string::npos)
      << r.err;
  EXPECT_FALSE(fs::exists(dir / "x"));
}

TEST(EntryPointsE2E, EvalKlWarnsAboutSwappedArguments) {
  QF_REQUIRE_FIXTURES();
  test::ScratchDir dir;
  ASSERT_EQ(run_qforge("quantize " + quote(stories()) + " -q -o " + quote(dir / "q")).exit_code, 0);
  auto r = run_qforge("eval kl " + quote(stories()) + " " + quote(dir / "q") + eval_text() + " --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(nlohmann::json::parse(r.out)["warnings"].empty());
  EXPECT_EQ(r.err.find("swapped"), std::string::npos) << r.err;
  r = run_qforge("eval kl " + quote(dir / "q") + " " + quote(stories()) + eval_text() + " --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["warnings"].size(), 1u);
  EXPECT_NE(r.err.find("qforge: warning: BASE " + (dir / "q").string() + " is quantized (modelopt"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find(") and QUANT " + stories().string() +
                       " is not: the arguments look swapped"),
            std::string::npos)
      << r.err;
}

}  // namespace
}  // namespace qf

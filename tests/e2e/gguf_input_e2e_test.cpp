// `qforge quantize FILE.gguf`: a float llama GGUF is an input like a Hugging Face directory.
// llama.cpp's stories260K.gguf (F32, q/k rows interleaved) and the Hugging Face conversion of the
// same llama2.c model (q/k rows in rotate-half order) hold the same numbers, so every output
// made from either must be the same: the GGUF export tensor for tensor, the ModelOpt export's KL.
// Quantized and truncated inputs are one-line errors.
#include "io/gguf_file.h"
#include "io/gguf_writer.h"
#include "test_util.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

namespace qf {
namespace {

namespace fs = std::filesystem;

fs::path stories_gguf() {
  return test::fixtures_dir() / "models/stories260K-llama2c/stories260K.gguf";
}

void expect_one_line_error(const test::CommandResult& r, const std::string& needle) {
  EXPECT_NE(r.exit_code, 0);
  EXPECT_EQ(r.err.rfind("qforge: error: ", 0), 0u) << r.err;
  EXPECT_NE(r.err.find(needle), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
}

bool same_value(const GgufValue& a, const GgufValue& b) {
  if (a.type != b.type || a.bits != b.bits || a.str != b.str || a.elem != b.elem ||
      a.count != b.count || a.strings != b.strings)
    return false;
  if (a.type != GgufType::ARRAY || a.elem == GgufType::STRING) return true;
  return std::memcmp(a.elems, b.elems, size_t(a.count * gguf_scalar_size(a.elem))) == 0;
}

TEST(GgufInputE2E, GgufExportEqualsTheHfModelsTensorForTensor) {
  QF_REQUIRE_FIXTURES();
  test::ScratchDir tmp;
  const fs::path from_gguf = tmp / "from-gguf.gguf", from_hf = tmp / "from-hf.gguf";
  const auto a = test::run_qforge("quantize " + test::quote(stories_gguf()) + " -o " +
                                  test::quote(from_gguf) + " --export gguf --format q8_0");
  ASSERT_EQ(a.exit_code, 0) << a.err;
  const auto b = test::run_qforge("quantize " + test::quote(test::model_dir("stories260K-hf")) +
                                  " -o " + test::quote(from_hf) + " --export gguf --format q8_0");
  ASSERT_EQ(b.exit_code, 0) << b.err;
  const GgufFile fa = GgufFile::open(from_gguf), fb = GgufFile::open(from_hf);
  // The Hugging Face model ties lm_head to the embedding; llama2.c's GGUF stores the shared
  // classifier twice, as output.weight. Apart from that tensor, the same tensors in the same
  // order, types and shapes, byte for byte: the q/k rows the input's reader puts in rotate-half
  // order are put back by the writer.
  std::vector<const GgufTensorInfo*> ta;
  const GgufTensorInfo* output = nullptr;
  for (const GgufTensorInfo& t : fa.tensors()) {
    if (t.name == "output.weight") output = &t;
    else ta.push_back(&t);
  }
  ASSERT_NE(output, nullptr);
  EXPECT_EQ(fb.find_tensor("output.weight"), nullptr);
  auto bytes_equal = [&](const GgufFile& x, const GgufTensorInfo& tx, const GgufFile& y,
                         const GgufTensorInfo& ty) {
    const auto dx = x.view(tx).data, dy = y.view(ty).data;
    return tx.type == ty.type && tx.ne == ty.ne && dx.size() == dy.size() &&
           std::memcmp(dx.data(), dy.data(), dx.size()) == 0;
  };
  EXPECT_TRUE(bytes_equal(fa, *output, fa, *fa.find_tensor("token_embd.weight")));
  ASSERT_EQ(ta.size(), fb.tensors().size());
  for (size_t i = 0; i < ta.size(); ++i) {
    const GgufTensorInfo& tb = fb.tensors()[i];
    EXPECT_EQ(ta[i]->name, tb.name);
    EXPECT_TRUE(bytes_equal(fa, *ta[i], fb, tb)) << ta[i]->name << " differs";
  }
  // The model metadata is the same numbers, and the tokenizer is the input's, verbatim.
  for (const char* key : {"llama.embedding_length", "llama.block_count", "llama.attention.head_count",
                          "llama.attention.head_count_kv", "llama.feed_forward_length"})
    EXPECT_EQ(fa.get_u32(key), fb.get_u32(key)) << key;
  const GgufFile in = GgufFile::open(stories_gguf());
  int copied = 0;
  for (const GgufKv& kv : in.metadata()) {
    if (!kv.key.starts_with("tokenizer.")) continue;
    const GgufValue* out = fa.find(kv.key);
    ASSERT_NE(out, nullptr) << kv.key;
    EXPECT_TRUE(same_value(kv.value, *out)) << kv.key;
    ++copied;
  }
  EXPECT_GE(copied, 6);
  // And it evaluates like the input: the KL of an F32 round trip is 0.
  const fs::path f32 = tmp / "f32.gguf";
  ASSERT_EQ(test::run_qforge("quantize " + test::quote(stories_gguf()) + " -o " +
                             test::quote(f32) + " --export gguf --format f32")
                .exit_code,
            0);
  const nlohmann::json kl = test::eval_kl("stories260K-hf", f32);
  ASSERT_FALSE(kl.empty());
  EXPECT_LT(kl["kl_mean"].get<double>(), 1e-9) << kl.dump();
}

TEST(GgufInputE2E, ModelOptExportFromGgufMatchesTheHfModels) {
  QF_REQUIRE_FIXTURES();
  test::ScratchDir tmp;
  const auto a = test::run_qforge("quantize " + test::quote(stories_gguf()) + " -o " +
                                  test::quote(tmp / "g") + " --format nvfp4");
  ASSERT_EQ(a.exit_code, 0) << a.err;
  // Its tokenizer is metadata, written as tokenizer.json that encodes as the GGUF does.
  EXPECT_TRUE(fs::exists(tmp / "g" / "tokenizer.json"));
  EXPECT_TRUE(fs::exists(tmp / "g" / "tokenizer_config.json"));
  const std::string prompt = " -p 'Once upon a time, Lily  saw a cat.</s>' --json";
  const auto tg = test::run_qforge("tokenize " + test::quote(tmp / "g") + prompt);
  const auto tf = test::run_qforge("tokenize " + test::quote(stories_gguf()) + prompt);
  ASSERT_EQ(tg.exit_code, 0) << tg.err;
  EXPECT_EQ(nlohmann::json::parse(tg.out)["ids"], nlohmann::json::parse(tf.out)["ids"]);
  const auto b = test::run_qforge("quantize " + test::quote(test::model_dir("stories260K-hf")) +
                                  " -o " + test::quote(tmp / "h") + " --format nvfp4");
  ASSERT_EQ(b.exit_code, 0) << b.err;
  const nlohmann::json kg = test::eval_kl("stories260K-hf", tmp / "g");
  const nlohmann::json kh = test::eval_kl("stories260K-hf", tmp / "h");
  ASSERT_FALSE(kg.empty());
  ASSERT_FALSE(kh.empty());
  const double g = kg["kl_mean"].get<double>(), h = kh["kl_mean"].get<double>();
  EXPECT_GT(h, 0.0);
  // The same weights quantized the same way: the same KL (to the printed precision).
  EXPECT_NEAR(g, h, 1e-6 * h + 1e-12) << kg.dump() << " vs " << kh.dump();
  // With --tokenizer the original's tokenizer files travel with the output.
  const auto c = test::run_qforge("quantize " + test::quote(stories_gguf()) + " -o " +
                                  test::quote(tmp / "t") + " --format nvfp4 --tokenizer " +
                                  test::quote(test::model_dir("stories260K-hf")));
  ASSERT_EQ(c.exit_code, 0) << c.err;
  EXPECT_TRUE(fs::exists(tmp / "t" / "tokenizer.model"));
}

// F16 and BF16 inputs are views too (q/k rows of 2 bytes per element moved as stored): an F16
// file re-exported as F16 holds the same tensors, byte for byte; and sensitivity takes a GGUF.
TEST(GgufInputE2E, HalfPrecisionInputsRoundTripAndSensitivityRuns) {
  QF_REQUIRE_FIXTURES();
  test::ScratchDir tmp;
  const fs::path f16 = tmp / "f16.gguf", again = tmp / "again.gguf";
  ASSERT_EQ(test::run_qforge("quantize " + test::quote(stories_gguf()) + " -o " +
                             test::quote(f16) + " --export gguf --format f16")
                .exit_code,
            0);
  const auto r = test::run_qforge("quantize " + test::quote(f16) + " -o " + test::quote(again) +
                                  " --export gguf --format f16");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const GgufFile a = GgufFile::open(f16), b = GgufFile::open(again);
  ASSERT_EQ(a.tensors().size(), b.tensors().size());
  int half = 0;
  for (size_t i = 0; i < a.tensors().size(); ++i) {
    const GgufTensorInfo &ta = a.tensors()[i], &tb = b.tensors()[i];
    EXPECT_EQ(ta.name, tb.name);
    EXPECT_EQ(ta.type, tb.type) << ta.name;
    half += ta.type == GgmlType::F16;
    const auto da = a.view(ta).data, db = b.view(tb).data;
    ASSERT_EQ(da.size(), db.size()) << ta.name;
    EXPECT_EQ(std::memcmp(da.data(), db.data(), da.size()), 0) << ta.name << " differs";
  }
  EXPECT_GT(half, 30);  // the Linears (norms stay F32)
  const auto s = test::run_qforge(
      "sensitivity " + test::quote(f16) + " --calib " +
      test::quote(test::fixtures_dir() / "corpora/tinystories_valid_subset.txt") +
      " --calib-samples 4 --calib-seq 64 --json");
  ASSERT_EQ(s.exit_code, 0) << s.err;
  EXPECT_FALSE(nlohmann::json::parse(s.out)["modules"].empty()) << s.out;
}

TEST(GgufInputE2E, QuantizedAndTruncatedInputsAreOneLineErrors) {
  QF_REQUIRE_FIXTURES();
  test::ScratchDir tmp;
  const fs::path q8 = tmp / "q8.gguf";
  ASSERT_EQ(test::run_qforge("quantize " + test::quote(stories_gguf()) + " -o " +
                             test::quote(q8) + " --export gguf --format q8_0")
                .exit_code,
            0);
  expect_one_line_error(
      test::run_qforge("quantize " + test::quote(q8) + " -o " + test::quote(tmp / "o") +
                       " --format nvfp4"),
      q8.string() + ": tensor 'token_embd.weight' is q8_0: quantize reads GGUF files whose "
                    "weights are F32, F16 or BF16");
  // A header whose head count is 0 (a fuzzer's finding: the head size divided by it).
  GgufMetadata zero_heads;
  zero_heads.set_string("general.architecture", "llama");
  for (const char* key : {"llama.embedding_length", "llama.attention.head_count",
                          "llama.feed_forward_length", "llama.block_count"})
    zero_heads.set_u32(key, std::string_view(key) == "llama.attention.head_count" ? 0 : 8);
  const fs::path zero = tmp / "zero-heads.gguf";
  GgufWriter w(zero, zero_heads, {});
  w.finish();
  expect_one_line_error(test::run_qforge("quantize " + test::quote(zero) + " -o " +
                                         test::quote(tmp / "o3") + " --format nvfp4"),
                        zero.string() + ": llama.attention.head_count is 0");
  const std::string bytes = test::read_file(stories_gguf());
  const fs::path cut = tmp / "cut.gguf";
  test::write_file(cut, bytes.substr(0, bytes.size() / 2));
  expect_one_line_error(test::run_qforge("quantize " + test::quote(cut) + " -o " +
                                         test::quote(tmp / "o2") + " --format nvfp4"),
                        cut.string() + ": ");
  EXPECT_FALSE(fs::exists(tmp / "o2"));
}

}  // namespace
}  // namespace qf

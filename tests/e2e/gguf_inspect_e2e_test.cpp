// `qforge inspect FILE.gguf`: metadata (long arrays summarised), tensors with their ggml types,
// bits per matrix weight, --json; and a damaged file is the reader's one-line error.
#include "formats/ggml_types.h"
#include "io/gguf_writer.h"
#include "test_util.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace qf {
namespace {

namespace fs = std::filesystem;

// A [rows, 256] Q4_0 matrix, an F32 norm and a 1000-token vocabulary.
fs::path write_sample(const fs::path& dir) {
  const int64_t cols = 256, rows = 8;
  GgufMetadata m;
  m.set_string("general.architecture", "llama");
  m.set_u32("llama.block_count", 1);
  m.set_f32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
  std::vector<std::string> tokens;
  for (int i = 0; i < 1000; ++i) tokens.push_back(fmt::format("t{}", i));
  m.set_string_array("tokenizer.ggml.tokens", tokens);
  std::vector<float> w(size_t(rows * cols));
  for (size_t i = 0; i < w.size(); ++i) w[i] = float(int(i % 13) - 6) * 0.01f;
  const GgmlTypeInfo& q4 = ggml_type_info(GgmlType::Q4_0);
  std::vector<uint8_t> q(size_t(rows * cols / q4.block_size * q4.block_bytes));
  q4.quantize(w.data(), q.data(), int64_t(w.size()));
  std::vector<float> norm(size_t(cols), 1.f);
  const fs::path path = dir / "sample.gguf";
  GgufWriter wr(path, m,
                {{"blk.0.attn_q.weight", GgmlType::Q4_0, {cols, rows}},
                 {"blk.0.attn_norm.weight", GgmlType::F32, {cols}}});
  wr.write("blk.0.attn_q.weight", std::as_bytes(std::span(q)));
  wr.write("blk.0.attn_norm.weight", std::as_bytes(std::span(norm)));
  wr.finish();
  return path;
}

TEST(GgufInspectE2E, ListsMetadataAndTensorsAsTextAndJson) {
  test::ScratchDir tmp;
  const fs::path path = write_sample(tmp.path());
  const auto text = test::run_qforge("inspect " + test::quote(path));
  ASSERT_EQ(text.exit_code, 0) << text.out;
  EXPECT_NE(text.out.find("blk.0.attn_q.weight"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("q4_0"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("[8, 256]"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("GGUF v3"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("4.500"), std::string::npos) << text.out;  // 18 bytes / 32

  const auto js = test::run_qforge("inspect " + test::quote(path) + " --json");
  ASSERT_EQ(js.exit_code, 0) << js.out;
  const auto j = nlohmann::json::parse(js.out);
  EXPECT_EQ(j["format"], "gguf");
  EXPECT_EQ(j["architecture"], "llama");
  EXPECT_EQ(j["metadata"]["llama.block_count"], 1);
  const auto& vocab = j["metadata"]["tokenizer.ggml.tokens"];
  EXPECT_EQ(vocab["array"], "string");
  EXPECT_EQ(vocab["count"], 1000);
  EXPECT_EQ(vocab["head"].size(), 8u);
  EXPECT_EQ(vocab["head"][1], "t1");
  ASSERT_EQ(j["tensors"].size(), 2u);
  EXPECT_EQ(j["tensors"][0]["type"], "q4_0");
  EXPECT_EQ(j["tensors"][0]["shape"], nlohmann::json({8, 256}));
  EXPECT_EQ(j["tensors"][0]["bytes"], 8 * 8 * 18);
  EXPECT_DOUBLE_EQ(j["bits_per_matrix_weight"].get<double>(), 4.5);
}

TEST(GgufInspectE2E, TruncatedFileIsTheReadersOneLineError) {
  test::ScratchDir tmp;
  const fs::path path = write_sample(tmp.path());
  fs::resize_file(path, fs::file_size(path) - 100);
  const auto r = test::run_qforge("inspect " + test::quote(path));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find(path.string()), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
}

}  // namespace
}  // namespace qf

// Calibration text loading: windows, BOS, deterministic seeded selection, JSON Lines, bad input.
#include "calib/calibration_data.h"
#include "core/error.h"
#include "io/tokenizer.h"
#include "test_util.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>

namespace fs = std::filesystem;

namespace qf {
namespace {

std::unique_ptr<Tokenizer> stories_tokenizer() {
  return Tokenizer::load(test::fixtures_dir() / "models" / "stories260K-hf");
}

TEST(CalibrationData, WindowsFromPlainTextAreSeededAndStartWithBos) {
  QF_REQUIRE_FIXTURES();
  const auto tok = stories_tokenizer();
  CalibrationOptions o;
  o.files = {test::fixtures_dir() / "corpora" / "tinyshakespeare.txt"};
  o.samples = 16;
  o.seq_len = 64;
  const CalibrationData a = load_calibration_data(o, *tok);
  ASSERT_EQ(a.windows.size(), 16u);
  EXPECT_TRUE(a.warnings.empty());
  for (const auto& w : a.windows) {
    ASSERT_EQ(w.size(), 64u);
    EXPECT_EQ(w[0], tok->bos_id());
  }
  EXPECT_EQ(a.tokens(), 16 * 64);
  EXPECT_EQ(load_calibration_data(o, *tok).windows, a.windows);  // same seed, same windows
  o.seed = 1;
  EXPECT_NE(load_calibration_data(o, *tok).windows, a.windows);
}

// `qforge tokenize --calib` prints exactly the windows quantize calibrates on (the interop
// harness feeds them to the reference tools).
TEST(CalibrationData, TokenizeCommandPrintsTheWindows) {
  QF_REQUIRE_FIXTURES();
  const auto tok = stories_tokenizer();
  CalibrationOptions o;
  o.files = {test::fixtures_dir() / "corpora" / "tinyshakespeare.txt"};
  o.samples = 3;
  o.seq_len = 16;
  o.seed = 7;
  const CalibrationData want = load_calibration_data(o, *tok);
  const std::string args = test::quote(test::model_dir("stories260K-hf")) + " --calib " +
                           test::quote(o.files[0]) + " --calib-samples 3 --calib-seq 16 --seed 7";
  const test::CommandResult json = test::run_qforge("tokenize " + args + " --json");
  ASSERT_EQ(json.exit_code, 0) << json.err;
  const auto j = nlohmann::json::parse(json.out);
  EXPECT_EQ(j["windows"].get<std::vector<std::vector<int32_t>>>(), want.windows);
  EXPECT_EQ(j["tokens_available"].get<int64_t>(), want.tokens_available);
  const test::CommandResult plain = test::run_qforge("tokenize " + args);
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  EXPECT_EQ(std::count(plain.out.begin(), plain.out.end(), '\n'), 3);
  EXPECT_NE(test::run_qforge("tokenize " + args + " -p hello").exit_code, 0);
  EXPECT_NE(test::run_qforge("tokenize " + args + " --no-bos").err.find("--no-bos does not apply"),
            std::string::npos);
}

TEST(CalibrationData, JsonLinesAndFewerWindowsThanAsked) {
  QF_REQUIRE_FIXTURES();
  const auto tok = stories_tokenizer();
  test::ScratchDir dir;
  test::write_file(dir / "c.jsonl",
                   "{\"text\": \"Once upon a time there was a cat.\"}\n\n"
                   "{\"text\": \"The cat liked to play in the sun all day long.\", \"id\": 2}\n");
  CalibrationOptions o;
  o.files = {dir / "c.jsonl"};
  o.samples = 100;
  o.seq_len = 8;
  const CalibrationData d = load_calibration_data(o, *tok);
  EXPECT_GT(d.windows.size(), 0u);
  EXPECT_LT(d.windows.size(), 100u);
  EXPECT_EQ(d.warnings.size(), 1u);
}

TEST(CalibrationData, BadInputIsNamed) {
  QF_REQUIRE_FIXTURES();
  const auto tok = stories_tokenizer();
  test::ScratchDir dir;
  auto expect_error = [&](const std::string& file, const std::string& bytes, const std::string& phrase) {
    test::write_file(dir / file, bytes);
    CalibrationOptions o;
    o.files = {dir / file};
    o.seq_len = 16;
    try {
      load_calibration_data(o, *tok);
      ADD_FAILURE() << "no error for " << file;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(phrase), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(file), std::string::npos) << e.what();
    }
  };
  expect_error("latin1.txt", "caf\xe9 au lait and more text here to fill a window", "not UTF-8");
  expect_error("bad.jsonl", "{\"text\": 3}\n", "no string field \"text\"");
  expect_error("broken.jsonl", "{\"text\": \n", "broken.jsonl:1: invalid JSON");
  expect_error("short.txt", "Hi.", "fewer than one window");
}

}  // namespace
}  // namespace qf

// Bad input to the tokenizers: missing and malformed files, features not implemented, text
// that is not UTF-8. Each must be one qf::Error line naming the file; and the CLI.
#include "core/error.h"
#include "io/tokenizer.h"
#include "test_util.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <string>

namespace fs = std::filesystem;

namespace qf {
namespace {

// The message of the qf::Error that loading `dir` throws ("" if none).
std::string load_error(const fs::path& dir) {
  try {
    Tokenizer::load(dir);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

void expect_one_line_naming(const std::string& message, const std::string& file,
                            const std::string& reason) {
  EXPECT_EQ(message.rfind(file, 0), 0u) << "message does not start with " << file << ": "
                                        << message;
  EXPECT_NE(message.find(reason), std::string::npos) << message;
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
}

// A small valid byte-level tokenizer.json: bytes a, b and their merge.
nlohmann::json small_tokenizer() {
  return nlohmann::json::parse(R"({
    "added_tokens": [], "normalizer": null, "post_processor": null,
    "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "use_regex": true},
    "decoder": {"type": "ByteLevel"},
    "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b"]}})");
}

TEST(TokenizerErrors, MissingFiles) {
  test::ScratchDir dir;
  expect_one_line_naming(load_error(dir / "nope"), (dir / "nope").string(), "not found");
  expect_one_line_naming(load_error(dir.path()), dir.path().string(), "no tokenizer");
  test::write_file(dir / "vocab.json", "{}");
  expect_one_line_naming(load_error(dir.path()), dir.path().string(),
                         "vocab.json without merges.txt");
  test::write_file(dir / "file", "x");
  expect_one_line_naming(load_error(dir / "file"), (dir / "file").string(), "not a directory");
}

TEST(TokenizerErrors, MalformedJson) {
  test::ScratchDir dir;
  const std::string file = (dir / "tokenizer.json").string();
  test::write_file(dir / "tokenizer.json", "{\"model\": {\"type\": \"BPE\",");
  expect_one_line_naming(load_error(dir.path()), file, "invalid JSON");
  test::write_file(dir / "tokenizer.json", "[1, 2]");
  expect_one_line_naming(load_error(dir.path()), file, "not an object");
  test::write_file(dir / "tokenizer.json", "{}");
  expect_one_line_naming(load_error(dir.path()), file, "no \"model\"");

  test::write_file(dir / "tokenizer.json", small_tokenizer().dump());
  EXPECT_EQ(load_error(dir.path()), "");
  // A malformed config file is named too.
  test::write_file(dir / "tokenizer_config.json", "{oops");
  expect_one_line_naming(load_error(dir.path()), (dir / "tokenizer_config.json").string(),
                         "invalid JSON");
  test::write_file(dir / "tokenizer_config.json", R"({"bos_token": 7})");
  expect_one_line_naming(load_error(dir.path()), (dir / "tokenizer_config.json").string(),
                         "bos_token");
  test::write_file(dir / "tokenizer_config.json", R"({"add_bos_token": "yes"})");
  expect_one_line_naming(load_error(dir.path()), (dir / "tokenizer_config.json").string(),
                         "add_bos_token");
  fs::remove(dir / "tokenizer_config.json");
  test::write_file(dir / "config.json", R"({"eos_token_id": "two"})");
  expect_one_line_naming(load_error(dir.path()), (dir / "config.json").string(),
                         "eos_token_id");
}

TEST(TokenizerErrors, BadContentsAndUnsupportedFeatures) {
  test::ScratchDir dir;
  const std::string file = (dir / "tokenizer.json").string();
  auto check = [&](const nlohmann::json& j, const std::string& reason) {
    test::write_file(dir / "tokenizer.json", j.dump());
    expect_one_line_naming(load_error(dir.path()), file, reason);
  };
  nlohmann::json j = small_tokenizer();
  j["model"]["type"] = "WordPiece";
  check(j, "model type \"WordPiece\" is not supported");
  j = small_tokenizer();
  j["model"]["merges"] = {"a c"};
  check(j, "not in the vocabulary");
  j = small_tokenizer();
  j["model"]["vocab"]["c"] = -3;
  check(j, "not an integer from 0 to 2097151");
  j = small_tokenizer();
  j["model"]["vocab"]["c"] = 2'000'000'000;
  check(j, "not an integer from 0 to 2097151");
  // 2^31 - 1 once overflowed `id + 1` (SIGSEGV).
  j = small_tokenizer();
  j["model"]["vocab"]["c"] = 2147483647;
  check(j, "not an integer from 0 to 2097151");
  j = small_tokenizer();
  j["added_tokens"] = {{{"content", "x"}, {"id", 2147483647}}};
  check(j, "no valid \"id\" (0 to 2097151)");
  // 1 << 24 was accepted: two strings per id made a 200-byte file cost 1.2 GB and 16 s under
  // ASan (an input tried by hand on tokenizer_json_fuzz).
  j = small_tokenizer();
  j["model"]["vocab"]["c"] = 1 << 21;
  check(j, "not an integer from 0 to 2097151");
  j = small_tokenizer();
  j["normalizer"] = {{"type", "BertNormalizer"}};
  check(j, "normalizer type \"BertNormalizer\" is not supported");
  j = small_tokenizer();
  j["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "(unclosed"}}},
                        {"behavior", "Isolated"}};
  check(j, "regex does not compile");
  j = small_tokenizer();
  j["decoder"] = {{"type", "WordPiece"}};
  check(j, "decoder type \"WordPiece\" is not supported");
  j = small_tokenizer();
  j["added_tokens"] = {{{"content", "x"}}};
  check(j, "no valid \"id\"");
  j = small_tokenizer();
  j["model"]["unk_token"] = "<unk>";
  check(j, "unk_token");
  j = small_tokenizer();
  j["pre_tokenizer"] = {{"type", "Sequence"},
                        {"pretokenizers", {{{"type", "ByteLevel"}}, {{"type", "Digits"}}}}};
  check(j, "ByteLevel pre-tokenizer before other pre-tokenizers");

  // GPT-2 style files and sentencepiece models.
  test::ScratchDir gpt;
  test::write_file(gpt / "vocab.json", R"({"a": 0, "b": 1, "ab": 2})");
  test::write_file(gpt / "merges.txt", "#version: 0.2\na b\nab\n");
  expect_one_line_naming(load_error(gpt.path()), (gpt / "merges.txt").string(), "line 3");
  test::write_file(gpt / "vocab.json", R"({"a": 0, "b": 1, "ab": 2147483647})");
  test::write_file(gpt / "merges.txt", "#version: 0.2\na b\n");
  EXPECT_NE(load_error(gpt.path()).find("not an integer from 0 to 2097151"), std::string::npos)
      << load_error(gpt.path());
  test::ScratchDir cfg;
  test::write_file(cfg / "vocab.json", R"({"a": 0, "b": 1, "ab": 2})");
  test::write_file(cfg / "merges.txt", "#version: 0.2\na b\n");
  test::write_file(cfg / "tokenizer_config.json",
                   R"({"added_tokens_decoder": {"2147483647": {"content": "<x>"}}})");
  expect_one_line_naming(load_error(cfg.path()), (cfg / "tokenizer_config.json").string(),
                         "is not a token id (0 to 2097151)");
  test::ScratchDir spm;
  test::write_file(spm / "tokenizer.model", "this is not a protobuf");
  expect_one_line_naming(load_error(spm.path()), (spm / "tokenizer.model").string(),
                         "not a sentencepiece model");
}

TEST(TokenizerErrors, TextThatIsNotUtf8) {
  test::ScratchDir dir;
  test::write_file(dir / "tokenizer.json", small_tokenizer().dump());
  const auto tok = Tokenizer::load(dir.path());
  EXPECT_EQ(tok->encode("abab", false), (std::vector<int32_t>{2, 2}));
  const std::string file = (dir / "tokenizer.json").string();
  for (const std::string bad : {"ab\xff", "\xc0\xaf", "\xed\xa0\x80", "a\xe2\x82", "\xf4\x90\x80\x80"}) {
    try {
      tok->encode(bad, false);
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      expect_one_line_naming(e.what(), file, "not valid UTF-8");
    }
  }
  EXPECT_THROW(tok->decode(std::vector<int32_t>{3}), Error);
  EXPECT_THROW(tok->piece(-1), Error);
  EXPECT_NO_THROW(Tokenizer::require_utf8("héllo", "x"));
  try {
    Tokenizer::require_utf8("ok\x80", "input.txt");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "input.txt: not valid UTF-8 (byte 0x80 at offset 2)");
  }
  QF_REQUIRE_FIXTURES();
  const auto spm = Tokenizer::load(test::fixtures_dir() / "models" / "stories260K-hf");
  EXPECT_THROW(spm->encode("\xff", true), Error);
}

TEST(TokenizerCli, PrintsIds) {
  QF_REQUIRE_FIXTURES();
  const std::string model = (test::fixtures_dir() / "models" / "tinystories-656K-hf").string();
  auto r = test::run_qforge("tokenize '" + model + "' -p 'Once upon a time'");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "1 80 147 201 282 57\n");
  r = test::run_qforge("tokenize '" + model + "' -p 'Once upon a time' --no-bos");
  EXPECT_EQ(r.out, "80 147 201 282 57\n");
  r = test::run_qforge("tokenize '" + model + "' -p 'Once upon a time' --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["count"], 6);
  EXPECT_EQ(j["bos"], true);
  EXPECT_EQ(j["ids"], nlohmann::json({1, 80, 147, 201, 282, 57}));
  EXPECT_EQ(j["pieces"][3], "ce▁");

  test::ScratchDir dir;
  test::write_file(dir / "text.txt", "Once upon a time");
  r = test::run_qforge("tokenize '" + model + "' --file '" + (dir / "text.txt").string() + "'");
  EXPECT_EQ(r.out, "1 80 147 201 282 57\n");
}

TEST(TokenizerCli, Errors) {
  QF_REQUIRE_FIXTURES();
  const std::string model = (test::fixtures_dir() / "models" / "tinystories-656K-hf").string();
  test::ScratchDir dir;
  const std::string bad = (dir / "bad.txt").string();
  test::write_file(bad, "caf\xe9");
  auto r = test::run_qforge("tokenize '" + model + "' --file '" + bad + "'");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err, "qforge: error: " + bad + ": not valid UTF-8 (byte 0xe9 at offset 3)\n");
  r = test::run_qforge("tokenize '" + model + "' -p \"$(printf 'a\\377')\"");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err, "qforge: error: --prompt: not valid UTF-8 (byte 0xff at offset 1)\n");
  r = test::run_qforge("tokenize '" + model + "'");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("-p TEXT or --file F"), std::string::npos) << r.err;
  r = test::run_qforge("tokenize '" + dir.path().string() + "' -p x");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("no tokenizer"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace qf

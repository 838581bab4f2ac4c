// Tests of tokenizer.json tokenizers: TinyStories-656K (sentencepiece-style BPE with byte
// fallback and a "▁" normalizer), Qwen3 (byte-level BPE, regex pre-tokenizer, NFC, added
// tokens) and synthetic files for the pre-tokenizers, normalizers and added-token flags the
// fixtures do not use. Expected ids come from the Hugging Face `tokenizers` library (0.23.3,
// Tokenizer.from_file(...).encode(text, add_special_tokens=False)), pasted here.
#include "core/error.h"
#include "io/tokenizer.h"
#include "test_util.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <string>
#include <thread>
#include <vector>

namespace fs = std::filesystem;

namespace qf {
namespace {

using Ids = std::vector<int32_t>;

fs::path tinystories_dir() { return test::fixtures_dir() / "models" / "tinystories-656K-hf"; }

const Tokenizer& qwen3() {
  static const std::unique_ptr<Tokenizer> tok =
      Tokenizer::load(test::fixtures_dir() / "tokenizers" / "qwen3");
  return *tok;
}

// FNV-1a over the ids, to pin a long sequence without pasting it.
uint64_t fnv(const Ids& ids) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (const int32_t id : ids) h = (h ^ uint64_t(id)) * 0x100000001b3ull;
  return h;
}

// The concatenated decode_next() of a sequence equals decode() (for valid UTF-8 output).
std::string streamed(const Tokenizer& tok, const Ids& ids) {
  std::string s;
  int32_t prev = -1;
  for (const int32_t id : ids) {
    s += tok.decode_next(prev, id);
    prev = id;
  }
  return s;
}

TEST(TokenizerHf, TinyStoriesSpecialsFromConfigs) {
  QF_REQUIRE_FIXTURES();
  const auto tok = Tokenizer::load(tinystories_dir());
  EXPECT_EQ(tok->vocab_size(), 2048);
  EXPECT_EQ(tok->bos_id(), 1);
  EXPECT_EQ(tok->eos_id(), 2);
  EXPECT_TRUE(tok->add_bos_by_default());
  EXPECT_EQ(tok->piece(1), "<|start_story|>");
  EXPECT_EQ(tok->token_id("<|end_story|>"), 2);
  EXPECT_EQ(tok->token_id("upon▁a▁tim"), 282);
  EXPECT_EQ(tok->token_id("no such token"), -1);
}

TEST(TokenizerHf, TinyStoriesOnceUponATime) {
  QF_REQUIRE_FIXTURES();
  const auto tok = Tokenizer::load(tinystories_dir());
  EXPECT_EQ(tok->encode("Once upon a time", false), (Ids{80, 147, 201, 282, 57}));
  EXPECT_EQ(tok->encode("Once upon a time", true), (Ids{1, 80, 147, 201, 282, 57}));
  EXPECT_EQ(tok->piece(80), "▁");
  EXPECT_EQ(tok->piece(201), "ce▁");
  EXPECT_EQ(tok->decode(Ids{80, 147, 201, 282, 57}), "Once upon a time");
  // After BOS the prefix space is dropped too, so the text follows BOS's text directly.
  EXPECT_EQ(tok->decode(Ids{1, 80, 147, 201, 282, 57}), "<|start_story|>Once upon a time");
  EXPECT_EQ(tok->decode_next(1, 80), "");
  EXPECT_EQ(tok->decode_next(57, 80), " ");
  EXPECT_EQ(tok->encode("", false), Ids{});
  EXPECT_EQ(tok->encode("", true), Ids{1});
}

TEST(TokenizerHf, TinyStoriesMatchesHuggingFace) {
  QF_REQUIRE_FIXTURES();
  const auto tok = Tokenizer::load(tinystories_dir());
  // Added tokens are "normalized": matched after the "▁" normalizer ran, as HF does (so
  // "a<|end_story|>" is not a special token, "▁<|end_story|>" is).
  EXPECT_EQ(tok->encode("<|start_story|>Once upon", false), (Ids{1, 147, 201, 189, 111}));
  EXPECT_EQ(tok->encode("a<|end_story|>b", false), (Ids{85, 208, 183, 209, 210, 54}));
  EXPECT_EQ(tok->encode(" <|end_story|> x", false), (Ids{80, 2, 80, 76}));
  EXPECT_EQ(tok->encode("  ", false), (Ids{80, 80, 80}));
  EXPECT_EQ(tok->encode("hello\n\nworld", false), (Ids{80, 109, 113, 67, 3, 3, 410, 555}));
  // No <0xXX> tokens in this vocabulary: unknown characters fall to <unk>, fused.
  EXPECT_EQ(tok->encode("é😀 naïve", false), (Ids{80, 0, 80, 557, 0, 1032}));
  EXPECT_EQ(tok->encode("Hello\tworld", false), (Ids{80, 1288, 67, 0, 410, 555}));
}

TEST(TokenizerHf, TinyStoriesLongTextMatchesHuggingFace) {
  QF_REQUIRE_FIXTURES();
  // Without a pre-tokenizer the whole text is one BPE word (thousands of symbols): the
  // rank-bucket merge loop must give HF's heap order exactly.
  const auto tok = Tokenizer::load(tinystories_dir());
  const std::string text =
      test::read_file(test::fixtures_dir() / "corpora" / "tinystories_valid_subset.txt")
          .substr(0, 3000);
  const Ids ids = tok->encode(text, false);
  ASSERT_EQ(ids.size(), 677u);
  EXPECT_EQ(Ids(ids.begin(), ids.begin() + 10),
            (Ids{80, 1030, 1063, 677, 1169, 237, 624, 1681, 1005, 490}));
  EXPECT_EQ(Ids(ids.end() - 10, ids.end()),
            (Ids{120, 1287, 260, 77, 122, 3, 429, 1636, 1556, 906}));
  EXPECT_EQ(fnv(ids), 0x10f237e9c3935fddull);
}

TEST(TokenizerHf, TinyStoriesRoundTripsStories) {
  QF_REQUIRE_FIXTURES();
  const auto tok = Tokenizer::load(tinystories_dir());
  const std::string corpus =
      test::read_file(test::fixtures_dir() / "corpora" / "tinystories_valid_subset.txt");
  // Whole text, and line by line (each line a story or a paragraph).
  const std::string text = corpus.substr(0, 100'000);
  const Ids ids = tok->encode(text, true);
  // EXPECT_TRUE: a failure should not print 100 kB twice.
  EXPECT_TRUE(tok->decode(ids) == "<|start_story|>" + text);
  EXPECT_TRUE(streamed(*tok, ids) == "<|start_story|>" + text);
  size_t lines = 0;
  for (size_t pos = 0; pos < text.size() && lines < 300; ++lines) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(pos, end - pos);
    pos = end + 1;
    EXPECT_EQ(tok->decode(tok->encode(line, false)), line);
  }
  EXPECT_GT(lines, 100u);
}

TEST(TokenizerHf, Qwen3Specials) {
  QF_REQUIRE_FIXTURES();
  const Tokenizer& tok = qwen3();
  EXPECT_EQ(tok.vocab_size(), 151669);  // 151,643 + 26 added
  EXPECT_EQ(tok.bos_id(), -1);          // tokenizer_config.json: "bos_token": null
  EXPECT_EQ(tok.eos_id(), 151645);      // <|im_end|>
  EXPECT_FALSE(tok.add_bos_by_default());
  EXPECT_EQ(tok.encode("hi", true), tok.encode("hi", false));
  EXPECT_EQ(tok.piece(151668), "</think>");
  EXPECT_EQ(tok.piece(785), "The");
  EXPECT_EQ(tok.piece(279), "Ġthe");
}

TEST(TokenizerHf, Qwen3MatchesHuggingFace) {
  QF_REQUIRE_FIXTURES();
  const Tokenizer& tok = qwen3();
  const std::vector<std::pair<std::string, Ids>> cases = {
      {"The quick brown fox jumps over the lazy dog.",
       {785, 3974, 13876, 38835, 34208, 916, 279, 15678, 5562, 13}},
      {"我喜欢用中文写代码，也喜欢喝茶。",
       {109366, 11622, 104811, 61443, 46100, 3837, 74763, 99729, 116889, 1773}},
      {"def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n",
       {750, 15801, 1445, 982, 262, 470, 308, 421, 308, 366, 220, 17, 770, 15801, 1445, 481, 220,
        16, 8, 488, 15801, 1445, 481, 220, 17, 340}},
      {"Emoji: 😀👍🏽 👨‍👩‍👧 🇫🇷!",
       {92731, 25, 90316, 144349, 145375, 61804, 101, 378, 235, 145233, 378, 235, 145665, 11162,
        229, 104, 145070, 0}},
      {"Numbers 1234567 and 3.14159, 1,000,000 or ٣٤٥",
       {27237, 220, 16, 17, 18, 19, 20, 21, 22, 323, 220, 18, 13, 16, 19, 16, 20, 24, 11, 220, 16,
        11, 15, 15, 15, 11, 15, 15, 15, 476, 220, 149, 96, 149, 97, 149, 98}},
      {"<|im_start|>user\nHello!<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\nHi",
       {151644, 872, 198, 9707, 0, 151645, 198, 151644, 77091, 198, 151667, 271, 151668, 271,
        13048}},
      // NFC: "e" + U+0301 encodes as "é", and Hangul jamo as the syllable.
      {"Caf\u00e9 vs Cafe\u0301 (NFC), \uac00 vs \u1100\u1161",
       {34, 2577, 963, 6165, 65671, 320, 45, 6754, 701, 35509, 6165, 35509}},
      {"I'M here, YOU'LL see, they'Re   \t spaces\r\n\r\nend",
       {40, 27603, 1588, 11, 14985, 6, 4086, 1490, 11, 807, 49427, 39767, 12621, 871, 408}},
  };
  for (const auto& [text, expected] : cases) {
    const Ids ids = tok.encode(text, false);
    EXPECT_EQ(ids, expected) << text;
    if (text.find("e\u0301") == std::string::npos && text.find("\u1100") == std::string::npos) {
      EXPECT_EQ(tok.decode(ids), text);
      EXPECT_EQ(streamed(tok, ids), text);
    }
  }
}

TEST(TokenizerHf, Gpt2EndOfTextIsSpecial) {
  QF_REQUIRE_FIXTURES();
  const auto tok = Tokenizer::load(test::fixtures_dir() / "tokenizers" / "gpt2");
  EXPECT_EQ(tok->encode("Hello<|endoftext|> world", false), (Ids{15496, 50256, 995}));
  EXPECT_EQ(tok->decode(Ids{15496, 50256, 995}), "Hello<|endoftext|> world");
  EXPECT_EQ(tok->piece(18435), "ĠHello");
  // A character split over byte-level tokens streams in pieces that join up.
  const Ids llama = tok->encode(" 🦙", false);
  EXPECT_EQ(llama, (Ids{12520, 99, 247}));
  EXPECT_EQ(streamed(*tok, llama), " 🦙");
  EXPECT_EQ(tok->decode(Ids{99}), "\xEF\xBF\xBD");  // a lone continuation byte
}

TEST(TokenizerHf, ConcurrentEncodingMatchesSerial) {
  QF_REQUIRE_FIXTURES();
  // The word cache is shared between threads; a fresh tokenizer fills it concurrently.
  const fs::path gpt2 = test::fixtures_dir() / "tokenizers" / "gpt2";
  const auto serial = Tokenizer::load(gpt2);
  const auto shared = Tokenizer::load(gpt2);
  const std::string corpus =
      test::read_file(test::fixtures_dir() / "corpora" / "wikitext-2-raw-test.lf.txt");
  constexpr int kThreads = 4;
  constexpr size_t kSlice = 100'000;
  std::vector<Ids> expected(kThreads), got(kThreads);
  for (int t = 0; t < kThreads; ++t)
    expected[size_t(t)] = serial->encode(corpus.substr(size_t(t % 2) * kSlice, kSlice), false);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      got[size_t(t)] = shared->encode(corpus.substr(size_t(t % 2) * kSlice, kSlice), false);
    });
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_TRUE(got[size_t(t)] == expected[size_t(t)]) << t;
}

// A tokenizer.json written into a scratch directory.
fs::path write_tokenizer(const test::ScratchDir& dir, const std::string& json) {
  test::write_file(dir / "tokenizer.json", json);
  return dir.path();
}

// Metaspace (prepend_scheme "first") and Digits pre-tokenizers, a Metaspace decoder, and
// added tokens with lstrip, rstrip and single_word.
const char* kMetaspaceJson = R"json({"version": "1.0", "truncation": null, "padding": null, "added_tokens": [{"id": 27, "content": "[MASK]", "single_word": false, "lstrip": true, "rstrip": false, "normalized": false, "special": true}, {"id": 28, "content": "<x>", "single_word": false, "lstrip": false, "rstrip": true, "normalized": false, "special": true}, {"id": 29, "content": "ab", "single_word": true, "lstrip": false, "rstrip": false, "normalized": false, "special": false}], "normalizer": null, "pre_tokenizer": {"type": "Sequence", "pretokenizers": [{"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": true}, {"type": "Digits", "individual_digits": true}]}, "post_processor": null, "decoder": {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": true}, "model": {"type": "BPE", "dropout": null, "unk_token": "<unk>", "continuing_subword_prefix": null, "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false, "ignore_merges": false, "vocab": {"<unk>": 0, "▁": 1, "a": 2, "b": 3, "c": 4, "d": 5, "e": 6, "h": 7, "l": 8, "o": 9, "t": 10, "x": 11, "z": 12, "0": 13, "1": 14, "2": 15, "3": 16, "th": 17, "the": 18, "▁the": 19, "ll": 20, "ell": 21, "hell": 22, "hello": 23, "▁hello": 24, "12": 25, "▁a": 26}, "merges": [["t", "h"], ["th", "e"], ["▁", "the"], ["l", "l"], ["e", "ll"], ["h", "ell"], ["hell", "o"], ["▁", "hello"], ["1", "2"], ["▁", "a"]]}})json";

TEST(TokenizerHf, MetaspaceDigitsAndAddedTokenFlagsMatchHuggingFace) {
  test::ScratchDir dir;
  const auto tok = Tokenizer::load(write_tokenizer(dir, kMetaspaceJson));
  EXPECT_EQ(tok->vocab_size(), 30);
  const std::vector<std::tuple<std::string, Ids, std::string>> cases = {
      {"the hello", {19, 24}, "the hello"},
      {"hello the", {24, 19}, "hello the"},
      {" the  hello ", {19, 1, 24, 1}, "the  hello "},
      {"12 123 1212", {1, 14, 15, 1, 14, 15, 16, 1, 14, 15, 14, 15}, "12 123 1212"},
      {"a [MASK] b", {26, 27, 1, 3}, "a[MASK] b"},
      {"a  [MASK]  b", {26, 27, 1, 1, 3}, "a[MASK]  b"},
      {"x<x>  the", {1, 11, 28, 18}, "x<x>the"},
      {"ab cab abc ab", {29, 1, 4, 2, 3, 26, 3, 4, 1, 29}, "ab cab abc ab"},
      {"zzz q", {1, 12, 12, 12, 1, 0}, "zzz <unk>"},
      {"[MASK]the", {27, 18}, "[MASK]the"},
      {"", {}, ""},
  };
  for (const auto& [text, ids, decoded] : cases) {
    EXPECT_EQ(tok->encode(text, false), ids) << text;
    EXPECT_EQ(tok->decode(ids), decoded) << text;
  }
}

// Split behaviours, Whitespace / WhitespaceSplit, Lowercase / Strip / regex Replace
// normalizers, a continuing-subword prefix, ignore_merges and fused unknowns.
const char* kSplitJson = R"json({"version": "1.0", "added_tokens": [], "normalizer": {"type": "Sequence", "normalizers": [{"type": "Lowercase"}, {"type": "Strip", "strip_left": true, "strip_right": true}, {"type": "Replace", "pattern": {"Regex": "\\s+"}, "content": " "}]}, "pre_tokenizer": null, "post_processor": null, "decoder": null, "model": {"type": "BPE", "dropout": null, "unk_token": "<unk>", "continuing_subword_prefix": "##", "end_of_word_suffix": null, "fuse_unk": true, "byte_fallback": false, "ignore_merges": true, "vocab": {"<unk>": 0, "a": 1, "##a": 2, "b": 3, "##b": 4, "c": 5, "##c": 6, "x": 7, "##x": 8, "y": 9, "##y": 10, "z": 11, "##z": 12, "-": 13, "##-": 14, ",": 15, "##,": 16, "ab": 17, "abc": 18, "xyz": 19, "##bc": 20}, "merges": [["a", "##b"], ["ab", "##c"], ["##b", "##c"]]}})json";

TEST(TokenizerHf, SplitBehavioursAndNormalizersMatchHuggingFace) {
  const std::vector<std::string> texts = {"  ABC-abc--xyz,,a-b  ", "xyz abcx-,-cab", "QQ abc"};
  const std::vector<std::pair<std::string, std::vector<Ids>>> cases = {
      {R"({"type": "Split", "pattern": {"String": "-"}, "behavior": "MergedWithPrevious", "invert": false})",
       {{18, 14, 18, 14, 13, 7, 10, 12, 16, 16, 2, 14, 3},
        {7, 10, 12, 0, 2, 20, 8, 14, 15, 14, 5, 2, 4},
        {0, 2, 20}}},
      {R"({"type": "Split", "pattern": {"String": "-"}, "behavior": "MergedWithNext", "invert": false})",
       {{18, 13, 2, 20, 13, 13, 8, 10, 12, 16, 16, 2, 13, 4},
        {7, 10, 12, 0, 2, 20, 8, 13, 16, 13, 6, 2, 4},
        {0, 2, 20}}},
      {R"({"type": "Split", "pattern": {"Regex": "[,-]"}, "behavior": "Contiguous", "invert": false})",
       {{18, 13, 18, 13, 14, 19, 15, 16, 1, 13, 3},
        {7, 10, 12, 0, 2, 20, 8, 13, 16, 14, 5, 2, 4},
        {0, 2, 20}}},
      {R"({"type": "Split", "pattern": {"Regex": "[a-c]+"}, "behavior": "Removed", "invert": true})",
       {{18, 18, 1, 3}, {18, 5, 2, 4}, {18}}},
      {R"({"type": "Sequence", "pretokenizers": [{"type": "WhitespaceSplit"}, {"type": "Split", "pattern": {"String": ","}, "behavior": "Removed", "invert": false}]})",
       {{18, 14, 2, 20, 14, 14, 8, 10, 12, 1, 14, 4}, {19, 18, 8, 14, 13, 6, 2, 4}, {0, 18}}},
      {R"({"type": "Whitespace"})",
       {{18, 13, 18, 13, 14, 19, 15, 16, 1, 13, 3}, {19, 18, 8, 13, 16, 14, 5, 2, 4}, {0, 18}}},
  };
  for (const auto& [pre, expected] : cases) {
    nlohmann::json j = nlohmann::json::parse(kSplitJson);
    j["pre_tokenizer"] = nlohmann::json::parse(pre);
    test::ScratchDir dir;
    const auto tok = Tokenizer::load(write_tokenizer(dir, j.dump()));
    for (size_t i = 0; i < texts.size(); ++i)
      EXPECT_EQ(tok->encode(texts[i], false), expected[i]) << pre << " on '" << texts[i] << "'";
  }
}

}  // namespace
}  // namespace qf

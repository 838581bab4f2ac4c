// Tests of sentencepiece tokenizers: the stories260K token stream of the perplexity protocol
// (fixtures README), BOS/EOS from the configs, decoding and streaming with byte pieces.
#include "core/error.h"
#include "io/tokenizer.h"
#include "test_util.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace fs = std::filesystem;

namespace qf {
namespace {

using Ids = std::vector<int32_t>;

fs::path stories_dir() { return test::fixtures_dir() / "models" / "stories260K-hf"; }
fs::path llama_dir() { return test::fixtures_dir() / "tokenizers" / "llama2-spm-32000"; }

TEST(TokenizerSentencepiece, Stories260KPerplexityStream) {
  QF_REQUIRE_FIXTURES();
  const auto tok = Tokenizer::load(stories_dir());
  EXPECT_EQ(tok->vocab_size(), 512);
  EXPECT_EQ(tok->bos_id(), 1);
  EXPECT_EQ(tok->eos_id(), 2);
  EXPECT_TRUE(tok->add_bos_by_default());
  // The fixtures' protocol: the first 20,000 characters (all ASCII, so also bytes), BOS once
  // at the start. 9,602 ids = BOS + 9,601 tokens, and the 256-token windows overlapping by
  // one score ids[1..9601]: 9,601 scored tokens, as the README states.
  const std::string text =
      test::read_file(test::fixtures_dir() / "corpora" / "tinystories_valid_subset.txt")
          .substr(0, 20'000);
  const Ids ids = tok->encode(text, true);
  ASSERT_EQ(ids.size(), 9602u);
  EXPECT_EQ(Ids(ids.begin(), ids.begin() + 12),
            (Ids{1, 301, 427, 309, 426, 301, 427, 309, 394, 265, 262, 415}));
  EXPECT_EQ(Ids(ids.end() - 5, ids.end()), (Ids{273, 413, 429, 260, 418}));
  // This model's normalizer drops extra whitespace (the slice ends in a space), so decoding
  // gives the text back as sentencepiece normalized it.
  ASSERT_EQ(text.back(), ' ');
  const std::string decoded = tok->decode(ids);
  EXPECT_TRUE(decoded == "<s>" + text.substr(0, text.size() - 1))
      << "decoded " << decoded.size() << " bytes";
}

TEST(TokenizerSentencepiece, LlamaPiecesAndBos) {
  QF_REQUIRE_FIXTURES();
  const auto tok = Tokenizer::load(llama_dir());
  EXPECT_EQ(tok->encode("Hello world", false), (Ids{15043, 3186}));
  EXPECT_EQ(tok->encode("Hello world", true), (Ids{1, 15043, 3186}));
  EXPECT_EQ(tok->piece(15043), "▁Hello");
  EXPECT_EQ(tok->piece(13), "<0x0A>");
  EXPECT_EQ(tok->token_id("▁Hello"), 15043);
  EXPECT_EQ(tok->token_id("certainly not a piece"), -1);
  EXPECT_EQ(tok->decode(Ids{1, 15043, 3186}), "<s>Hello world");
  EXPECT_EQ(tok->decode(Ids{15043, 3186, 2}), "Hello world</s>");
}

TEST(TokenizerSentencepiece, StreamingJoinsBytePieces) {
  QF_REQUIRE_FIXTURES();
  const auto tok = Tokenizer::load(llama_dir());
  const std::string text = " this is 🦙.cpp";
  const Ids ids = tok->encode(text, true);
  EXPECT_EQ(ids, (Ids{1, 29871, 445, 338, 29871, 243, 162, 169, 156, 29889, 8223}));
  std::string s;
  int32_t prev = -1;
  for (const int32_t id : ids) {
    s += tok->decode_next(prev, id);
    prev = id;
  }
  EXPECT_EQ(s, "<s>" + text);
  EXPECT_EQ(tok->decode_next(445, 338), " is");
  EXPECT_EQ(tok->decode_next(1, 15043), "Hello");   // after BOS: no prefix space
  EXPECT_EQ(tok->decode_next(-1, 15043), "Hello");  // at the start: none either
  EXPECT_EQ(tok->decode_next(243, 162), "\x9F");    // one byte of the four
  // An incomplete character decodes to U+FFFD.
  EXPECT_EQ(tok->decode(Ids{243, 162}), "\xEF\xBF\xBD");
}

TEST(TokenizerSentencepiece, BosEosFromConfigs) {
  QF_REQUIRE_FIXTURES();
  test::ScratchDir dir;
  test::write_file(dir / "tokenizer.model", test::read_file(llama_dir() / "tokenizer.model"));
  // tokenizer_config.json names the tokens; null means none; add_bos_token is honoured.
  test::write_file(dir / "tokenizer_config.json",
                   R"({"bos_token": {"content": "</s>"}, "eos_token": null, "add_bos_token": false})");
  auto tok = Tokenizer::load(dir.path());
  EXPECT_EQ(tok->bos_id(), 2);
  EXPECT_EQ(tok->eos_id(), -1);
  EXPECT_FALSE(tok->add_bos_by_default());
  // Without those keys config.json's ids are used (the first of a list).
  test::write_file(dir / "tokenizer_config.json", "{}");
  test::write_file(dir / "config.json", R"({"bos_token_id": 0, "eos_token_id": [13, 2]})");
  tok = Tokenizer::load(dir.path());
  EXPECT_EQ(tok->bos_id(), 0);
  EXPECT_EQ(tok->eos_id(), 13);
  EXPECT_TRUE(tok->add_bos_by_default());
  // Then generation_config.json, then the model's own.
  test::write_file(dir / "config.json", "{}");
  test::write_file(dir / "generation_config.json", R"({"eos_token_id": 29871})");
  tok = Tokenizer::load(dir.path());
  EXPECT_EQ(tok->bos_id(), 1);
  EXPECT_EQ(tok->eos_id(), 29871);
}

}  // namespace
}  // namespace qf

// Long texts are encoded in pieces cut where the ids provably do not change: the ids must equal
// the whole text's, for every tokenizer kind (sentencepiece with and without a dummy prefix,
// byte-level BPE of GPT-2, TinyStories and Qwen 3), across runs of spaces, newlines and multi-byte characters; for
// sentencepiece also the library's own encoding of the whole text.
#include "io/tokenizer.h"
#include "io/tokenizer_internal.h"
#include "test_util.h"

#include <gtest/gtest.h>
#include <sentencepiece_processor.h>

#include <algorithm>
#include <string>
#include <vector>

namespace fs = std::filesystem;

namespace qf {
namespace {

std::string long_text() {
  const fs::path c = test::fixtures_dir() / "corpora";
  return test::read_file(c / "tinyshakespeare.txt") +
         "  double  spaces\n\n\u00e9t\u00e9 \u4e2d\u6587 " +
         test::read_file(c / "wikitext-2-raw-test.lf.txt") +
         test::read_file(c / "tinystories_valid_subset.txt");
}

std::vector<int32_t> encode_whole(const Tokenizer& tok, const std::string& text) {
  size_t& chunk = tok::long_text_chunk_bytes();
  const size_t saved = chunk;
  chunk = text.size() + 1;
  std::vector<int32_t> ids = tok.encode(text, false);
  chunk = saved;
  return ids;
}

TEST(TokenizerLongText, PiecesEncodeAsTheWholeText) {
  QF_REQUIRE_FIXTURES();
  const std::string text = long_text();
  ASSERT_GT(text.size(), size_t(3) << 20);
  for (const fs::path& dir :
       {test::fixtures_dir() / "models" / "stories260K-hf",
        test::fixtures_dir() / "tokenizers" / "llama2-spm-32000",
        test::fixtures_dir() / "models" / "tinystories-656K-hf",
        test::fixtures_dir() / "tokenizers" / "qwen3", test::fixtures_dir() / "tokenizers" / "gpt2"}) {
    SCOPED_TRACE(dir.string());
    const auto tok = Tokenizer::load(dir);
    const std::vector<int32_t> ids = tok->encode(text, false);
    EXPECT_EQ(ids, encode_whole(*tok, text));
    if (fs::exists(dir / "tokenizer.model")) {
      sentencepiece::SentencePieceProcessor sp;
      ASSERT_TRUE(sp.Load((dir / "tokenizer.model").string()).ok());
      std::vector<int> lib;
      ASSERT_TRUE(sp.Encode(text, &lib).ok());
      ASSERT_EQ(ids.size(), lib.size());
      EXPECT_TRUE(std::equal(ids.begin(), ids.end(), lib.begin()));
    }
  }
}

}  // namespace
}  // namespace qf

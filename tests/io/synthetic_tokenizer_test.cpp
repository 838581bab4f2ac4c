// The made-up tokenizer of synthetic checkpoints loads with qforge's own loader, covers exactly
// the vocabulary, and round-trips text.
#include "io/synthetic_tokenizer.h"

#include "core/error.h"
#include "io/tokenizer.h"
#include "test_util.h"

#include <gtest/gtest.h>

namespace qf {
namespace {

TEST(SyntheticTokenizer, CoversTheVocabularyAndRoundTrips) {
  for (const int64_t vocab : {259, 300, 1024, 20000}) {
    test::ScratchDir dir;
    write_synthetic_tokenizer(dir.path(), vocab);
    const auto tok = Tokenizer::load(dir.path());
    EXPECT_EQ(tok->vocab_size(), vocab);
    EXPECT_EQ(tok->bos_id(), 1);
    EXPECT_EQ(tok->eos_id(), 2);
    EXPECT_TRUE(tok->add_bos_by_default());
    const std::string text = "the quick brown fox, 42 times\n\xc3\xa9t\xc3\xa9!";
    const auto ids = tok->encode(text, true);
    ASSERT_FALSE(ids.empty());
    EXPECT_EQ(ids[0], 1);
    EXPECT_EQ(tok->decode(std::span(ids).subspan(1)), text);
    for (int32_t id : ids) EXPECT_LT(id, vocab);
    for (int32_t id = 0; id < vocab; id += 7) EXPECT_NO_THROW(tok->decode(std::vector<int32_t>{id}));
    if (vocab >= 1024) {
      EXPECT_LT(ids.size(), text.size()) << "merges should join letters";
    }
  }
}

TEST(SyntheticTokenizer, SameVocabularySameBytes) {
  test::ScratchDir a, b;
  write_synthetic_tokenizer(a.path(), 5000);
  write_synthetic_tokenizer(b.path(), 5000);
  EXPECT_EQ(test::read_file(a / "tokenizer.json"), test::read_file(b / "tokenizer.json"));
  EXPECT_THROW(write_synthetic_tokenizer(a.path(), 100), Error);
}

}  // namespace
}  // namespace qf

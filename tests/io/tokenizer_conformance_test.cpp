// Conformance of the GPT-2 (vocab.json + merges.txt) and Llama sentencepiece tokenizers with
// llama.cpp's tokenizer test vectors (tests/test-tokenizer-0 of llama.cpp: inputs separated by
// "\n__ggml_vocab_test__\n", expected ids one line per input). The vectors carry no BOS:
// llama.cpp's test tokenizes with add_special = false, and its SPM tokenizer adds the leading
// space ("▁") that sentencepiece's add_dummy_prefix adds, so encode(text, false) must match.
#include "io/tokenizer.h"
#include "test_util.h"

#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

namespace fs = std::filesystem;

namespace qf {
namespace {

struct Vector {
  std::string input;
  std::vector<int32_t> ids;
};

// Reads NAME.inp / NAME.out of the llamacpp-vocab fixture. The .inp file is
// "in_1\n__ggml_vocab_test__\nin_2\n__ggml_vocab_test__\n...in_n\n__ggml_vocab_test__\n" (so
// every input, even an empty one, is followed by the delimiter); the .out file has one line
// per input, ids separated by spaces (with a leading space), empty for an empty result.
std::vector<Vector> read_vectors(const std::string& name) {
  const fs::path dir = test::fixtures_dir() / "tokenizers" / "llamacpp-vocab";
  const std::string inp = test::read_file(dir / (name + ".inp"));
  const std::string out = test::read_file(dir / (name + ".out"));
  const std::string delim = "\n__ggml_vocab_test__\n";
  std::vector<Vector> vectors;
  size_t pos = 0;
  for (size_t hit; (hit = inp.find(delim, pos)) != std::string::npos; pos = hit + delim.size())
    vectors.push_back({inp.substr(pos, hit - pos), {}});
  EXPECT_EQ(pos, inp.size()) << "text after the last delimiter";
  std::istringstream lines(out);
  std::string line;
  for (Vector& v : vectors) {
    EXPECT_TRUE(std::getline(lines, line)) << name << ".out has fewer lines than inputs";
    std::istringstream ids(line);
    for (int32_t id; ids >> id;) v.ids.push_back(id);
  }
  EXPECT_FALSE(std::getline(lines, line) && !line.empty()) << name << ".out has extra lines";
  return vectors;
}

std::string show(const std::string& s) {
  std::string r;
  for (const char c : s) r += c == '\n' ? std::string("\\n") : c == '\t' ? std::string("\\t") : std::string(1, c);
  return r;
}

void check_vectors(const Tokenizer& tok, const std::string& name, size_t expected_count) {
  const std::vector<Vector> vectors = read_vectors(name);
  ASSERT_EQ(vectors.size(), expected_count);
  size_t passed = 0;
  for (const Vector& v : vectors) {
    const std::vector<int32_t> got = tok.encode(v.input, /*add_bos=*/false);
    EXPECT_EQ(got, v.ids) << name << " input '" << show(v.input) << "'";
    passed += got == v.ids;
    // Every input is covered by the vocabulary (byte fallback / byte-level), so decoding gives
    // the input back.
    EXPECT_EQ(tok.decode(got), v.input) << name << " round trip of '" << show(v.input) << "'";
  }
  EXPECT_EQ(passed, vectors.size());
}

TEST(TokenizerConformance, Gpt2VocabMergesMatchesLlamaCppVectors) {
  QF_REQUIRE_FIXTURES();
  const auto tok = Tokenizer::load(test::fixtures_dir() / "tokenizers" / "gpt2");
  EXPECT_EQ(tok->vocab_size(), 50257);
  EXPECT_EQ(tok->bos_id(), -1);
  EXPECT_EQ(tok->eos_id(), 50256);  // <|endoftext|>
  EXPECT_FALSE(tok->add_bos_by_default());
  check_vectors(*tok, "ggml-vocab-gpt-2.gguf", 46);
}

TEST(TokenizerConformance, LlamaSentencepieceMatchesLlamaCppVectors) {
  QF_REQUIRE_FIXTURES();
  const auto tok = Tokenizer::load(test::fixtures_dir() / "tokenizers" / "llama2-spm-32000");
  EXPECT_EQ(tok->vocab_size(), 32000);
  EXPECT_EQ(tok->bos_id(), 1);
  EXPECT_EQ(tok->eos_id(), 2);
  EXPECT_TRUE(tok->add_bos_by_default());
  check_vectors(*tok, "ggml-vocab-llama-spm.gguf", 46);
}

}  // namespace
}  // namespace qf

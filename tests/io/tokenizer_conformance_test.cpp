// Conformance of the GPT-2 (vocab.json + merges.txt) and Llama sentencepiece tokenizers with
// llama.cpp's tokenizer test vectors (tests/test-tokenizer-0 of llama.cpp: inputs separated by
// "\n__ggml_vocab_test__\n", expected ids one line per input). The vectors carry no BOS:
// llama.cpp's test tokenizes with add_special = false, and its SPM tokenizer adds the leading
// space ("▁") that sentencepiece's add_dummy_prefix adds, so encode(text, false) must match.
// The same vectors hold for the tokenizers read from the vocab-only GGUF files themselves
// (Tokenizer::load_gguf), and the stories260K GGUF's embedded tokenizer must encode like the
// Hugging Face stories260K tokenizer.model.
#include "core/error.h"
#include "io/gguf_writer.h"
#include "io/gguf_file.h"
#include "io/tokenizer.h"
#include "io/tokenizer_gguf_export.h"
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

TEST(TokenizerConformance, GgufGpt2MatchesLlamaCppVectors) {
  QF_REQUIRE_FIXTURES();
  const fs::path file = test::fixtures_dir() / "tokenizers" / "llamacpp-vocab" / "ggml-vocab-gpt-2.gguf";
  const auto tok = Tokenizer::load_gguf(file);
  EXPECT_EQ(tok->vocab_size(), 50257);
  EXPECT_EQ(tok->bos_id(), 50256);  // the file's tokenizer.ggml.bos_token_id
  EXPECT_EQ(tok->eos_id(), 50256);
  EXPECT_FALSE(tok->add_bos_by_default());  // llama.cpp's default for gpt-2
  check_vectors(*tok, "ggml-vocab-gpt-2.gguf", 46);
  // The control token written in the text is itself, as in Hugging Face tokenizers.
  EXPECT_EQ(tok->encode("a<|endoftext|>b", false),
            (std::vector<int32_t>{64, 50256, 65}));
}

TEST(TokenizerConformance, GgufLlamaSpmMatchesLlamaCppVectors) {
  QF_REQUIRE_FIXTURES();
  const fs::path file =
      test::fixtures_dir() / "tokenizers" / "llamacpp-vocab" / "ggml-vocab-llama-spm.gguf";
  const auto tok = Tokenizer::load_gguf(file);
  EXPECT_EQ(tok->vocab_size(), 32000);
  EXPECT_EQ(tok->bos_id(), 1);
  EXPECT_EQ(tok->eos_id(), 2);
  EXPECT_TRUE(tok->add_bos_by_default());
  check_vectors(*tok, "ggml-vocab-llama-spm.gguf", 46);
  // Same ids as libsentencepiece on the HF files, special tokens aside.
  const auto hf = Tokenizer::load(test::fixtures_dir() / "tokenizers" / "llama2-spm-32000");
  for (const char* text : {"Hello world", " leading space", "tabs\tand\nnewlines", "日本語 ü",
                           "  two  spaces  "})
    EXPECT_EQ(tok->encode(text, true), hf->encode(text, true)) << text;
  // After a special token the dummy prefix comes again (llama.cpp's is_prev_special).
  EXPECT_EQ(tok->encode("</s>Hi", false), (std::vector<int32_t>{2, tok->encode("Hi", false)[0]}));
}

// llama2.c's tokenizer.model was trained with sentencepiece's default remove_extra_whitespaces,
// which libsentencepiece applies (a run of spaces becomes one, spaces at the ends go); llama.cpp's
// SPM never does, and the GGUF does not record the setting. So the two agree on every text
// without such spaces (the fixture text once its six double spaces are single) and differ, as
// llama.cpp does, on the others.
TEST(TokenizerConformance, GgufStories260kMatchesHfTokenizer) {
  QF_REQUIRE_FIXTURES();
  const fs::path models = test::fixtures_dir() / "models";
  const auto gguf = Tokenizer::load_for_model(models / "stories260K-llama2c" / "stories260K.gguf", {});
  const auto hf = Tokenizer::load(models / "stories260K-hf");
  EXPECT_EQ(gguf->vocab_size(), hf->vocab_size());
  EXPECT_EQ(gguf->bos_id(), hf->bos_id());
  EXPECT_EQ(gguf->eos_id(), hf->eos_id());
  EXPECT_EQ(gguf->add_bos_by_default(), hf->add_bos_by_default());
  const std::string text =
      test::read_file(test::fixtures_dir() / "corpora" / "tinystories_valid_subset.txt");
  ASSERT_GT(text.size(), 500000u);
  // The perplexity protocol's 20,000 characters (all ASCII here) end in a space, which
  // sentencepiece drops and llama.cpp keeps as a "▁"; without it they are the same ids.
  const std::string head = text.substr(0, 20000);
  ASSERT_EQ(head.find("  "), std::string::npos);
  ASSERT_EQ(head.back(), ' ');
  const std::vector<int32_t> head_ids = gguf->encode(head, true);
  EXPECT_EQ(std::vector<int32_t>(head_ids.begin(), head_ids.end() - 1), hf->encode(head, true));
  EXPECT_EQ(gguf->piece(head_ids.back()), "\xE2\x96\x81");
  EXPECT_EQ(gguf->encode(head.substr(0, 19999), true), hf->encode(head, true));
  std::string single = text;
  for (size_t at; (at = single.find("  ")) != std::string::npos;) single.erase(at, 1);
  EXPECT_EQ(text.size() - single.size(), 6u);
  const std::vector<int32_t> ids = gguf->encode(single, true);
  EXPECT_EQ(ids, hf->encode(single, true));
  EXPECT_EQ(gguf->decode(ids), hf->decode(ids));
  // llama.cpp's reading of a double space: a lone "▁" before "▁His".
  const std::vector<int32_t> run = gguf->encode("jump.  His", false);
  ASSERT_EQ(run.size(), hf->encode("jump.  His", false).size() + 1);
  EXPECT_EQ(gguf->piece(run[run.size() - 3]), "\xE2\x96\x81");
  EXPECT_EQ(gguf->decode(run), "jump.  His");
}

TEST(TokenizerConformance, GgufOtherTokenizersAreRefusedNamingTheValue) {
  test::ScratchDir dir;
  auto error_of = [&](const GgufMetadata& m) -> std::string {
    const fs::path path = dir / "t.gguf";
    GgufWriter w(path, m, {});
    w.finish();
    try {
      Tokenizer::load_for_model(path, {});
    } catch (const Error& e) {
      return e.what();
    }
    return "(no error)";
  };
  const std::string file = (dir / "t.gguf").string();
  GgufMetadata none;
  none.set_string("general.architecture", "llama");
  EXPECT_EQ(error_of(none), file + ": no tokenizer (tokenizer.ggml.model is missing); pass "
                                   "--tokenizer DIR");
  GgufMetadata bert = none;
  bert.set_string("tokenizer.ggml.model", "bert");
  bert.set_string_array("tokenizer.ggml.tokens", {"a"});
  EXPECT_EQ(error_of(bert), file + ": tokenizer.ggml.model 'bert' is not supported (qforge reads "
                                   "'llama' and 'gpt2'); pass --tokenizer DIR");
  GgufMetadata pre = none;
  pre.set_string("tokenizer.ggml.model", "gpt2");
  pre.set_string("tokenizer.ggml.pre", "deepseek-llm");
  pre.set_string_array("tokenizer.ggml.tokens", {"a"});
  pre.set_string_array("tokenizer.ggml.merges", {});
  EXPECT_NE(error_of(pre).find(file + ": tokenizer.ggml.pre 'deepseek-llm' is not supported"),
            std::string::npos);
  GgufMetadata dup = none;
  dup.set_string("tokenizer.ggml.model", "llama");
  dup.set_string_array("tokenizer.ggml.tokens", {"a", "b", "a"});
  EXPECT_EQ(error_of(dup), file + ": token 2 ('a') appears twice in tokenizer.ggml.tokens");
}

// The tokenizer files written for a GGUF input's safetensors outputs, read back by the Hugging
// Face loader: llama.cpp's vectors, and the GGUF tokenizer's own ids on the TinyStories text
// (runs of spaces included) and on special tokens.
TEST(TokenizerConformance, HfFilesWrittenFromGgufEncodeAsTheGguf) {
  QF_REQUIRE_FIXTURES();
  const std::string text =
      test::read_file(test::fixtures_dir() / "corpora" / "tinystories_valid_subset.txt");
  const fs::path vocab_dir = test::fixtures_dir() / "tokenizers" / "llamacpp-vocab";
  struct Case {
    fs::path gguf;
    std::string vectors;  // "" for none
    std::string special;
  };
  for (const Case& c :
       {Case{vocab_dir / "ggml-vocab-llama-spm.gguf", "ggml-vocab-llama-spm.gguf", "</s>"},
        Case{vocab_dir / "ggml-vocab-gpt-2.gguf", "ggml-vocab-gpt-2.gguf", "<|endoftext|>"},
        Case{test::fixtures_dir() / "models/stories260K-llama2c/stories260K.gguf", "", "</s>"}}) {
    SCOPED_TRACE(c.gguf.string());
    test::ScratchDir dir;
    write_hf_tokenizer_files(GgufFile::open(c.gguf), dir.path());
    const auto hf = Tokenizer::load(dir.path());
    const auto gguf = Tokenizer::load_gguf(c.gguf);
    EXPECT_EQ(hf->vocab_size(), gguf->vocab_size());
    EXPECT_EQ(hf->bos_id(), gguf->bos_id());
    EXPECT_EQ(hf->eos_id(), gguf->eos_id());
    EXPECT_EQ(hf->add_bos_by_default(), gguf->add_bos_by_default());
    if (!c.vectors.empty()) check_vectors(*hf, c.vectors, 46);
    const std::string sample = text.substr(0, 200000);
    EXPECT_EQ(hf->encode(sample, true), gguf->encode(sample, true));
    const std::string with_special = "Hi" + c.special + " there  " + c.special + c.special + "x";
    EXPECT_EQ(hf->encode(with_special, false), gguf->encode(with_special, false));
  }
}

}  // namespace
}  // namespace qf

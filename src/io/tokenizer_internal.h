// What the tokenizer implementations share (private to src/io/tokenizer*.cpp): added-token
// matching, the base class that holds BOS/EOS and decodes, and the loaders of each file kind.
#pragma once

#include "io/tokenizer.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace qf {
class GgufFile;
}

namespace qf::tok {

// The largest token id a tokenizer file may use. Real vocabularies hold at most a few hundred
// thousand ids (Gemma 3: 262,144); the cap keeps a hostile id (2^31 - 1) from overflowing
// `id + 1`, and a huge one from sizing tables of millions of strings (at 2^24 a 200-byte
// tokenizer.json took 1.2 GB and 16 s to load under ASan).
inline constexpr int64_t kMaxTokenId = (int64_t(1) << 21) - 1;

// Texts longer than this are encoded in pieces (tokenizer_long_text.cpp); 1 MiB. Tests raise it
// to get the whole-text encoding to compare with.
size_t& long_text_chunk_bytes();

// A token matched in the text before pre-tokenization (tokenizer.json `added_tokens`).
struct AddedToken {
  std::string content;
  int32_t id = -1;
  bool single_word = false;  // only where not inside a word
  bool lstrip = false;       // takes the whitespace on its left
  bool rstrip = false;       // takes the whitespace on its right
  bool normalized = true;    // matched in the normalized text (else in the raw text)
  bool special = false;
};

// Parses one entry of `added_tokens` / `added_tokens_decoder`; `id` < 0 reads it from "id".
// Throws qf::Error "<context>: ..." when malformed.
AddedToken parse_added_token(const nlohmann::json& j, int32_t id, const std::string& context);

// Leftmost-longest matching of a set of strings, with Hugging Face's single_word, lstrip and
// rstrip rules.
class AddedTokenMatcher {
 public:
  struct Segment {
    size_t begin, end;
    int32_t id;  // -1 for text between tokens
  };
  // Matches `pattern` (non-empty) as `token`.
  void add(std::string_view pattern, const AddedToken& token);
  bool empty() const { return tokens_.empty(); }
  // Cuts `s` into text and token segments that cover it in order (no empty text segments).
  void split(std::string_view s, std::vector<Segment>& out) const;

 private:
  struct Node {
    std::vector<std::pair<unsigned char, int32_t>> children;  // sorted by byte
    int32_t token = -1;                                       // index into tokens_
  };
  int32_t child(int32_t node, unsigned char byte) const;
  std::vector<Node> nodes_{Node{}};
  std::vector<AddedToken> tokens_;
  bool first_byte_[256] = {};
};

// BOS/EOS and decoding shared by every tokenizer kind. Subclasses fill `pieces_` (vocabulary
// strings) and `bytes_` (what each id decodes to) for every id below vocab_size().
class TokenizerBase : public Tokenizer {
 public:
  // Checks UTF-8, prepends BOS when asked, and encodes the text with encode_text(), a long text
  // in pieces (see tokenizer_long_text.cpp).
  std::vector<int32_t> encode(std::string_view text, bool add_bos) const final;
  std::string decode(std::span<const int32_t> ids) const override;
  std::string decode_next(int32_t previous, int32_t id) const override;
  std::string piece(int32_t id) const override;
  int32_t vocab_size() const override { return static_cast<int32_t>(pieces_.size()); }
  int32_t bos_id() const override { return bos_; }
  int32_t eos_id() const override { return eos_; }
  bool add_bos_by_default() const override { return add_bos_ && bos_ >= 0; }

  const std::string& source() const { return source_; }
  bool add_bos_setting() const { return add_bos_; }
  // Defaults of the tokenizer file itself, before the configs are read.
  void set_specials(int32_t bos, int32_t eos, bool add_bos) {
    bos_ = bos;
    eos_ = eos;
    add_bos_ = add_bos;
  }

 protected:
  explicit TokenizerBase(std::string source) : source_(std::move(source)) {}
  // Appends the ids of `text` (valid UTF-8; no BOS), encoded as one piece.
  virtual void encode_text(std::string_view text, std::vector<int32_t>& out) const = 0;
  // Throws qf::Error unless `text` is valid UTF-8.
  void require_input_utf8(std::string_view text) const;
  void check_id(int32_t id) const;

  std::string source_;  // the tokenizer file, named in error messages
  std::vector<std::string> pieces_;
  std::vector<std::string> bytes_;
  // Spaces removed from the start of the text and after BOS: the space sentencepiece-style
  // tokenizers add before the first word.
  int leading_spaces_to_strip_ = 0;
  int32_t bos_ = -1, eos_ = -1;
  bool add_bos_ = false;

 private:
  size_t find_cut(std::string_view text, size_t from) const;
};

std::unique_ptr<TokenizerBase> load_sentencepiece(const std::filesystem::path& model_file);
std::unique_ptr<TokenizerBase> load_hf_json(const std::filesystem::path& json_file);
// GPT-2 style vocab.json + merges.txt; `added_tokens` from tokenizer_config.json's
// added_tokens_decoder (<|endoftext|> as a special token when there is none).
std::unique_ptr<TokenizerBase> load_vocab_merges(const std::filesystem::path& vocab_file,
                                                 const std::filesystem::path& merges_file,
                                                 std::vector<AddedToken> added_tokens);
// The tokenizer of a GGUF file's tokenizer.* metadata (tokenizer_gguf.cpp): "llama" (SPM) or
// "gpt2" (byte-level BPE with a pre-tokenizer qforge implements); anything else is refused
// naming the file and the value.
std::unique_ptr<TokenizerBase> load_gguf_tokenizer(const GgufFile& file);
// The pre-tokenizer a `tokenizer.ggml.pre` name stands for, or nullptr when qforge does not
// implement it; and the names it implements, comma-separated.
struct GgufPreTokenizer {
  std::string_view regex;  // Hugging Face's spelling of llama.cpp's regex
  bool ignore_merges;      // a word that is a whole token is that token (llama.cpp's LLAMA3)
  bool add_bos;            // llama.cpp's default for add_bos_token
};
const GgufPreTokenizer* gguf_pre_tokenizer(std::string_view name);
std::string gguf_pre_tokenizer_names();

}  // namespace qf::tok

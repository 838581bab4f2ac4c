// Tokenizers of Hugging Face / llama checkpoints: sentencepiece `tokenizer.model`, HF
// `tokenizer.json` (BPE with byte fallback, or byte-level BPE with a regex pre-tokenizer), and
// GPT-2 style `vocab.json` + `merges.txt`. Special tokens and BOS/EOS come from the
// checkpoint's configs.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace qf {

// All methods are const and safe to call from several threads at once.
class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // Loads the tokenizer of a model directory (or a directory holding only tokenizer files):
  // tokenizer.json if present, else tokenizer.model, else vocab.json + merges.txt; BOS/EOS
  // from tokenizer_config.json / config.json / generation_config.json. Throws qf::Error naming
  // the file for missing or malformed files, and for tokenizer.json features it does not
  // implement (rather than encode differently from the reference).
  //
  // BOS/EOS: tokenizer_config.json `bos_token` / `eos_token` (a string, {"content": ...}, or
  // null for none) when the key is present; else config.json, then generation_config.json
  // `bos_token_id` / `eos_token_id` (the first of a list); else the tokenizer file's own
  // (sentencepiece's ids; the BOS of a tokenizer.json TemplateProcessing; GPT-2's
  // <|endoftext|> as EOS). `add_bos_token` of tokenizer_config.json sets add_bos_by_default().
  // `config`: the directory's config.json when the caller has already parsed it (it is then
  // not read again).
  static std::unique_ptr<Tokenizer> load(const std::filesystem::path& dir,
                                         const nlohmann::json* config = nullptr);
  // The tokenizer a GGUF file carries in its tokenizer.* metadata, encoding as llama.cpp
  // does: "llama" (sentencepiece-style: scores, byte tokens, the dummy prefix) or "gpt2"
  // (byte-level BPE with merges; tokenizer.ggml.pre must name a pre-tokenizer regex qforge
  // implements: gpt-2, llama3/llama-bpe, qwen2 and their aliases). Special tokens (control,
  // user-defined, unknown) written in the text are encoded as themselves; BOS/EOS and
  // add_bos_token come from the metadata, else llama.cpp's defaults. Throws qf::Error naming
  // the file and the value for any other tokenizer, and for malformed metadata.
  static std::unique_ptr<Tokenizer> load_gguf(const std::filesystem::path& file);
  // The tokenizer of the model in `model_dir`, read from `tokenizer_dir` instead when that is
  // not empty (--tokenizer): its BOS/EOS come from tokenizer_dir's own configs, and the
  // model's config.json (`model_config` when already parsed) stands in for a config.json
  // tokenizer_dir does not have. A GGUF file (as the model, or as tokenizer_dir) gives its
  // embedded tokenizer (load_gguf). Throws qf::Error as load() and load_gguf().
  static std::unique_ptr<Tokenizer> load_for_model(const std::filesystem::path& model_dir,
                                                   const std::filesystem::path& tokenizer_dir,
                                                   const nlohmann::json* model_config = nullptr);
  // Whether `dir` holds a tokenizer load() can read (tokenizer.json, tokenizer.model, or
  // vocab.json + merges.txt).
  static bool present(const std::filesystem::path& dir);
  // The names of the tokenizer files in `dir` that travel with a model (the tokenizer itself
  // and its configs: tokenizer_config.json, special_tokens_map.json, added_tokens.json, ...).
  static std::vector<std::string> files_in(const std::filesystem::path& dir);

  // Token ids of `text` (UTF-8; throws qf::Error if it is not valid UTF-8). BOS is prepended
  // when `add_bos` and the tokenizer has one. Added/special tokens written in the text
  // (e.g. "<|im_end|>") are encoded as themselves, as Hugging Face tokenizers do.
  virtual std::vector<int32_t> encode(std::string_view text, bool add_bos) const = 0;
  // The text of a sequence of ids (special tokens included as their text). The space a
  // sentencepiece-style tokenizer puts before the first word is dropped at the start and
  // right after BOS, so decode(encode(x, b)) gives x (after BOS's text when b) for text the
  // vocabulary covers. Bytes that do not form UTF-8 become U+FFFD. Ids outside the
  // vocabulary throw qf::Error.
  virtual std::string decode(std::span<const int32_t> ids) const = 0;
  // The bytes one token contributes when appended after `previous` (-1 at the start), for
  // streaming output: concatenated over a sequence they give decode() of it, except that a
  // character split over byte tokens arrives in pieces (not valid UTF-8 on their own).
  virtual std::string decode_next(int32_t previous, int32_t id) const = 0;

  // The token's string in the vocabulary ("▁Once", "Ġthe", "<0x0A>", "<|im_end|>").
  virtual std::string piece(int32_t id) const = 0;
  // The id of a vocabulary string (added tokens included), or -1.
  virtual int32_t token_id(std::string_view piece) const = 0;

  // Highest id the tokenizer can produce, plus one (added tokens included; the model's
  // embedding table may be larger).
  virtual int32_t vocab_size() const = 0;
  virtual int32_t bos_id() const = 0;  // -1 if none
  virtual int32_t eos_id() const = 0;  // -1 if none
  // Whether the checkpoint prepends BOS to its inputs (tokenizer_config.json add_bos_token,
  // or the tokenizer's own convention); false when there is no BOS.
  virtual bool add_bos_by_default() const = 0;

  // Throws qf::Error "<source>: not valid UTF-8 (byte 0x.. at offset N)" unless `text` is
  // valid UTF-8 (no overlong forms, surrogates or values above U+10FFFF).
  static void require_utf8(std::string_view text, std::string_view source);
};

}  // namespace qf

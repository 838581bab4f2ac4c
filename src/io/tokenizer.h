// Tokenizers of Hugging Face / llama checkpoints: sentencepiece `tokenizer.model`, HF
// `tokenizer.json` (BPE with byte fallback, or byte-level BPE with a regex pre-tokenizer), and
// GPT-2 style `vocab.json` + `merges.txt`. Special tokens and BOS/EOS come from the
// checkpoint's configs.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace qf {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // Loads the tokenizer of a model directory (or a directory holding only tokenizer files):
  // tokenizer.json if present, else tokenizer.model, else vocab.json + merges.txt; BOS/EOS
  // from tokenizer_config.json / config.json / generation_config.json. Throws qf::Error naming
  // the file for missing or malformed files.
  static std::unique_ptr<Tokenizer> load(const std::filesystem::path& dir);

  // Token ids of `text` (UTF-8; throws qf::Error if it is not valid UTF-8). BOS is prepended
  // when `add_bos` and the tokenizer has one.
  virtual std::vector<int32_t> encode(std::string_view text, bool add_bos) const = 0;
  // The text of a sequence of ids (special tokens included as their text).
  virtual std::string decode(std::span<const int32_t> ids) const = 0;
  // The text one token contributes when appended after `previous` (for streaming output).
  virtual std::string decode_next(int32_t previous, int32_t id) const = 0;

  virtual int32_t vocab_size() const = 0;
  virtual int32_t bos_id() const = 0;  // -1 if none
  virtual int32_t eos_id() const = 0;  // -1 if none
};

}  // namespace qf

// A checkpoint's tokenizer as GGUF `tokenizer.*` metadata, the way llama.cpp's vocabulary loader
// reads it (src/llama-vocab.cpp; shared/specs/engine-formats.md §3.6):
//   tokenizer.model (sentencepiece)            -> "llama": tokens, scores, token types
//   tokenizer.json BPE with byte fallback and  -> "llama" as well (llama.cpp's SPM merges by
//     a metaspace normalizer (Llama-2 style)      score: each merged token scores minus its merge
//                                                 rank, so the highest-priority merge wins, as in
//                                                 BPE; convert_hf_to_gguf writes -1000 for all)
//   tokenizer.json byte-level BPE              -> "gpt2": tokens, types, merges, and
//                                                 tokenizer.ggml.pre named from the pre-tokenizer
//                                                 regex; a regex llama.cpp has no name for is
//                                                 refused (its "default" would split text
//                                                 differently, silently)
// plus BOS/EOS/UNK/PAD ids, add_bos/add_eos and the chat template when the configs have them.
#pragma once

#include "io/gguf_writer.h"

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace qf {

class Tokenizer;

struct GgufVocabInfo {
  std::string model;      // "llama" or "gpt2"
  std::string pre;        // tokenizer.ggml.pre ("default" for "llama")
  int64_t tokens = 0;     // entries written (padded to n_vocab)
  int64_t padded = 0;     // [PADn] entries added because the embedding is larger
  std::string source;     // the file read
};

// Adds the tokenizer keys to `m`. `dir`: where the tokenizer files are; `tok`: qforge's
// tokenizer of the same files (its BOS/EOS/add_bos follow the HF configs); `n_vocab`: rows of
// the embedding, which the token list is padded to (llama.cpp needs them equal). Throws
// qf::Error naming the file for a tokenizer GGUF cannot express, before anything is written.
GgufVocabInfo add_gguf_vocab(const std::filesystem::path& dir, const Tokenizer& tok,
                             int64_t n_vocab, GgufMetadata& m);

// llama.cpp's token types (llama_token_type).
enum GgufTokenType : int32_t {
  kGgufTokenNormal = 1, kGgufTokenUnknown = 2, kGgufTokenControl = 3, kGgufTokenUserDefined = 4,
  kGgufTokenUnused = 5, kGgufTokenByte = 6,
};

}  // namespace qf

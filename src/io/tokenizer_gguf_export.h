// A GGUF file's embedded tokenizer written back as Hugging Face tokenizer files, so that a
// safetensors checkpoint quantized from a GGUF input (ModelOpt, compressed-tensors) carries a
// tokenizer that vLLM / transformers load, encoding as the GGUF's does in qforge and llama.cpp.
#pragma once

#include <filesystem>
#include <string>

namespace qf {

class GgufFile;

// Writes tokenizer.json and tokenizer_config.json into `dir` from `file`'s tokenizer.* metadata:
//   "llama": a Llama-2-style BPE with byte fallback (normalizer: the dummy-prefix "▁" when
//     tokenizer.ggml.add_space_prefix, spaces as "▁"); merges are made from the scores the way
//     transformers' sentencepiece converter makes them (every split of a token into two tokens,
//     highest score first).
//   "gpt2": byte-level BPE with the tokens and merges as they are, the regex tokenizer.ggml.pre
//     names as a Split pre-tokenizer.
// Control, user-defined and unknown tokens become added tokens matched in the raw text; BOS
// (a TemplateProcessing when add_bos_token), EOS, UNK, PAD and the chat template go to
// tokenizer_config.json. Returns a one-line description ("llama, 32000 tokens"). Throws
// qf::Error naming the file, before writing anything, for what io/tokenizer_gguf refuses.
std::string write_hf_tokenizer_files(const GgufFile& file, const std::filesystem::path& dir);

}  // namespace qf

// llama.cpp's layout of a Llama checkpoint (arch "llama", gguf-py TENSOR_NAMES): the GGUF name of
// each HF tensor and the row order of q_proj / k_proj. llama.cpp rotates adjacent pairs
// (x[2i], x[2i+1]) where Hugging Face rotates halves (x[i], x[i + d/2]), so its converter
// reorders each head's rows; a GGUF written without that reorder loads and runs, but rotates the
// wrong dimensions (shared/specs/engine-formats.md §3.7).
#pragma once

#include "model/architecture.h"

#include <nlohmann/json_fwd.hpp>

#include <cstddef>
#include <cstdint>
#include <string>

namespace qf {

// "blk.3.attn_q.weight" for module `m` of a llama-family architecture. Throws qf::Error for a
// role llama.cpp's llama graph does not have (fused qkv, MLA).
std::string gguf_llama_linear_name(const LinearModule& m);

// Reorders the rows of a [n_head * head_dim, cols] projection from Hugging Face's rotate-half
// order to llama.cpp's interleaved-pair order: within each head, new row 2i + j is old row
// j * head_dim / 2 + i (i < head_dim / 2, j < 2). `rows` is row-major float. head_dim must be even.
void gguf_permute_qk_rows(float* rows, int64_t n_head, int64_t head_dim, int64_t cols);
// The inverse (llama.cpp order back to Hugging Face's), for reading GGUF files and for tests.
void gguf_unpermute_qk_rows(float* rows, int64_t n_head, int64_t head_dim, int64_t cols);

// The same inverse on stored rows of `row_bytes` bytes each (any type: whole rows move), from
// `in` to `out` (n_head * head_dim rows each, not overlapping).
void gguf_unpermute_qk_row_bytes(const std::byte* in, std::byte* out, int64_t n_head,
                                 int64_t head_dim, uint64_t row_bytes);

class GgufFile;
// The config.json fields of a GGUF file of llama.cpp's "llama" architecture, built from its
// llama.* metadata (and tokenizer.ggml.bos/eos_token_id), for Architecture::from_config: the
// one description of a Llama, shared by the engine's GGUF loader and the quantizer's GGUF
// input. Throws qf::Error naming the file for another architecture and for what qforge does not
// compute (mixture of experts, partial rotary, RoPE scaling other than linear). A
// `rope_freqs.weight` tensor (Llama 3.1+) is not expressed in the config: the engine reads it
// itself (RopeType::freq_factors), the quantizer's GGUF input refuses it.
nlohmann::json gguf_llama_config(const GgufFile& f);

}  // namespace qf

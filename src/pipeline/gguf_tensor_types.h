// Which ggml type each tensor of a GGUF export gets: the `--format` names as llama.cpp file types
// (`general.file_type`), the per-tensor choices of llama-quantize's Q4_K_M mix
// (src/llama-quant.cpp `llama_tensor_get_type_impl`, llama arch, dense), and the per-tensor
// fallback when a row length is not a multiple of the type's block. Pure functions: the plan of
// an export is decided before any byte is written.
#pragma once

#include "formats/ggml_types.h"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace qf {

struct GgufFileType {
  std::string_view name;  // the --format spelling: "q8_0", "q4_k_m", "nvfp4"
  uint32_t llama_ftype;   // llama.cpp's enum llama_ftype, written as general.file_type
  GgmlType base;          // the type of the weight matrices before mix rules and fallbacks
  bool q4_k_m_mix;        // llama-quantize's Q4_K_M per-tensor rules
  std::string_view summary;
};

// Every --format name --export gguf accepts, in help order.
const std::vector<GgufFileType>& gguf_file_types();
std::optional<GgufFileType> gguf_file_type(std::string_view name);
std::vector<std::string> gguf_file_type_names();

// What a tensor is, as far as the type choice cares.
enum class GgufTensorRole { token_embd, output, attn_q, attn_k, attn_v, attn_output, ffn_gate,
                            ffn_up, ffn_down };

struct GgufTypeChoice {
  GgmlType type;
  std::string note;  // why it differs from the file type's base type; empty when it does not
};

// The type of a weight matrix of row length `ne0` in layer `layer` of `n_layers`. `tied`: the
// token embedding is also the output head (llama-quantize then gives it the output's type).
GgufTypeChoice choose_gguf_type(const GgufFileType& ft, GgufTensorRole role, int layer,
                                int n_layers, int64_t ne0, bool tied);

}  // namespace qf

// GGUF file types and per-tensor type choices (see the header).
#include "pipeline/gguf_tensor_types.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>

namespace qf {

namespace {

// llama.cpp's enum llama_ftype (include/llama.h). The plain quantized names are "pure"
// (every weight matrix that type, as `llama-quantize --pure`); q4_0's and q8_0's numbers are
// the MOSTLY_ ones because that is what their tensors are. Q4_K and Q5_K have no pure file type
// of their own; their _S numbers are the nearest llama.cpp names.
const std::vector<GgufFileType> kFileTypes = {
    {"f32", 0, GgmlType::F32, false, "every tensor F32"},
    {"f16", 1, GgmlType::F16, false, "weight matrices F16, norms F32"},
    {"bf16", 32, GgmlType::BF16, false, "weight matrices BF16, norms F32"},
    {"q8_0", 7, GgmlType::Q8_0, false, "Q8_0 (MOSTLY_Q8_0)"},
    {"q4_0", 2, GgmlType::Q4_0, false, "Q4_0, pure (llama-quantize's Q4_0 makes output Q6_K)"},
    {"q4_k", 14, GgmlType::Q4_K, false, "Q4_K, pure"},
    {"q5_k", 16, GgmlType::Q5_K, false, "Q5_K, pure"},
    {"q6_k", 18, GgmlType::Q6_K, false, "Q6_K (MOSTLY_Q6_K)"},
    {"q4_k_m", 15, GgmlType::Q4_K, true,
     "llama-quantize's Q4_K_M mix: Q4_K, output Q6_K, attn_v and ffn_down Q6_K on some layers"},
    {"mxfp4", 38, GgmlType::MXFP4, false, "MXFP4 weight matrices, token embedding Q8_0"},
    {"nvfp4", 39, GgmlType::NVFP4, false,
     "NVFP4 (qforge's two-level scales, the tensor scale as <name>.scale), token embedding Q8_0"},
};

bool is_quantized(GgmlType t) {
  return t != GgmlType::F32 && t != GgmlType::F16 && t != GgmlType::BF16;
}

// llama-quant.cpp's use_more_bits: the first and last eighth of the layers and every third one
// between them.
bool use_more_bits(int i, int n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

// tensor_type_fallback, limited to the types qforge writes: a 256-block k-quant falls to a
// 32-block type, and a row that is not a multiple of 32 either falls to F16. llama-quantize
// falls Q4_K to Q5_0 and Q5_K to Q5_1, which qforge cannot write; Q8_0 is used instead (larger,
// at least as precise). NVFP4 (block 64) has no fallback in llama-quantize (it stops); Q8_0 here.
GgufTypeChoice fit_row(GgufTypeChoice c, int64_t ne0) {
  const int block = ggml_type_info(c.type).block_size;
  if (ne0 % block == 0) return c;
  const std::string from(ggml_type_info(c.type).name);
  GgmlType to = c.type == GgmlType::Q4_0 || c.type == GgmlType::Q8_0 || c.type == GgmlType::MXFP4
                    ? GgmlType::F16
                    : GgmlType::Q8_0;
  if (ne0 % ggml_type_info(to).block_size != 0) to = GgmlType::F16;
  const std::string why = fmt::format("row length {} is not a multiple of {}'s block {}: {}", ne0,
                                      from, block, ggml_type_info(to).name);
  return {to, c.note.empty() ? why : c.note + "; " + why};
}

}  // namespace

const std::vector<GgufFileType>& gguf_file_types() { return kFileTypes; }

std::optional<GgufFileType> gguf_file_type(std::string_view name) {
  std::string lower(name);
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char ch) { return char(std::tolower(ch)); });
  for (const GgufFileType& ft : kFileTypes)
    if (ft.name == lower) return ft;
  return std::nullopt;
}

std::vector<std::string> gguf_file_type_names() {
  std::vector<std::string> out;
  for (const GgufFileType& ft : kFileTypes) out.emplace_back(ft.name);
  return out;
}

GgufTypeChoice choose_gguf_type(const GgufFileType& ft, GgufTensorRole role, int layer,
                                int n_layers, int64_t ne0, bool tied) {
  GgufTypeChoice c{ft.base, ""};
  if (!is_quantized(ft.base)) return c;  // float file types: no block, no rule
  const bool head = role == GgufTensorRole::output || (tied && role == GgufTensorRole::token_embd);
  if (ft.q4_k_m_mix) {
    if (head) {
      // llama-quantize: Q8_0 when the row is not a multiple of Q4_K's 256, else Q6_K.
      if (ne0 % ggml_type_info(ft.base).block_size != 0)
        return fit_row({GgmlType::Q8_0, fmt::format("Q4_K_M output: row length {} is not a "
                                                    "multiple of 256, Q8_0 (as llama-quantize)",
                                                    ne0)},
                       ne0);
      return {GgmlType::Q6_K, "Q4_K_M output: Q6_K"};
    }
    if ((role == GgufTensorRole::attn_v || role == GgufTensorRole::ffn_down) &&
        use_more_bits(layer, n_layers))
      c = {GgmlType::Q6_K, "Q4_K_M: more bits on this layer"};
    return fit_row(c, ne0);
  }
  // The FP4 types stay off the embedding lookup: llama.cpp rejects a tied NVFP4 output with
  // its .scale, and convert_hf_to_gguf keeps embeddings out of FP4 as well.
  if (role == GgufTensorRole::token_embd &&
      (ft.base == GgmlType::NVFP4 || ft.base == GgmlType::MXFP4))
    c = {GgmlType::Q8_0, "token embedding: Q8_0 (FP4 types are for matrix products)"};
  return fit_row(c, ne0);
}

}  // namespace qf

// llama.cpp tensor names and the q/k row reorder (see the header for why it exists).
#include "model/gguf_llama_layout.h"

#include "core/error.h"
#include "io/gguf_file.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>
#include <vector>

namespace qf {

std::string gguf_llama_linear_name(const LinearModule& m) {
  const char* leaf = nullptr;
  switch (m.role) {
    case LinearRole::q_proj: leaf = "attn_q"; break;
    case LinearRole::k_proj: leaf = "attn_k"; break;
    case LinearRole::v_proj: leaf = "attn_v"; break;
    case LinearRole::o_proj: leaf = "attn_output"; break;
    case LinearRole::gate_proj: leaf = "ffn_gate"; break;
    case LinearRole::up_proj: leaf = "ffn_up"; break;
    case LinearRole::down_proj: leaf = "ffn_down"; break;
    default:
      fail("{}: role {} has no tensor in llama.cpp's llama layout", m.name,
           linear_role_name(m.role));
  }
  return fmt::format("blk.{}.{}.weight", m.layer, leaf);
}

namespace {

// Moves whole rows: `source_row(r)` is the row of the input that lands at row r of its head.
template <typename SourceRow>
void reorder_head_rows(float* rows, int64_t n_head, int64_t head_dim, int64_t cols,
                       SourceRow source_row) {
  if (head_dim % 2 != 0) fail("q/k permutation: head_dim {} is odd", head_dim);
  std::vector<float> head(size_t(head_dim * cols));
  for (int64_t h = 0; h < n_head; ++h) {
    float* base = rows + h * head_dim * cols;
    std::memcpy(head.data(), base, head.size() * sizeof(float));
    for (int64_t r = 0; r < head_dim; ++r)
      std::memcpy(base + r * cols, head.data() + source_row(r) * cols, size_t(cols) * sizeof(float));
  }
}

}  // namespace

void gguf_permute_qk_rows(float* rows, int64_t n_head, int64_t head_dim, int64_t cols) {
  const int64_t half = head_dim / 2;
  reorder_head_rows(rows, n_head, head_dim, cols,
                    [half](int64_t r) { return (r % 2) * half + r / 2; });
}

void gguf_unpermute_qk_rows(float* rows, int64_t n_head, int64_t head_dim, int64_t cols) {
  const int64_t half = head_dim / 2;
  reorder_head_rows(rows, n_head, head_dim, cols,
                    [half](int64_t r) { return (r % half) * 2 + r / half; });
}

void gguf_unpermute_qk_row_bytes(const std::byte* in, std::byte* out, int64_t n_head,
                                 int64_t head_dim, uint64_t row_bytes) {
  if (head_dim % 2 != 0) fail("q/k permutation: head_dim {} is odd", head_dim);
  const int64_t half = head_dim / 2;
  for (int64_t h = 0; h < n_head; ++h)
    for (int64_t i = 0; i < half; ++i)
      for (int64_t j = 0; j < 2; ++j)
        std::memcpy(out + uint64_t(h * head_dim + j * half + i) * row_bytes,
                    in + uint64_t(h * head_dim + 2 * i + j) * row_bytes, row_bytes);
}

nlohmann::json gguf_llama_config(const GgufFile& f) {
  const std::string label = f.path().string();
  const std::string_view arch = f.get_string("general.architecture");
  if (arch != "llama")
    fail("{}: general.architecture '{}' is not supported (qforge reads GGUF files of 'llama')",
         label, arch);
  const uint32_t hidden = f.get_u32("llama.embedding_length");
  const uint32_t heads = f.get_u32("llama.attention.head_count");
  // Found by the gguf_input fuzz harness: the head size below divides by it.
  if (heads == 0) fail("{}: llama.attention.head_count is 0", label);
  const uint32_t kv = f.find("llama.attention.head_count_kv")
                          ? f.get_u32("llama.attention.head_count_kv") : heads;
  const uint32_t head_dim = f.find("llama.attention.key_length")
                                ? f.get_u32("llama.attention.key_length") : hidden / heads;
  if (f.find("llama.attention.value_length") &&
      f.get_u32("llama.attention.value_length") != head_dim)
    fail("{}: llama.attention.value_length {} differs from key_length {} (not supported)", label,
         f.get_u32("llama.attention.value_length"), head_dim);
  if (f.find("llama.expert_count") && f.get_u32("llama.expert_count") > 0)
    fail("{}: llama.expert_count {}: mixture-of-experts GGUF files are not supported", label,
         f.get_u32("llama.expert_count"));
  if (f.find("llama.rope.dimension_count") && f.get_u32("llama.rope.dimension_count") != head_dim)
    fail("{}: llama.rope.dimension_count {} differs from the head size {} (partial rotary is "
         "not supported)", label, f.get_u32("llama.rope.dimension_count"), head_dim);
  int64_t vocab = f.find("llama.vocab_size") ? f.get_u32("llama.vocab_size")
                                             : int64_t(f.get_string_array("tokenizer.ggml.tokens").size());
  nlohmann::json c;
  c["architectures"] = {"LlamaForCausalLM"};
  c["model_type"] = "llama";
  c["hidden_size"] = hidden;
  c["intermediate_size"] = f.get_u32("llama.feed_forward_length");
  c["num_hidden_layers"] = f.get_u32("llama.block_count");
  c["num_attention_heads"] = heads;
  c["num_key_value_heads"] = kv;
  c["head_dim"] = head_dim;
  c["vocab_size"] = vocab;
  c["max_position_embeddings"] = f.get_u32("llama.context_length");
  c["rms_norm_eps"] = gguf_decimal(f.get_f32("llama.attention.layer_norm_rms_epsilon"));
  c["rope_theta"] = f.find("llama.rope.freq_base") ? gguf_decimal(f.get_f32("llama.rope.freq_base"))
                                                   : 10000.0;
  if (f.find("llama.rope.scaling.type")) {
    const std::string_view type = f.get_string("llama.rope.scaling.type");
    if (type == "linear")
      c["rope_scaling"] = {{"type", "linear"},
                           {"factor", gguf_decimal(f.get_f32("llama.rope.scaling.factor"))}};
    else if (type != "none")
      fail("{}: llama.rope.scaling.type '{}' is not supported", label, type);
  }
  c["tie_word_embeddings"] = f.find_tensor("output.weight") == nullptr;
  c["hidden_act"] = "silu";
  // The tokenizer's specials, as a Hugging Face config.json carries them (ids outside the
  // vocabulary are the converters' "none").
  for (const auto& [key, field] : {std::pair{"tokenizer.ggml.bos_token_id", "bos_token_id"},
                                   std::pair{"tokenizer.ggml.eos_token_id", "eos_token_id"}})
    if (const GgufValue* v = f.find(key); v && v->type == GgufType::U32 && int64_t(v->as_u64()) < vocab)
      c[field] = v->as_u64();
  return c;
}


}  // namespace qf

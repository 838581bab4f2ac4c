// llama.cpp tensor names and the q/k row reorder (see the header for why it exists).
#include "model/gguf_llama_layout.h"

#include "core/error.h"

#include <fmt/format.h>

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

}  // namespace qf

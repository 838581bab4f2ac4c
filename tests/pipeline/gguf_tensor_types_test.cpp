// GGUF type choices: llama-quantize's Q4_K_M rules and the per-tensor fallbacks.
#include "pipeline/gguf_tensor_types.h"

#include <gtest/gtest.h>

namespace qf {
namespace {

GgmlType pick(std::string_view ft, GgufTensorRole role, int layer, int n, int64_t ne0,
              bool tied = false) {
  return choose_gguf_type(*gguf_file_type(ft), role, layer, n, ne0, tied).type;
}

TEST(GgufTensorTypes, Q4KMGivesOutputAndSomeAttnVFfnDownQ6K) {
  using R = GgufTensorRole;
  EXPECT_EQ(pick("q4_k_m", R::output, 31, 32, 4096), GgmlType::Q6_K);
  EXPECT_EQ(pick("q4_k_m", R::token_embd, 0, 32, 4096), GgmlType::Q4_K);
  EXPECT_EQ(pick("q4_k_m", R::token_embd, 0, 32, 4096, /*tied=*/true), GgmlType::Q6_K);
  EXPECT_EQ(pick("q4_k_m", R::attn_q, 5, 32, 4096), GgmlType::Q4_K);
  // use_more_bits(i, 32): i < 4, i >= 28, (i - 4) % 3 == 2.
  for (int i = 0; i < 32; ++i) {
    const bool more = i < 4 || i >= 28 || (i - 4) % 3 == 2;
    EXPECT_EQ(pick("q4_k_m", R::attn_v, i, 32, 4096), more ? GgmlType::Q6_K : GgmlType::Q4_K) << i;
    EXPECT_EQ(pick("q4_k_m", R::ffn_down, i, 32, 11008), more ? GgmlType::Q6_K : GgmlType::Q4_K) << i;
  }
  // Rows that are not a multiple of 256: output to Q8_0 as llama-quantize; Q4_K to Q8_0 (qforge
  // has no Q5_0); not a multiple of 32 either: F16.
  EXPECT_EQ(pick("q4_k_m", R::output, 0, 5, 64), GgmlType::Q8_0);
  EXPECT_EQ(pick("q4_k_m", R::attn_q, 1, 5, 64), GgmlType::Q8_0);
  EXPECT_EQ(pick("q4_k_m", R::ffn_down, 1, 5, 172), GgmlType::F16);
  EXPECT_FALSE(choose_gguf_type(*gguf_file_type("q4_k_m"), R::ffn_down, 1, 5, 172, false).note.empty());
}

TEST(GgufTensorTypes, PureTypesAndFallbacks) {
  using R = GgufTensorRole;
  EXPECT_EQ(pick("q8_0", R::output, 0, 2, 128), GgmlType::Q8_0);
  EXPECT_EQ(pick("q4_0", R::ffn_down, 0, 2, 172), GgmlType::F16);
  EXPECT_EQ(pick("nvfp4", R::attn_q, 0, 2, 128), GgmlType::NVFP4);
  EXPECT_EQ(pick("nvfp4", R::attn_q, 0, 2, 96), GgmlType::Q8_0);  // K % 64 != 0
  EXPECT_EQ(pick("nvfp4", R::token_embd, 0, 2, 128), GgmlType::Q8_0);
  EXPECT_EQ(pick("mxfp4", R::attn_q, 0, 2, 96), GgmlType::MXFP4);
  EXPECT_EQ(pick("f16", R::ffn_down, 0, 2, 172), GgmlType::F16);
  EXPECT_EQ(gguf_file_type("Q4_K_M")->llama_ftype, 15u);
  EXPECT_EQ(gguf_file_type("q8_0")->llama_ftype, 7u);
  EXPECT_EQ(gguf_file_type("nvfp4")->llama_ftype, 39u);
  EXPECT_FALSE(gguf_file_type("q3_k"));
}

}  // namespace
}  // namespace qf

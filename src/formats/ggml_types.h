// ggml's tensor types as one table: id (the number stored in GGUF files), name, block size in
// elements, bytes per block, and for the types qforge can produce, the reference quantizer and
// the dequantizer (ggml's `type_traits` row, limited to what qforge needs). Every id ggml defines
// is listed so that GGUF files written by llama.cpp can be read, sized and listed; only the rows
// with functions can be converted to or from float.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace qf {

// The numbers are ggml's `enum ggml_type` (ggml/include/ggml.h); they are what GGUF stores.
enum class GgmlType : uint32_t {
  F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8, Q8_1 = 9,
  Q2_K = 10, Q3_K = 11, Q4_K = 12, Q5_K = 13, Q6_K = 14, Q8_K = 15,
  IQ2_XXS = 16, IQ2_XS = 17, IQ3_XXS = 18, IQ1_S = 19, IQ4_NL = 20, IQ3_S = 21, IQ2_S = 22,
  IQ4_XS = 23, I8 = 24, I16 = 25, I32 = 26, I64 = 27, F64 = 28, IQ1_M = 29, BF16 = 30,
  TQ1_0 = 34, TQ2_0 = 35, MXFP4 = 39, NVFP4 = 40, Q1_0 = 41, Q2_0 = 42,
};

// Quantizes n floats (n a multiple of block_size) into n / block_size blocks at `out`.
// Inputs must be finite; NaN or infinity give unspecified (but memory-safe) bytes.
using GgmlQuantizeFn = void (*)(const float* x, uint8_t* out, int64_t n);
// Decodes n elements (n a multiple of block_size) from the blocks at `in` into y.
using GgmlDequantizeFn = void (*)(const uint8_t* in, float* y, int64_t n);

struct GgmlTypeInfo {
  GgmlType type;
  std::string_view name;  // ggml's spelling: "f32", "q4_K", "nvfp4"
  int block_size;         // elements per block
  int block_bytes;        // bytes per block
  GgmlQuantizeFn quantize = nullptr;      // ggml's quantize_row_*_ref, bit for bit; or null
  GgmlDequantizeFn dequantize = nullptr;  // ggml's dequantize_row_*; or null
};

// The row for a GGUF type id, or nullptr for an id ggml does not define (ids of removed types
// such as 4, 5 and 31..33 included).
const GgmlTypeInfo* ggml_type_info(uint32_t id);
// The row for a known type (never null).
const GgmlTypeInfo& ggml_type_info(GgmlType type);
// The type named `name` (case-insensitive: "Q4_K", "q4_k", "NVFP4"), or nullopt.
std::optional<GgmlType> ggml_type_from_name(std::string_view name);

// Bytes of one row of n_elements of `type`, or nullopt if n_elements is negative or not a
// multiple of the block size.
std::optional<uint64_t> ggml_row_bytes(GgmlType type, int64_t n_elements);

}  // namespace qf

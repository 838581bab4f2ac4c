// The ggml type table: one row per GGUF tensor type id (sizes as ggml's type_traits give them).
#include "formats/ggml_types.h"

#include "formats/ggml_quants.h"

#include <algorithm>
#include <array>
#include <cctype>

namespace qf {
namespace {

using T = GgmlType;

constexpr GgmlTypeInfo kTypes[] = {
    {T::F32, "f32", 1, 4, ggml_quantize_f32, ggml_dequantize_f32},
    {T::F16, "f16", 1, 2, ggml_quantize_f16, ggml_dequantize_f16},
    {T::Q4_0, "q4_0", 32, 18, ggml_quantize_q4_0, ggml_dequantize_q4_0},
    {T::Q4_1, "q4_1", 32, 20},
    {T::Q5_0, "q5_0", 32, 22},
    {T::Q5_1, "q5_1", 32, 24},
    {T::Q8_0, "q8_0", 32, 34, ggml_quantize_q8_0, ggml_dequantize_q8_0},
    {T::Q8_1, "q8_1", 32, 36},
    {T::Q2_K, "q2_K", 256, 84},
    {T::Q3_K, "q3_K", 256, 110},
    {T::Q4_K, "q4_K", 256, 144, ggml_quantize_q4_k, ggml_dequantize_q4_k},
    {T::Q5_K, "q5_K", 256, 176, ggml_quantize_q5_k, ggml_dequantize_q5_k},
    {T::Q6_K, "q6_K", 256, 210, ggml_quantize_q6_k, ggml_dequantize_q6_k},
    {T::Q8_K, "q8_K", 256, 292},
    {T::IQ2_XXS, "iq2_xxs", 256, 66},
    {T::IQ2_XS, "iq2_xs", 256, 74},
    {T::IQ3_XXS, "iq3_xxs", 256, 98},
    {T::IQ1_S, "iq1_s", 256, 50},
    {T::IQ4_NL, "iq4_nl", 32, 18},
    {T::IQ3_S, "iq3_s", 256, 110},
    {T::IQ2_S, "iq2_s", 256, 82},
    {T::IQ4_XS, "iq4_xs", 256, 136},
    {T::I8, "i8", 1, 1},
    {T::I16, "i16", 1, 2},
    {T::I32, "i32", 1, 4},
    {T::I64, "i64", 1, 8},
    {T::F64, "f64", 1, 8},
    {T::IQ1_M, "iq1_m", 256, 56},
    {T::BF16, "bf16", 1, 2, ggml_quantize_bf16, ggml_dequantize_bf16},
    {T::TQ1_0, "tq1_0", 256, 54},
    {T::TQ2_0, "tq2_0", 256, 66},
    {T::MXFP4, "mxfp4", 32, 17, ggml_quantize_mxfp4, ggml_dequantize_mxfp4},
    {T::NVFP4, "nvfp4", 64, 36, ggml_quantize_nvfp4, ggml_dequantize_nvfp4},
    {T::Q1_0, "q1_0", 128, 18},
    {T::Q2_0, "q2_0", 64, 18},
};

constexpr uint32_t kMaxId = 42;

// Row index by id, -1 for ids ggml does not define; built at compile time from kTypes.
constexpr std::array<int8_t, kMaxId + 1> kById = [] {
  std::array<int8_t, kMaxId + 1> a{};
  a.fill(-1);
  for (size_t i = 0; i < std::size(kTypes); ++i) a[uint32_t(kTypes[i].type)] = int8_t(i);
  return a;
}();

bool iequal(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

}  // namespace

const GgmlTypeInfo* ggml_type_info(uint32_t id) {
  if (id > kMaxId || kById[id] < 0) return nullptr;
  return &kTypes[size_t(kById[id])];
}

const GgmlTypeInfo& ggml_type_info(GgmlType type) { return *ggml_type_info(uint32_t(type)); }

std::optional<GgmlType> ggml_type_from_name(std::string_view name) {
  for (const auto& t : kTypes)
    if (iequal(t.name, name)) return t.type;
  return std::nullopt;
}

std::optional<uint64_t> ggml_row_bytes(GgmlType type, int64_t n_elements) {
  const GgmlTypeInfo& t = ggml_type_info(type);
  if (n_elements < 0 || n_elements % t.block_size != 0) return std::nullopt;
  return uint64_t(n_elements / t.block_size) * uint64_t(t.block_bytes);
}

}  // namespace qf

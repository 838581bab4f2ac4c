// Element types of tensors as they appear in safetensors files.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace qf {

enum class DType : uint8_t {
  F64, F32, F16, BF16, F8_E4M3, F8_E5M2, I64, I32, I16, I8, U64, U32, U16, U8, BOOL,
};

// Size of one element in bytes.
size_t dtype_size(DType dtype);
// The safetensors spelling ("F32", "BF16", "F8_E4M3", ...).
std::string_view dtype_name(DType dtype);
// Parses a safetensors dtype name; nullopt if unknown.
std::optional<DType> dtype_from_name(std::string_view name);
// True for F32, F16 and BF16: the dtypes quantization accepts as input.
bool is_quantizable_float(DType dtype);

}  // namespace qf

#include "core/dtype.h"

#include <array>

namespace qf {
namespace {

struct DTypeRow {
  DType dtype;
  std::string_view name;
  size_t size;
};

constexpr std::array<DTypeRow, 15> kDTypes = {{
    {DType::F64, "F64", 8},     {DType::F32, "F32", 4},         {DType::F16, "F16", 2},
    {DType::BF16, "BF16", 2},   {DType::F8_E4M3, "F8_E4M3", 1}, {DType::F8_E5M2, "F8_E5M2", 1},
    {DType::I64, "I64", 8},     {DType::I32, "I32", 4},         {DType::I16, "I16", 2},
    {DType::I8, "I8", 1},       {DType::U64, "U64", 8},         {DType::U32, "U32", 4},
    {DType::U16, "U16", 2},     {DType::U8, "U8", 1},           {DType::BOOL, "BOOL", 1},
}};

const DTypeRow& row(DType dtype) { return kDTypes[static_cast<size_t>(dtype)]; }

}  // namespace

size_t dtype_size(DType dtype) { return row(dtype).size; }
std::string_view dtype_name(DType dtype) { return row(dtype).name; }

std::optional<DType> dtype_from_name(std::string_view name) {
  for (const auto& r : kDTypes)
    if (r.name == name) return r.dtype;
  return std::nullopt;
}

bool is_quantizable_float(DType dtype) {
  return dtype == DType::F32 || dtype == DType::F16 || dtype == DType::BF16;
}

}  // namespace qf

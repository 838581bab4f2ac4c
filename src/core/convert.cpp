#include "core/convert.h"

#include "core/error.h"
#include "core/numeric.h"

#include <cstdint>
#include <cstring>
#include <vector>

namespace qf {

void convert_to_f32(DType dtype, const void* src, float* dst, size_t n) {
  switch (dtype) {
    case DType::F32:
      std::memcpy(dst, src, n * sizeof(float));
      return;
    case DType::BF16: {
      const auto* s = static_cast<const uint16_t*>(src);
      for (size_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(s[i]);
      return;
    }
    case DType::F16: {
      const auto* s = static_cast<const uint16_t*>(src);
      for (size_t i = 0; i < n; ++i) dst[i] = f16_to_f32(s[i]);
      return;
    }
    default:
      fail("cannot convert {} to F32", dtype_name(dtype));
  }
}

void convert_from_f32(DType dtype, const float* src, void* dst, size_t n) {
  switch (dtype) {
    case DType::F32:
      std::memcpy(dst, src, n * sizeof(float));
      return;
    case DType::BF16: {
      auto* d = static_cast<uint16_t*>(dst);
      for (size_t i = 0; i < n; ++i) d[i] = f32_to_bf16(src[i]);
      return;
    }
    case DType::F16: {
      auto* d = static_cast<uint16_t*>(dst);
      for (size_t i = 0; i < n; ++i) d[i] = f32_to_f16(src[i]);
      return;
    }
    default:
      fail("cannot convert F32 to {}", dtype_name(dtype));
  }
}

float round_through(DType dtype, float x) {
  switch (dtype) {
    case DType::F32: return x;
    case DType::BF16: return bf16_to_f32(f32_to_bf16(x));
    case DType::F16: return f16_to_f32(f32_to_f16(x));
    default: fail("round_through: {} is not a float dtype", dtype_name(dtype));
  }
}

void round_through(DType dtype, float* x, size_t n) {
  if (dtype == DType::F32) return;
  std::vector<std::byte> stored(n * dtype_size(dtype));
  convert_from_f32(dtype, x, stored.data(), n);
  convert_to_f32(dtype, stored.data(), x, n);
}

namespace {

// Exponent all ones: Inf or NaN, whatever the mantissa.
template <typename U>
uint64_t count_exponent_all_ones(const void* data, size_t nbytes, U mask) {
  const auto* p = static_cast<const unsigned char*>(data);
  uint64_t n = 0;
  for (size_t i = 0; i + sizeof(U) <= nbytes; i += sizeof(U)) {
    U u;
    std::memcpy(&u, p + i, sizeof(U));
    n += (u & mask) == mask;
  }
  return n;
}

}  // namespace

uint64_t count_nonfinite(DType dtype, const void* data, size_t nbytes) {
  switch (dtype) {
    case DType::F32: return count_exponent_all_ones<uint32_t>(data, nbytes, 0x7F800000u);
    case DType::F16: return count_exponent_all_ones<uint16_t>(data, nbytes, 0x7C00u);
    case DType::BF16: return count_exponent_all_ones<uint16_t>(data, nbytes, 0x7F80u);
    case DType::F64:
      return count_exponent_all_ones<uint64_t>(data, nbytes, 0x7FF0000000000000ull);
    default: return 0;
  }
}

}  // namespace qf

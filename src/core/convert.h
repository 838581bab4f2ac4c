// Conversion of F32 / F16 / BF16 element arrays to float32.
#pragma once

#include "core/dtype.h"

#include <cstddef>

namespace qf {

// Converts n elements of `src` (F32, F16 or BF16) to float32; exact for every input.
// Throws qf::Error for any other dtype.
void convert_to_f32(DType dtype, const void* src, float* dst, size_t n);

// Converts float32 to `dtype` (F32, F16 or BF16) with round to nearest even.
void convert_from_f32(DType dtype, const float* src, void* dst, size_t n);

}  // namespace qf

// Conversion of F32 / F16 / BF16 element arrays to float32.
#pragma once

#include "core/dtype.h"

#include <cstddef>
#include <cstdint>

namespace qf {

// Converts n elements of `src` (F32, F16 or BF16) to float32; exact for every input.
// Throws qf::Error for any other dtype.
void convert_to_f32(DType dtype, const void* src, float* dst, size_t n);

// Converts float32 to `dtype` (F32, F16 or BF16) with round to nearest even.
void convert_from_f32(DType dtype, const float* src, void* dst, size_t n);

// Rounds x[0..n) in place to the nearest value of `dtype` (F32, F16 or BF16; round to nearest
// even), so a value computed in float32 equals what a file of that dtype will hold.
// Throws qf::Error for any other dtype.
void round_through(DType dtype, float* x, size_t n);
// One value: what a torch op computing in float32 and storing `dtype` gives.
float round_through(DType dtype, float x);

// Number of NaN and Inf elements in `nbytes` bytes of `dtype` data (F32, F16, BF16, F64; 0 for
// integer and FP8 dtypes, whose files cannot hold them in a way the math reads). `nbytes` need
// not be a whole number of elements: a trailing partial element is ignored.
uint64_t count_nonfinite(DType dtype, const void* data, size_t nbytes);

}  // namespace qf

// Helpers shared by the format files (argument checks, scale rounding, task splitting) and the
// hooks tests use to reach SIMD building blocks. Not part of the formats API.
#pragma once

#include "core/dtype.h"
#include "formats/weight_rows.h"

#include <cstddef>
#include <cstdint>

namespace qf::detail {

// Throws qf::Error unless w is a well-formed F32/F16/BF16 matrix whose cols are a multiple of
// `multiple`. `what` names the caller in the message ("nvfp4 quantize").
void check_weight_rows(const WeightRows& w, int64_t multiple, const char* what);

// check_weight_rows for INT4, after checking that the group size is positive.
void check_int4_group(const WeightRows& w, int group);

// Throws unless dtype is F32, BF16 or F16 (the dtypes a stored FP8 / INT4 scale may have).
void check_scale_dtype(DType dtype, const char* what);

// Rounds a positive scale to `dtype` (F32, BF16, F16) with round to nearest even. A scale the
// rounding flushes to zero becomes the dtype's smallest positive subnormal and one that overflows
// becomes its largest finite value, so every stored scale is finite and non-zero and the codes
// made with it never divide by zero.
float round_scale_to_dtype(float scale, DType dtype);

// Address of element `index` of the row-major matrix.
inline const void* element_ptr(const WeightRows& w, int64_t index) {
  return static_cast<const uint8_t*>(w.data) + index * int64_t(dtype_size(w.dtype));
}

// Splits `items` items of `item_elements` elements each into tasks of at least ~64 Ki elements
// (a few hundred KB: large enough to amortize scheduling, small enough to balance two cores).
// The split depends only on the shape, never on the thread count.
struct TaskSplit {
  int64_t tasks = 0;
  int64_t items_per_task = 0;
};
TaskSplit split_tasks(int64_t items, int64_t item_elements);

// ---- Test hooks: SIMD building blocks run over arrays with the best available target ------
// E4M3 codes of values with |x| <= 448 (not NaN); must equal core f32_to_e4m3.
void e4m3_encode_simd(const float* in, uint8_t* out, size_t n);
// E2M1 nibbles (ModelOpt rule: RNE, sign bit iff x < 0); must equal e2m1_from_f32_modelopt.
void e2m1_encode_simd(const float* in, uint8_t* out, size_t n);
// The Highway target (HWY_AVX2, ...) that dynamic dispatch picks right now.
int64_t simd_target_in_use();

}  // namespace qf::detail

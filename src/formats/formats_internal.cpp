// Argument checks, scale rounding and task splitting shared by the format files.
#include "formats/formats_internal.h"

#include "core/error.h"
#include "core/numeric.h"

#include <algorithm>
#include <cmath>

namespace qf::detail {

void check_weight_rows(const WeightRows& w, int64_t multiple, const char* what) {
  if (!is_quantizable_float(w.dtype))
    fail("{}: input dtype {} is not F32, F16 or BF16", what, dtype_name(w.dtype));
  if (w.rows < 0 || w.cols < 0) fail("{}: negative shape [{}, {}]", what, w.rows, w.cols);
  if (multiple > 0 && w.cols % multiple != 0)
    fail("{}: {} columns are not a multiple of the block of {}", what, w.cols, multiple);
  if (w.data == nullptr && w.rows > 0 && w.cols > 0) fail("{}: no input data", what);
}

void check_int4_group(const WeightRows& w, int group) {
  if (group <= 0) fail("int4 quantize: group size {} is not positive", group);
  check_weight_rows(w, group, "int4 quantize");
}

void check_scale_dtype(DType dtype, const char* what) {
  if (!is_quantizable_float(dtype))
    fail("{}: scale dtype {} is not F32, BF16 or F16", what, dtype_name(dtype));
}

float round_scale_to_dtype(float scale, DType dtype) {
  float r = scale;
  float smallest = 0x1p-149f;
  float largest = 0x1.fffffep127f;
  switch (dtype) {
    case DType::BF16:
      r = bf16_to_f32(f32_to_bf16(scale));
      smallest = 0x1p-133f;
      largest = bf16_to_f32(0x7F7F);
      break;
    case DType::F16:
      r = f16_to_f32(f32_to_f16(scale));
      smallest = 0x1p-24f;
      largest = 65504.f;
      break;
    default:
      break;
  }
  if (r == 0.f) return smallest;
  if (std::isinf(r)) return largest;
  return r;
}

TaskSplit split_tasks(int64_t items, int64_t item_elements) {
  constexpr int64_t kTaskElements = int64_t(1) << 16;
  if (items <= 0) return {};
  const int64_t per = std::max<int64_t>(1, kTaskElements / std::max<int64_t>(1, item_elements));
  return {(items + per - 1) / per, per};
}

}  // namespace qf::detail

// INT4 group-wise scalar reference quantizer, dequantizer and the two packers (ModelOpt row
// pairs, compressed-tensors int32 words). The SIMD fast path lives in int4_quantize_simd.cpp.
#include "formats/int4.h"

#include "core/convert.h"
#include "core/error.h"
#include "formats/formats_internal.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace qf {

void int4_quantize_reference(const WeightRows& w, int group, DType scale_dtype, int8_t* q,
                             float* scales) {
  detail::check_int4_group(w, group);
  detail::check_scale_dtype(scale_dtype, "int4 quantize");
  std::vector<float> row(size_t(w.cols));
  const int64_t groups_per_row = w.cols / group;
  for (int64_t r = 0; r < w.rows; ++r) {
    convert_to_f32(w.dtype, detail::element_ptr(w, r * w.cols), row.data(), size_t(w.cols));
    for (int64_t j = 0; j < groups_per_row; ++j) {
      const float* x = row.data() + j * group;
      float amax = 0.f;
      for (int k = 0; k < group; ++k) amax = std::max(amax, std::fabs(x[k]));

      // ModelOpt: amax / 7 on CUDA is amax * fl32(1/7); an all-zero group gets scale 1.
      const float raw = amax == 0.f ? 1.f : div_by_constant(amax, 7.0f);
      const float scale = detail::round_scale_to_dtype(raw, scale_dtype);
      scales[r * groups_per_row + j] = scale;
      int8_t* out = q + r * w.cols + j * group;
      for (int k = 0; k < group; ++k) {
        // torch.round is round half to even: nearbyint under the default rounding mode.
        const float v = std::nearbyint(x[k] / scale);
        out[k] = int8_t(std::clamp(v, -8.f, 7.f));
      }
    }
  }
}

void int4_dequantize(const int8_t* q, const float* scales, int group, int64_t rows, int64_t cols,
                     float* out) {
  if (group <= 0 || rows < 0 || cols < 0 || cols % group != 0)
    fail("int4 dequantize: bad shape [{}, {}] for group {}", rows, cols, group);
  const int64_t groups_per_row = cols / group;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      out[r * cols + c] = float(q[r * cols + c]) * scales[r * groups_per_row + c / group];
}

void int4_pack_row_pairs(const int8_t* q, int64_t rows, int64_t cols, uint8_t* out) {
  if (rows < 0 || cols < 0 || rows % 2 != 0)
    fail("int4 pack: ModelOpt row-pair packing needs an even row count, got {}", rows);
  for (int64_t i = 0; i < rows / 2; ++i) {
    const int8_t* even = q + (2 * i) * cols;
    const int8_t* odd = q + (2 * i + 1) * cols;
    for (int64_t k = 0; k < cols; ++k)
      out[i * cols + k] = uint8_t((uint8_t(even[k]) & 0xF) | ((uint8_t(odd[k]) & 0xF) << 4));
  }
}

void int4_pack_int32(const int8_t* q, int64_t rows, int64_t cols, int32_t* out) {
  if (rows < 0 || cols < 0 || cols % 8 != 0)
    fail("int4 pack: int32 packing needs columns in multiples of 8, got {}", cols);
  const int64_t words = cols / 8;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < words; ++j) {
      uint32_t word = 0;
      for (int i = 0; i < 8; ++i) {
        const uint32_t nibble = uint32_t(q[r * cols + 8 * j + i] + 8) & 0xFu;  // offset binary
        word |= nibble << (4 * i);
      }
      out[r * words + j] = int32_t(word);
    }
  }
}

}  // namespace qf

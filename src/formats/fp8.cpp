// FP8 E4M3 per-output-channel scalar reference quantizer and dequantizer. The SIMD fast path
// lives in fp8_quantize_simd.cpp.
#include "formats/fp8.h"

#include "core/convert.h"
#include "core/error.h"
#include "core/numeric.h"
#include "formats/formats_internal.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace qf {

void fp8_channel_quantize_reference(const WeightRows& w, DType scale_dtype, uint8_t* codes,
                                    float* scales) {
  detail::check_weight_rows(w, 1, "fp8 quantize");
  detail::check_scale_dtype(scale_dtype, "fp8 quantize");
  std::vector<float> row(size_t(w.cols));
  for (int64_t r = 0; r < w.rows; ++r) {
    convert_to_f32(w.dtype, detail::element_ptr(w, r * w.cols), row.data(), size_t(w.cols));
    float amax = 0.f;
    for (float x : row) amax = std::max(amax, std::fabs(x));

    // ModelOpt: amax / 448 on CUDA is amax * fl32(1/448); a dead channel gets scale 1.
    const float raw = amax == 0.f ? 1.f : div_by_constant(amax, 448.0f);
    const float scale = detail::round_scale_to_dtype(raw, scale_dtype);
    scales[r] = scale;
    uint8_t* out = codes + r * w.cols;
    for (int64_t c = 0; c < w.cols; ++c) {
      // The clamp matters: PyTorch's E4M3 cast is not saturating, and a scale rounded down to
      // BF16/F16 can push |x / scale| a little past 448.
      out[c] = f32_to_e4m3(std::clamp(row[size_t(c)] / scale, -448.f, 448.f));
    }
  }
}

void fp8_channel_dequantize(const uint8_t* codes, const float* scales, int64_t rows,
                            int64_t cols, float* out) {
  if (rows < 0 || cols < 0) fail("fp8 dequantize: bad shape [{}, {}]", rows, cols);
  float value[256];  // e4m3_to_f32 of every code, looked up instead of decoded per element
  for (int i = 0; i < 256; ++i) value[i] = e4m3_to_f32(uint8_t(i));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) out[r * cols + c] = value[codes[r * cols + c]] * scales[r];
}

}  // namespace qf

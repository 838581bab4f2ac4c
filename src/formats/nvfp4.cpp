// NVFP4 scalar reference quantizer (ModelOpt dynamic-block export math), the global scale and
// the dequantizer. The SIMD fast path lives in nvfp4_quantize_simd.cpp.
#include "formats/nvfp4.h"

#include "core/convert.h"
#include "core/error.h"
#include "core/numeric.h"
#include "formats/formats_internal.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace qf {

float nvfp4_global_scale(float amax, float fp8_max) {
  if (!(amax >= 0.f) || std::isinf(amax))
    fail("nvfp4: tensor amax {} is not a finite non-negative number", amax);
  // CUDA computes amax / 2688.0 as amax * fl32(1/2688) (specs modelopt-nvfp4 §0.3); ModelOpt
  // divides by the Python float E2M1_MAX * fp8_max (6 * 448 = 2688, 6 * 256 = 1536).
  const float g = div_by_constant(amax, 6.0f * fp8_max);
  // ModelOpt divides 0 by 0 here and writes NaN scales; 1.0 keeps an all-zero tensor finite
  // (and a subnormal amax whose product flushes to zero behaves the same way).
  return g == 0.f ? 1.f : g;
}

void nvfp4_quantize_reference(const WeightRows& w, float g, uint8_t* packed, uint8_t* scales) {
  detail::check_weight_rows(w, kNvfp4Block, "nvfp4 quantize");
  if (!(g > 0.f) || std::isinf(g)) fail("nvfp4 quantize: global scale {} is not positive", g);

  const float six_g = 6.0f * g;  // fl32(6 * g), computed once as ModelOpt does
  std::vector<float> row(size_t(w.cols));
  const int64_t blocks_per_row = w.cols / kNvfp4Block;
  for (int64_t r = 0; r < w.rows; ++r) {
    convert_to_f32(w.dtype, detail::element_ptr(w, r * w.cols), row.data(), size_t(w.cols));
    for (int64_t j = 0; j < blocks_per_row; ++j) {
      const float* x = row.data() + j * kNvfp4Block;
      float bamax = 0.f;
      for (int k = 0; k < kNvfp4Block; ++k) bamax = std::max(bamax, std::fabs(x[k]));

      float s = bamax / six_g;
      if (s == 0.f) s = 1.f;  // all-zero block
      const uint8_t s8 = f32_to_e4m3(std::clamp(s, 0x1p-9f, 448.f));
      const float divisor = e4m3_to_f32(s8) * g;

      const int64_t block = r * blocks_per_row + j;
      scales[block] = s8;
      uint8_t* out = packed + block * (kNvfp4Block / 2);
      for (int k = 0; k < kNvfp4Block; k += 2) {
        const uint8_t lo = e2m1_from_f32_modelopt(x[k] / divisor);
        const uint8_t hi = e2m1_from_f32_modelopt(x[k + 1] / divisor);
        out[k / 2] = uint8_t(lo | (hi << 4));
      }
    }
  }
}

void nvfp4_dequantize(const uint8_t* packed, const uint8_t* scales, float g, int64_t rows,
                      int64_t cols, float* out) {
  if (rows < 0 || cols < 0 || cols % kNvfp4Block != 0)
    fail("nvfp4 dequantize: bad shape [{}, {}]", rows, cols);
  const int64_t n = rows * cols;
  for (int64_t i = 0; i < n; ++i) {
    const uint8_t byte = packed[i / 2];
    const uint8_t nibble = (i % 2 == 0) ? (byte & 0xF) : (byte >> 4);
    out[i] = e2m1_to_f32(nibble) * e4m3_to_f32(scales[i / kNvfp4Block]) * g;
  }
}

}  // namespace qf

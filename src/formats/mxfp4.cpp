// MXFP4 scalar reference quantizer (compressed-tensors rules, see mxfp4.h) and dequantizer.
// The SIMD fast path lives in mxfp4_quantize_simd.cpp.
#include "formats/mxfp4.h"

#include "core/convert.h"
#include "core/error.h"
#include "core/numeric.h"
#include "core/thread_pool.h"
#include "formats/formats_internal.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace qf {

uint8_t mxfp4_scale_code(float block_amax) {
  // A quarter of the float32 mantissa range: a fraction >= 0.75 carries into the exponent.
  const uint32_t rounded = f32_bits(block_amax) + 0x200000u;
  const uint32_t biased_exp = (rounded >> 23) & 0xFFu;
  // 127 + log2(power of two) - 2 = biased_exp - 2, clamped to [0, 252] (see mxfp4.h, rule 3).
  return uint8_t(std::clamp<uint32_t>(biased_exp, 2, 254) - 2);
}

namespace {

// One row of 32-blocks: amax, the E8M0 code by `scale_code`, elements by `nibble` of x / 2^k,
// element 2j in the low nibble. Both the compressed-tensors and the ModelOpt rule use it.
template <typename ScaleCode, typename Nibble>
void quantize_row(const WeightRows& w, int64_t r, float* row, uint8_t* packed, uint8_t* scales,
                  ScaleCode scale_code, Nibble nibble) {
  const int64_t blocks_per_row = w.cols / kMxfp4Block;
  convert_to_f32(w.dtype, detail::element_ptr(w, r * w.cols), row, size_t(w.cols));
  for (int64_t j = 0; j < blocks_per_row; ++j) {
    const float* x = row + j * kMxfp4Block;
    float amax = 0.f;
    for (int k = 0; k < kMxfp4Block; ++k) amax = std::max(amax, std::fabs(x[k]));
    const uint8_t code = scale_code(amax);
    const float scale = e8m0_to_f32(code);
    const int64_t block = r * blocks_per_row + j;
    scales[block] = code;
    uint8_t* out = packed + block * (kMxfp4Block / 2);
    for (int k = 0; k < kMxfp4Block; k += 2)
      out[k / 2] = uint8_t(nibble(x[k] / scale) | (nibble(x[k + 1] / scale) << 4));
  }
}

}  // namespace

void mxfp4_quantize_reference(const WeightRows& w, uint8_t* packed, uint8_t* scales) {
  detail::check_weight_rows(w, kMxfp4Block, "mxfp4 quantize");
  std::vector<float> row(size_t(w.cols));
  for (int64_t r = 0; r < w.rows; ++r)
    quantize_row(w, r, row.data(), packed, scales, mxfp4_scale_code, e2m1_from_f32_modelopt);
}

uint8_t mxfp4_scale_code_modelopt(float block_amax) {
  const float descale = div_by_constant(block_amax, 6.0f);
  const float k = std::ceil(std::max(std::log2(descale), -127.0f));
  // Finite inputs keep k <= 126 (amax < 2^128); the clamp only guards the E8M0 NaN code.
  return uint8_t(std::clamp(k + 127.0f, 0.0f, 254.0f));
}

uint8_t e2m1_from_f32_modelopt_mx(float x) {
  const uint8_t sign = x > 0.0f ? 0 : 1;  // (2 - sign(x)) // 2: zeros get the sign bit
  return uint8_t(sign << 3 | e2m1_index_rtz_ties(std::fabs(x)));
}

void mxfp4_quantize_modelopt(const WeightRows& w, uint8_t* packed, uint8_t* scales,
                             ThreadPool* pool) {
  detail::check_weight_rows(w, kMxfp4Block, "mxfp4 quantize");
  auto one_row = [&](int64_t r) {
    std::vector<float> row(size_t(w.cols));
    quantize_row(w, r, row.data(), packed, scales, mxfp4_scale_code_modelopt,
                 e2m1_from_f32_modelopt_mx);
  };
  if (pool) {
    pool->parallel_for(w.rows, one_row);
  } else {
    for (int64_t r = 0; r < w.rows; ++r) one_row(r);
  }
}

void mxfp4_dequantize(const uint8_t* packed, const uint8_t* scales, int64_t rows, int64_t cols,
                      float* out) {
  if (rows < 0 || cols < 0 || cols % kMxfp4Block != 0)
    fail("mxfp4 dequantize: bad shape [{}, {}]", rows, cols);
  const int64_t n = rows * cols;
  for (int64_t i = 0; i < n; ++i) {
    const uint8_t byte = packed[i / 2];
    const uint8_t nibble = (i % 2 == 0) ? (byte & 0xF) : (byte >> 4);
    out[i] = e2m1_to_f32(nibble) * e8m0_to_f32(scales[i / kMxfp4Block]);
  }
}

}  // namespace qf

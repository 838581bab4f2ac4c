#include "formats/llm_compressor_rtn.h"

#include "core/convert.h"
#include "core/error.h"
#include "core/numeric.h"
#include "core/thread_pool.h"
#include "formats/formats_internal.h"
#include "formats/nvfp4.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <vector>

namespace qf {
float llm_compressor_zero_scale(DType t) {
  switch (t) {
    case DType::BF16: return 0.0078125f;      // 2^-7
    case DType::F16: return 0.0009765625f;    // 2^-10
    default: return FLT_EPSILON;
  }
}

void quantize_llm_compressor(const WeightRows& w, QuantizedTensor& q, ThreadPool& pool) {
  float half_range = 0.f;
  int lo = 0, hi = 0;
  switch (q.format) {
    case Format::int4: half_range = 7.5f, lo = -8, hi = 7; break;
    case Format::int8: half_range = 127.5f, lo = -128, hi = 127; break;
    case Format::fp8: half_range = 448.f; break;
    default: fail("llm-compressor rounding: {} has no float scales", int(q.format));
  }
  const bool fp8 = q.format == Format::fp8;
  const int64_t span = (fp8 || q.format == Format::int8) ? w.cols : q.block;
  detail::check_weight_rows(w, span, "llm-compressor quantize");
  const DType t = w.dtype;
  q.codes.resize(size_t(w.rows * w.cols));
  q.scales.resize(size_t(w.rows * (w.cols / span)));
  pool.parallel_for(w.rows, [&](int64_t r) {
    std::vector<float> row(size_t(w.cols));
    convert_to_f32(t, detail::element_ptr(w, r * w.cols), row.data(), size_t(w.cols));
    for (int64_t u = 0; u < w.cols / span; ++u) {
      const float* x = row.data() + u * span;
      float amax = 0.f;
      for (int64_t k = 0; k < span; ++k) amax = std::max(amax, std::fabs(x[k]));
      float s = round_through(t, amax / half_range);
      if (s == 0.f) s = llm_compressor_zero_scale(t);
      q.scales[size_t(r * (w.cols / span) + u)] = s;
      uint8_t* codes = q.codes.data() + r * w.cols + u * span;
      for (int64_t k = 0; k < span; ++k) {
        const float v = round_through(t, x[k] / s);
        if (fp8) {
          codes[k] = f32_to_e4m3(std::clamp(v, -448.f, 448.f));
        } else {
          const float c = std::clamp(std::nearbyint(v), float(lo), float(hi));
          codes[k] = uint8_t(int8_t(c));
        }
      }
    }
  });
}

float nvfp4_llm_compressor_global(float amax, DType t) {
  if (!(amax >= 0.f) || std::isinf(amax))
    fail("nvfp4 (llm-compressor): amax {} is not finite and non-negative", amax);
  // generate_gparam clamps the amax to the dtype's smallest normal before dividing.
  const float tiny = t == DType::F16 ? 0x1p-14f : FLT_MIN;
  const float g = round_through(t, round_through(t, 1.0f / std::max(amax, tiny)) * 2688.0f);
  return std::isfinite(g) ? g : 1.0f;
}

void nvfp4_quantize_llm_compressor(const WeightRows& w, float amax, QuantizedTensor& q,
                                   ThreadPool& pool) {
  detail::check_weight_rows(w, kNvfp4Block, "nvfp4 (llm-compressor) quantize");
  const DType t = w.dtype;
  const float g = nvfp4_llm_compressor_global(amax, t);
  const int64_t blocks_per_row = w.cols / kNvfp4Block;
  q.scale_dtype = DType::F8_E4M3;
  q.global_scale = 1.0f / g;
  q.global_scale_reciprocal = g;
  q.codes.resize(size_t(w.rows * w.cols / 2));
  q.block_scales.resize(size_t(w.rows * blocks_per_row));
  pool.parallel_for(w.rows, [&](int64_t r) {
    std::vector<float> row(size_t(w.cols));
    convert_to_f32(t, detail::element_ptr(w, r * w.cols), row.data(), size_t(w.cols));
    for (int64_t j = 0; j < blocks_per_row; ++j) {
      const float* x = row.data() + j * kNvfp4Block;
      float bamax = 0.f;
      for (int k = 0; k < kNvfp4Block; ++k) bamax = std::max(bamax, std::fabs(x[k]));
      uint8_t s8 = f32_to_e4m3(std::min(g * round_through(t, bamax / 6.0f), 448.f));
      if (s8 == 0) s8 = f32_to_e4m3(0.125f);
      const float divisor = e4m3_to_f32(s8) / g;
      q.block_scales[size_t(r * blocks_per_row + j)] = s8;
      uint8_t* out = q.codes.data() + (r * w.cols + j * kNvfp4Block) / 2;
      for (int k = 0; k < kNvfp4Block; k += 2) {
        const uint8_t lo = e2m1_from_f32_modelopt(x[k] / divisor);
        const uint8_t hi = e2m1_from_f32_modelopt(x[k + 1] / divisor);
        out[k / 2] = uint8_t(lo | (hi << 4));
      }
    }
  });
}

}  // namespace qf

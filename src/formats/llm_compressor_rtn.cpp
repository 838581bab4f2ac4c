#include "formats/llm_compressor_rtn.h"

#include "core/convert.h"
#include "core/error.h"
#include "core/numeric.h"
#include "core/thread_pool.h"
#include "formats/formats_internal.h"

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

}  // namespace qf

// INT8 per-channel quantizer and dequantizer (SmoothQuant W8A8 weights).
#include "formats/int8.h"

#include "core/error.h"
#include "core/thread_pool.h"
#include "formats/formats_internal.h"
#include "formats/weight_rows.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace qf {

Int8ChannelTensor int8_channel_quantize(const float* w, int64_t rows, int64_t cols,
                                        DType scale_dtype, ThreadPool& pool) {
  detail::check_scale_dtype(scale_dtype, "int8 quantize");
  if (rows < 0 || cols <= 0) fail("int8 quantize: bad shape [{}, {}]", rows, cols);
  Int8ChannelTensor q;
  q.rows = rows;
  q.cols = cols;
  q.scale_dtype = scale_dtype;
  q.codes.resize(size_t(rows * cols));
  q.scales.resize(size_t(rows));
  pool.parallel_for(rows, [&](int64_t r) {
    const float* x = w + r * cols;
    float amax = 0.f;
    for (int64_t c = 0; c < cols; ++c) amax = std::max(amax, std::fabs(x[c]));
    const float scale = int8_scale_from_amax(amax, scale_dtype);
    q.scales[size_t(r)] = scale;
    int8_t* out = q.codes.data() + r * cols;
    // torch.round is half to even: nearbyint under the default rounding mode.
    for (int64_t c = 0; c < cols; ++c)
      out[c] = int8_t(std::clamp(std::nearbyint(x[c] / scale), -128.f, 127.f));
  });
  return q;
}

float int8_scale_from_amax(float amax, DType scale_dtype) {
  const float raw = amax == 0.f ? 1.f : div_by_constant(amax, 127.0f);
  return detail::round_scale_to_dtype(raw, scale_dtype);
}

QuantizedTensor int8_to_quantized(Int8ChannelTensor&& q) {
  QuantizedTensor t;
  t.format = Format::int8;
  t.rows = q.rows;
  t.cols = q.cols;
  t.block = 1;
  t.codes.resize(q.codes.size());
  if (!q.codes.empty()) std::memcpy(t.codes.data(), q.codes.data(), q.codes.size());
  t.scales = std::move(q.scales);
  t.scale_dtype = q.scale_dtype;
  return t;
}

void int8_channel_dequantize(const Int8ChannelTensor& q, float* out) {
  for (int64_t r = 0; r < q.rows; ++r)
    for (int64_t c = 0; c < q.cols; ++c)
      out[r * q.cols + c] = float(q.codes[size_t(r * q.cols + c)]) * q.scales[size_t(r)];
}

}  // namespace qf

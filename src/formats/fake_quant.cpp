// Scale rules per format, element quantization against frozen scales, and the NVFP4 static-block
// export path.
#include "formats/fake_quant.h"

#include "core/error.h"
#include "core/numeric.h"
#include "core/thread_pool.h"
#include "formats/formats_internal.h"
#include "formats/fp8.h"
#include "formats/int4.h"
#include "formats/int8.h"
#include "formats/mxfp4.h"
#include "formats/nvfp4.h"

#include <algorithm>
#include <cmath>

namespace qf {

uint8_t nvfp4_dynamic_block_scale(float bamax, float g) {
  float s = bamax / (6.0f * g);
  if (s == 0.f) s = 1.f;
  return f32_to_e4m3(std::clamp(s, 0x1p-9f, 448.f));
}

uint8_t nvfp4_static_block_scale(float bamax_cal, float global_amax) {
  // Both /6 are CUDA scalar divisions, i.e. reciprocal multiplies (specs §0.3); (ps*448) first.
  float ps = div_by_constant(bamax_cal, 1.0f / 6.0f);
  if (ps == 0.f) ps = 1.f;
  const float psm = div_by_constant(global_amax, 1.0f / 6.0f);
  return f32_to_e4m3(std::clamp((ps * 448.f) / psm, 0x1p-9f, 448.f));
}

float int4_scale_from_amax(float amax, DType scale_dtype) {
  const float raw = amax == 0.f ? 1.f : div_by_constant(amax, 1.0f / 7.0f);
  return detail::round_scale_to_dtype(raw, scale_dtype);
}

float fp8_scale_from_amax(float amax, DType scale_dtype) {
  const float raw = amax == 0.f ? 1.f : div_by_constant(amax, 1.0f / 448.0f);
  return detail::round_scale_to_dtype(raw, scale_dtype);
}

void fake_quantize_unit(Format format, const float* x, int64_t n, float amax, DType scale_dtype,
                        float* out) {
  switch (format) {
    case Format::int4: {
      const float s = int4_scale_from_amax(amax, scale_dtype);
      for (int64_t k = 0; k < n; ++k) out[k] = std::clamp(std::nearbyint(x[k] / s), -8.f, 7.f) * s;
      return;
    }
    case Format::int8: {
      const float s = int8_scale_from_amax(amax, scale_dtype);
      for (int64_t k = 0; k < n; ++k)
        out[k] = std::clamp(std::nearbyint(x[k] / s), -128.f, 127.f) * s;
      return;
    }
    case Format::fp8: {
      const float s = fp8_scale_from_amax(amax, scale_dtype);
      for (int64_t k = 0; k < n; ++k)
        out[k] = e4m3_to_f32(f32_to_e4m3(std::clamp(x[k] / s, -448.f, 448.f))) * s;
      return;
    }
    case Format::mxfp4: {
      const float s = e8m0_to_f32(mxfp4_scale_code(amax));
      for (int64_t k = 0; k < n; ++k) out[k] = e2m1_to_f32(e2m1_from_f32_modelopt(x[k] / s)) * s;
      return;
    }
    case Format::nvfp4:
      break;
  }
  fail("fake_quantize_unit: nvfp4 has two-level scales; use scales_from_amax");
}

namespace {

int resolve_block(Format format, int block) {
  if (format == Format::fp8 || format == Format::int8) return 1;
  if (format == Format::int4) return block > 0 ? block : kInt4DefaultGroup;
  return format_info(format).block;
}

// Elements one scale covers along a row (fp8: the whole row).
int64_t scale_span(const QuantizedTensor& q) {
  return q.format == Format::fp8 || q.format == Format::int8 ? q.cols : int64_t(q.block);
}

}  // namespace

QuantizedTensor scales_from_amax(Format format, int64_t rows, int64_t cols, int block,
                                 const float* amax, float global_amax, DType scale_dtype) {
  QuantizedTensor q;
  q.format = format;
  q.rows = rows;
  q.cols = cols;
  q.block = resolve_block(format, block);
  q.scale_dtype = scale_dtype;
  if (rows < 0 || cols <= 0 || cols % scale_span(q) != 0)
    fail("{}: input size {} is not a multiple of the block of {}", format_info(format).name, cols,
         scale_span(q));
  const int64_t n = rows * (cols / scale_span(q));
  switch (format) {
    case Format::nvfp4:
      if (!(global_amax > 0.f) || std::isinf(global_amax))
        fail("nvfp4 static: global amax {} is not positive and finite", global_amax);
      q.scale_dtype = DType::F8_E4M3;
      q.global_scale = nvfp4_global_scale(global_amax);
      q.block_scales.resize(size_t(n));
      for (int64_t i = 0; i < n; ++i)
        q.block_scales[size_t(i)] = nvfp4_static_block_scale(amax[i], global_amax);
      break;
    case Format::mxfp4:
      q.scale_dtype = DType::U8;
      q.block_scales.resize(size_t(n));
      for (int64_t i = 0; i < n; ++i) q.block_scales[size_t(i)] = mxfp4_scale_code(amax[i]);
      break;
    case Format::int4:
      q.scales.resize(size_t(n));
      for (int64_t i = 0; i < n; ++i) q.scales[size_t(i)] = int4_scale_from_amax(amax[i], scale_dtype);
      break;
    case Format::fp8:
      q.scales.resize(size_t(n));
      for (int64_t i = 0; i < n; ++i) q.scales[size_t(i)] = fp8_scale_from_amax(amax[i], scale_dtype);
      break;
    case Format::int8:
      q.scales.resize(size_t(n));
      for (int64_t i = 0; i < n; ++i) q.scales[size_t(i)] = int8_scale_from_amax(amax[i], scale_dtype);
      break;
  }
  return q;
}

FrozenQuantizer::FrozenQuantizer(const QuantizedTensor& q)
    : format_(q.format), cols_(q.cols), block_(1) {
  const int64_t span = scale_span(q);
  if (span <= 0 || q.cols % span != 0) fail("frozen quantizer: bad block {} for {} columns", span, q.cols);
  scales_per_row_ = q.cols / span;
  block_ = int(span);
  const size_t n = size_t(q.rows * scales_per_row_);
  divisor_.resize(n);
  g_ = q.global_scale;
  switch (format_) {
    case Format::nvfp4:
      if (q.block_scales.size() != n) fail("frozen quantizer: nvfp4 needs {} block scales", n);
      e4m3_.resize(n);
      for (size_t i = 0; i < n; ++i) {
        e4m3_[i] = e4m3_to_f32(q.block_scales[i]);
        divisor_[i] = e4m3_[i] * g_;
      }
      break;
    case Format::mxfp4:
      if (q.block_scales.size() != n) fail("frozen quantizer: mxfp4 needs {} block scales", n);
      for (size_t i = 0; i < n; ++i) divisor_[i] = e8m0_to_f32(q.block_scales[i]);
      break;
    case Format::int4:
    case Format::fp8:
    case Format::int8:
      if (q.scales.size() != n) fail("frozen quantizer: {} needs {} scales", format_info(format_).name, n);
      std::copy(q.scales.begin(), q.scales.end(), divisor_.begin());
      break;
  }
}

uint8_t FrozenQuantizer::encode(int64_t r, int64_t c, float x, float* dequantized) const {
  const size_t s = size_t(r * scales_per_row_ + c / block_);
  const float d = divisor_[s];
  switch (format_) {
    case Format::nvfp4: {
      const uint8_t code = e2m1_from_f32_modelopt(x / d);
      *dequantized = e2m1_to_f32(code) * e4m3_[s] * g_;
      return code;
    }
    case Format::mxfp4: {
      const uint8_t code = e2m1_from_f32_modelopt(x / d);
      *dequantized = e2m1_to_f32(code) * d;
      return code;
    }
    case Format::int4: {
      const float v = std::clamp(std::nearbyint(x / d), -8.f, 7.f);
      *dequantized = v * d;
      return uint8_t(int8_t(v));
    }
    case Format::int8: {
      const float v = std::clamp(std::nearbyint(x / d), -128.f, 127.f);
      *dequantized = v * d;
      return uint8_t(int8_t(v));
    }
    case Format::fp8: {
      const uint8_t code = f32_to_e4m3(std::clamp(x / d, -448.f, 448.f));
      *dequantized = e4m3_to_f32(code) * d;
      return code;
    }
  }
  *dequantized = 0.f;
  return 0;
}

void set_code(QuantizedTensor& q, int64_t r, int64_t c, uint8_t code) {
  const bool packed = q.format == Format::nvfp4 || q.format == Format::mxfp4;
  const size_t n = size_t(q.rows * q.cols);
  if (q.codes.empty()) q.codes.assign(packed ? n / 2 : n, 0);
  const int64_t i = r * q.cols + c;
  if (!packed) {
    q.codes[size_t(i)] = code;
    return;
  }
  uint8_t& byte = q.codes[size_t(i / 2)];
  byte = (i % 2 == 0) ? uint8_t((byte & 0xF0) | (code & 0xF))
                      : uint8_t((byte & 0x0F) | ((code & 0xF) << 4));
}

void encode_with_scales(QuantizedTensor& q, const float* w, ThreadPool& pool) {
  const FrozenQuantizer fq(q);
  const bool packed = q.format == Format::nvfp4 || q.format == Format::mxfp4;
  q.codes.assign(packed ? size_t(q.rows * q.cols / 2) : size_t(q.rows * q.cols), 0);
  // Rows own whole bytes (cols is even for the packed formats), so tasks never share a byte.
  pool.parallel_for(q.rows, [&](int64_t r) {
    float d = 0.f;
    for (int64_t c = 0; c < q.cols; ++c) set_code(q, r, c, fq.encode(r, c, w[r * q.cols + c], &d));
  });
}

void fake_quantize_with_scales(const QuantizedTensor& q, const float* w, float* out,
                               ThreadPool& pool) {
  const FrozenQuantizer fq(q);
  pool.parallel_for(q.rows, [&](int64_t r) {
    for (int64_t c = 0; c < q.cols; ++c) {
      const int64_t i = r * q.cols + c;
      out[i] = fq.fake(r, c, w[i]);
    }
  });
}

void dequantize(const QuantizedTensor& q, float* out, ThreadPool* pool) {
  // Rows [r0, r0 + n): every format's codes and scales are row-major, whole rows at a time.
  auto rows = [&](int64_t r0, int64_t n) {
    float* o = out + r0 * q.cols;
    switch (q.format) {
      case Format::nvfp4:
        nvfp4_dequantize(q.codes.data() + r0 * (q.cols / 2),
                         q.block_scales.data() + r0 * (q.cols / 16), q.global_scale, n, q.cols, o);
        break;
      case Format::mxfp4:
        mxfp4_dequantize(q.codes.data() + r0 * (q.cols / 2),
                         q.block_scales.data() + r0 * (q.cols / 32), n, q.cols, o);
        break;
      case Format::int4:
        int4_dequantize(reinterpret_cast<const int8_t*>(q.codes.data()) + r0 * q.cols,
                        q.scales.data() + r0 * (q.cols / q.block), q.block, n, q.cols, o);
        break;
      case Format::fp8:
        fp8_channel_dequantize(q.codes.data() + r0 * q.cols, q.scales.data() + r0, n, q.cols, o);
        break;
      case Format::int8:
        for (int64_t r = 0; r < n; ++r)
          for (int64_t c = 0; c < q.cols; ++c)
            o[r * q.cols + c] =
                float(int8_t(q.codes[size_t((r0 + r) * q.cols + c)])) * q.scales[size_t(r0 + r)];
        break;
    }
  };
  constexpr int64_t kRows = 64;
  const int64_t tasks = (q.rows + kRows - 1) / kRows;
  if (!pool || tasks <= 1) {
    rows(0, q.rows);
    return;
  }
  pool->parallel_for(tasks, [&](int64_t t) {
    const int64_t r0 = t * kRows;
    rows(r0, std::min(kRows, q.rows - r0));
  });
}

QuantizedTensor nvfp4_static_quantize(const float* w, int64_t rows, int64_t cols,
                                      const float* block_amax, float global_amax,
                                      ThreadPool& pool) {
  QuantizedTensor q = scales_from_amax(Format::nvfp4, rows, cols, 0, block_amax, global_amax);
  encode_with_scales(q, w, pool);
  return q;
}

}  // namespace qf

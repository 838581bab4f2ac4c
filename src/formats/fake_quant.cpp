// Scale rules per format, element quantization against frozen scales, and the NVFP4 static-block
// export path. The per-format pieces are the format rows' functions (formats/registry.cpp).
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

uint8_t nvfp4_static_block_scale(float bamax_cal, float global_amax, float fp8_max) {
  // Both /6 are CUDA scalar divisions, i.e. reciprocal multiplies (specs §0.3); (ps*m) first.
  float ps = div_by_constant(bamax_cal, 6.0f);
  if (ps == 0.f) ps = 1.f;
  const float psm = div_by_constant(global_amax, 6.0f);
  return f32_to_e4m3(std::clamp((ps * fp8_max) / psm, 0x1p-9f, 448.f));
}

float int4_scale_from_amax(float amax, DType scale_dtype) {
  const float raw = amax == 0.f ? 1.f : div_by_constant(amax, 7.0f);
  return detail::round_scale_to_dtype(raw, scale_dtype);
}

float fp8_scale_from_amax(float amax, DType scale_dtype) {
  const float raw = amax == 0.f ? 1.f : div_by_constant(amax, 448.0f);
  return detail::round_scale_to_dtype(raw, scale_dtype);
}

void fake_quantize_unit(Format format, const float* x, int64_t n, float amax, DType scale_dtype,
                        float* out) {
  const FormatInfo& row = format_info(format);
  if (!row.fake_quantize_unit)
    fail("fake_quantize_unit: {} has two-level scales; use scales_from_amax", row.name);
  row.fake_quantize_unit(x, n, amax, scale_dtype, out);
}

namespace {

int64_t scale_span(const QuantizedTensor& q) { return scale_span(q.format, q.block, q.cols); }

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
  format_info(format).scales_from_amax(amax, global_amax, q);
  return q;
}

FrozenQuantizer::FrozenQuantizer(const QuantizedTensor& q)
    : row_(&format_info(q.format)), cols_(q.cols), block_(1) {
  const int64_t span = scale_span(q);
  if (span <= 0 || q.cols % span != 0) fail("frozen quantizer: bad block {} for {} columns", span, q.cols);
  scales_per_row_ = q.cols / span;
  block_ = int(span);
  const size_t n = size_t(q.rows * scales_per_row_);
  divisor_.resize(n);
  e4m3_.resize(n);
  g_ = q.global_scale;
  if (row_->scale_code_dtype != DType::F32) {
    if (q.block_scales.size() != n) fail("frozen quantizer: {} needs {} block scales", row_->name, n);
  } else if (q.scales.size() != n) {
    fail("frozen quantizer: {} needs {} scales", row_->name, n);
  }
  for (size_t i = 0; i < n; ++i) divisor_[i] = row_->frozen_divisor(q, i, &e4m3_[i]);
}

uint8_t FrozenQuantizer::encode(int64_t r, int64_t c, float x, float* dequantized) const {
  const size_t s = size_t(r * scales_per_row_ + c / block_);
  uint8_t code = 0;
  row_->encode_frozen(&x, 1, divisor_[s], e4m3_[s], g_, &code, dequantized);
  return code;
}

void set_code(QuantizedTensor& q, int64_t r, int64_t c, uint8_t code) {
  const bool packed = format_info(q.format).packed_pairs;
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

void FrozenQuantizer::encode_row(int64_t r, const float* x, uint8_t* codes,
                                 float* dequantized) const {
  for (int64_t u = 0; u < scales_per_row_; ++u) {
    const size_t s = size_t(r * scales_per_row_ + u);
    row_->encode_frozen(x + u * block_, block_, divisor_[s], e4m3_[s], g_, codes + u * block_,
                        dequantized + u * block_);
  }
}

void encode_with_scales(QuantizedTensor& q, const float* w, ThreadPool& pool) {
  const FrozenQuantizer fq(q);
  const bool packed = format_info(q.format).packed_pairs;
  q.codes.assign(packed ? size_t(q.rows * q.cols / 2) : size_t(q.rows * q.cols), 0);
  // Rows own whole bytes (cols is even for the packed formats), so tasks never share a byte.
  pool.parallel_for(q.rows, [&](int64_t r) {
    std::vector<uint8_t> codes(size_t(q.cols));
    std::vector<float> deq(size_t(q.cols));
    fq.encode_row(r, w + r * q.cols, codes.data(), deq.data());
    if (!packed) {
      std::copy(codes.begin(), codes.end(), q.codes.begin() + r * q.cols);
      return;
    }
    uint8_t* out = q.codes.data() + r * q.cols / 2;
    for (int64_t c = 0; c < q.cols; c += 2)
      out[c / 2] = uint8_t((codes[size_t(c)] & 0xF) | ((codes[size_t(c + 1)] & 0xF) << 4));
  });
}

void fake_quantize_with_scales(const QuantizedTensor& q, const float* w, float* out,
                               ThreadPool& pool) {
  const FrozenQuantizer fq(q);
  pool.parallel_for(q.rows, [&](int64_t r) {
    std::vector<uint8_t> codes(size_t(q.cols));
    fq.encode_row(r, w + r * q.cols, codes.data(), out + r * q.cols);
  });
}

void dequantize(const QuantizedTensor& q, float* out, ThreadPool* pool) {
  // Rows [r0, r0 + n): every format's codes and scales are row-major, whole rows at a time.
  const FormatInfo& row = format_info(q.format);
  auto rows = [&](int64_t r0, int64_t n) { row.dequantize_rows(q, r0, n, out + r0 * q.cols); };
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

QuantizedTensor nvfp4_static_scales(int64_t rows, int64_t cols, const float* block_amax,
                                    float global_amax, float fp8_max) {
  // The format row's scales_from_amax with the normalisation as a parameter (same bytes for 448).
  if (rows < 0 || cols <= 0 || cols % kNvfp4Block != 0)
    fail("nvfp4: input size {} is not a multiple of the block of {}", cols, kNvfp4Block);
  if (!(global_amax > 0.f) || std::isinf(global_amax))
    fail("nvfp4 static: global amax {} is not positive and finite", global_amax);
  QuantizedTensor q;
  q.format = Format::nvfp4;
  q.rows = rows;
  q.cols = cols;
  q.block = kNvfp4Block;
  q.scale_dtype = DType::F8_E4M3;
  q.global_scale = nvfp4_global_scale(global_amax, fp8_max);
  q.block_scales.resize(size_t(rows * (cols / kNvfp4Block)));
  for (size_t i = 0; i < q.block_scales.size(); ++i)
    q.block_scales[i] = nvfp4_static_block_scale(block_amax[i], global_amax, fp8_max);
  return q;
}

QuantizedTensor nvfp4_static_quantize(const float* w, int64_t rows, int64_t cols,
                                      const float* block_amax, float global_amax,
                                      ThreadPool& pool, float fp8_max) {
  QuantizedTensor q = nvfp4_static_scales(rows, cols, block_amax, global_amax, fp8_max);
  encode_with_scales(q, w, pool);
  return q;
}

}  // namespace qf

// The table of weight formats: one row per format with its sizes, rules and the functions that
// bind the generic operations (formats/fake_quant.h, algo/) to the format's own file.
#include "formats/registry.h"

#include "core/convert.h"
#include "core/error.h"
#include "core/numeric.h"
#include "core/thread_pool.h"
#include "formats/fake_quant.h"
#include "formats/fp8.h"
#include "formats/int4.h"
#include "formats/int8.h"
#include "formats/llm_compressor_rtn.h"
#include "formats/mxfp4.h"
#include "formats/nvfp4.h"
#include "formats/quantized_tensor.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <vector>

namespace qf {
namespace {

// ---- NVFP4 --------------------------------------------------------------------------------
void nvfp4_prepare(const WeightRows& w, float tensor_amax, QuantizedTensor& q) {
  const size_t n = size_t(w.rows * w.cols);
  q.codes.resize(n / 2);
  q.block_scales.resize(n / kNvfp4Block);
  q.global_scale = nvfp4_global_scale(tensor_amax);
  q.scale_dtype = DType::F8_E4M3;
}
void nvfp4_rows_ref(const WeightRows& w, float tensor_amax, QuantizedTensor& q) {
  nvfp4_prepare(w, tensor_amax, q);
  nvfp4_quantize_reference(w, q.global_scale, q.codes.data(), q.block_scales.data());
}
void nvfp4_rows(const WeightRows& w, float tensor_amax, QuantizedTensor& q, ThreadPool& pool) {
  nvfp4_prepare(w, tensor_amax, q);
  nvfp4_quantize(w, q.global_scale, q.codes.data(), q.block_scales.data(), pool);
}
void nvfp4_rows_llm_compressor(const WeightRows& w, float tensor_amax, QuantizedTensor& q,
                               ThreadPool& pool) {
  nvfp4_quantize_llm_compressor(w, tensor_amax, q, pool);
}
void nvfp4_deq(const QuantizedTensor& q, int64_t r0, int64_t n, float* out) {
  nvfp4_dequantize(q.codes.data() + r0 * (q.cols / 2), q.block_scales.data() + r0 * (q.cols / 16),
                   q.global_scale, n, q.cols, out);
}
void nvfp4_scales(const float* amax, float global_amax, QuantizedTensor& q) {
  if (!(global_amax > 0.f) || std::isinf(global_amax))
    fail("nvfp4 static: global amax {} is not positive and finite", global_amax);
  const size_t n = size_t(q.rows * (q.cols / q.block));
  q.scale_dtype = DType::F8_E4M3;
  q.global_scale = nvfp4_global_scale(global_amax);
  q.block_scales.resize(n);
  for (size_t i = 0; i < n; ++i) q.block_scales[i] = nvfp4_static_block_scale(amax[i], global_amax);
}
float nvfp4_divisor(const QuantizedTensor& q, size_t i, float* value) {
  *value = e4m3_to_f32(q.block_scales[i]);
  return *value * q.global_scale;
}
void nvfp4_encode(const float* x, int64_t n, float d, float value, float g, uint8_t* codes,
                  float* deq) {
  for (int64_t k = 0; k < n; ++k) {
    codes[k] = e2m1_from_f32_modelopt(x[k] / d);
    // The dequantizer's product order: e2m1 * e4m3, then * g.
    deq[k] = e2m1_to_f32(codes[k]) * value * g;
  }
}

// ---- MXFP4 --------------------------------------------------------------------------------
void mxfp4_prepare(const WeightRows& w, QuantizedTensor& q) {
  const size_t n = size_t(w.rows * w.cols);
  q.codes.resize(n / 2);
  q.block_scales.resize(n / kMxfp4Block);
  q.scale_dtype = DType::U8;
}
void mxfp4_rows_ref(const WeightRows& w, float, QuantizedTensor& q) {
  mxfp4_prepare(w, q);
  mxfp4_quantize_reference(w, q.codes.data(), q.block_scales.data());
}
void mxfp4_rows(const WeightRows& w, float, QuantizedTensor& q, ThreadPool& pool) {
  mxfp4_prepare(w, q);
  mxfp4_quantize(w, q.codes.data(), q.block_scales.data(), pool);
}
void mxfp4_rows_modelopt(const WeightRows& w, float, QuantizedTensor& q, ThreadPool& pool) {
  mxfp4_prepare(w, q);
  mxfp4_quantize_modelopt(w, q.codes.data(), q.block_scales.data(), &pool);
}
void mxfp4_deq(const QuantizedTensor& q, int64_t r0, int64_t n, float* out) {
  mxfp4_dequantize(q.codes.data() + r0 * (q.cols / 2), q.block_scales.data() + r0 * (q.cols / 32),
                   n, q.cols, out);
}
void mxfp4_unit(const float* x, int64_t n, float amax, DType, float* out) {
  const float s = e8m0_to_f32(mxfp4_scale_code(amax));
  for (int64_t k = 0; k < n; ++k) out[k] = e2m1_to_f32(e2m1_from_f32_modelopt(x[k] / s)) * s;
}
void mxfp4_scales(const float* amax, float, QuantizedTensor& q) {
  const size_t n = size_t(q.rows * (q.cols / q.block));
  q.scale_dtype = DType::U8;
  q.block_scales.resize(n);
  for (size_t i = 0; i < n; ++i) q.block_scales[i] = mxfp4_scale_code(amax[i]);
}
float mxfp4_divisor(const QuantizedTensor& q, size_t i, float* value) {
  *value = e8m0_to_f32(q.block_scales[i]);
  return *value;
}
void e2m1_encode(const float* x, int64_t n, float d, float, float, uint8_t* codes, float* deq) {
  for (int64_t k = 0; k < n; ++k) {
    codes[k] = e2m1_from_f32_modelopt(x[k] / d);
    deq[k] = e2m1_to_f32(codes[k]) * d;
  }
}

// ---- float scales (FP8, INT4, INT8) -------------------------------------------------------
float float_scale_divisor(const QuantizedTensor& q, size_t i, float* value) {
  *value = q.scales[i];
  return *value;
}
template <float (*Rule)(float, DType)>
void float_scales(const float* amax, float, QuantizedTensor& q) {
  const size_t n = size_t(q.rows * (q.cols / scale_span(q.format, q.block, q.cols)));
  q.scales.resize(n);
  for (size_t i = 0; i < n; ++i) q.scales[i] = Rule(amax[i], q.scale_dtype);
}
// Symmetric integers: round half to even (nearbyint under the default mode), clamp to [lo, hi].
template <int Lo, int Hi>
void int_unit(const float* x, int64_t n, float s, float* out) {
  for (int64_t k = 0; k < n; ++k)
    out[k] = std::clamp(std::nearbyint(x[k] / s), float(Lo), float(Hi)) * s;
}
template <int Lo, int Hi>
void int_encode(const float* x, int64_t n, float d, float, float, uint8_t* codes, float* deq) {
  for (int64_t k = 0; k < n; ++k) {
    const float v = std::clamp(std::nearbyint(x[k] / d), float(Lo), float(Hi));
    deq[k] = v * d;
    codes[k] = uint8_t(int8_t(v));
  }
}

void fp8_rows_ref(const WeightRows& w, float, QuantizedTensor& q) {
  q.codes.resize(size_t(w.rows * w.cols));
  q.scales.resize(size_t(w.rows));
  fp8_channel_quantize_reference(w, q.scale_dtype, q.codes.data(), q.scales.data());
}
void fp8_rows(const WeightRows& w, float, QuantizedTensor& q, ThreadPool& pool) {
  q.codes.resize(size_t(w.rows * w.cols));
  q.scales.resize(size_t(w.rows));
  fp8_channel_quantize(w, q.scale_dtype, q.codes.data(), q.scales.data(), pool);
}
void fp8_deq(const QuantizedTensor& q, int64_t r0, int64_t n, float* out) {
  fp8_channel_dequantize(q.codes.data() + r0 * q.cols, q.scales.data() + r0, n, q.cols, out);
}
void fp8_unit(const float* x, int64_t n, float amax, DType scale_dtype, float* out) {
  const float s = fp8_scale_from_amax(amax, scale_dtype);
  for (int64_t k = 0; k < n; ++k)
    out[k] = e4m3_to_f32(f32_to_e4m3(std::clamp(x[k] / s, -448.f, 448.f))) * s;
}
void fp8_encode(const float* x, int64_t n, float d, float, float, uint8_t* codes, float* deq) {
  for (int64_t k = 0; k < n; ++k) {
    codes[k] = f32_to_e4m3(std::clamp(x[k] / d, -448.f, 448.f));
    deq[k] = e4m3_to_f32(codes[k]) * d;
  }
}

void int4_prepare(const WeightRows& w, QuantizedTensor& q) {
  const size_t n = size_t(w.rows * w.cols);
  q.codes.resize(n);
  q.scales.resize(n / size_t(q.block));
}
void int4_rows_ref(const WeightRows& w, float, QuantizedTensor& q) {
  int4_prepare(w, q);
  int4_quantize_reference(w, q.block, q.scale_dtype, reinterpret_cast<int8_t*>(q.codes.data()),
                          q.scales.data());
}
void int4_rows(const WeightRows& w, float, QuantizedTensor& q, ThreadPool& pool) {
  int4_prepare(w, q);
  int4_quantize(w, q.block, q.scale_dtype, reinterpret_cast<int8_t*>(q.codes.data()),
                q.scales.data(), pool);
}
void int4_deq(const QuantizedTensor& q, int64_t r0, int64_t n, float* out) {
  int4_dequantize(reinterpret_cast<const int8_t*>(q.codes.data()) + r0 * q.cols,
                  q.scales.data() + r0 * (q.cols / q.block), q.block, n, q.cols, out);
}
void int4_unit(const float* x, int64_t n, float amax, DType scale_dtype, float* out) {
  int_unit<-8, 7>(x, n, int4_scale_from_amax(amax, scale_dtype), out);
}

// INT8 is scalar only: the reference and the pool-split path are the same code.
void int8_rows(const WeightRows& w, float, QuantizedTensor& q, ThreadPool& pool) {
  std::vector<float> f(size_t(w.rows * w.cols));
  convert_to_f32(w.dtype, w.data, f.data(), f.size());
  q = int8_to_quantized(int8_channel_quantize(f.data(), w.rows, w.cols, q.scale_dtype, pool));
}
void int8_rows_ref(const WeightRows& w, float tensor_amax, QuantizedTensor& q) {
  ThreadPool one(1);
  int8_rows(w, tensor_amax, q, one);
}
void int8_deq(const QuantizedTensor& q, int64_t r0, int64_t n, float* out) {
  for (int64_t r = 0; r < n; ++r)
    for (int64_t c = 0; c < q.cols; ++c)
      out[r * q.cols + c] =
          float(int8_t(q.codes[size_t((r0 + r) * q.cols + c)])) * q.scales[size_t(r0 + r)];
}
void int8_unit(const float* x, int64_t n, float amax, DType scale_dtype, float* out) {
  int_unit<-128, 127>(x, n, int8_scale_from_amax(amax, scale_dtype), out);
}

void rows_llm_compressor(const WeightRows& w, float, QuantizedTensor& q, ThreadPool& pool) {
  quantize_llm_compressor(w, q, pool);
}

constexpr std::array<FormatInfo, 5> kFormats = {{
    {Format::nvfp4, "nvfp4", 16, 4, 8, 32, BlockRule::fixed, DType::F8_E4M3, true, true,
     "NVFP4: E2M1 in blocks of 16 with E4M3 block scales and an F32 tensor scale (ModelOpt)",
     "E2M1, E4M3 scale per 16, FP32 tensor scale", nvfp4_rows_ref, nvfp4_rows, nvfp4_deq,
     nullptr, nvfp4_scales, nvfp4_divisor, nvfp4_encode, nullptr, nvfp4_rows_llm_compressor},
    {Format::mxfp4, "mxfp4", 32, 4, 8, 0, BlockRule::fixed, DType::U8, true, true,
     "MXFP4: E2M1 in blocks of 32 with E8M0 power-of-two scales (OCP MX, compressed-tensors)",
     "E2M1, E8M0 scale per 32", mxfp4_rows_ref, mxfp4_rows, mxfp4_deq, mxfp4_unit, mxfp4_scales,
     mxfp4_divisor, e2m1_encode, mxfp4_rows_modelopt},
    {Format::fp8, "fp8", 1, 8, 32, 0, BlockRule::per_row, DType::F32, false, true,
     "FP8: E4M3 with one F32 scale per output channel", "E4M3, scale per output channel",
     fp8_rows_ref, fp8_rows, fp8_deq, fp8_unit, float_scales<fp8_scale_from_amax>,
     float_scale_divisor, fp8_encode, nullptr, rows_llm_compressor},
    {Format::int4, "int4", kInt4DefaultGroup, 4, 32, 0, BlockRule::free, DType::F32, false, true,
     "INT4: symmetric 4-bit integers in groups of 128 with F32 scales (ModelOpt AWQ layout)",
     "symmetric, scale per group", int4_rows_ref, int4_rows, int4_deq, int4_unit,
     float_scales<int4_scale_from_amax>, float_scale_divisor, int_encode<-8, 7>, nullptr,
     rows_llm_compressor},
    {Format::int8, "int8", 1, 8, 32, 0, BlockRule::per_row, DType::F32, false, false,
     "INT8: symmetric 8-bit integers with one F32 scale per output channel (SmoothQuant W8A8)",
     "symmetric, scale per output channel; W8A8 only: --activations int8", int8_rows_ref,
     int8_rows, int8_deq, int8_unit, float_scales<int8_scale_from_amax>, float_scale_divisor,
     int_encode<-128, 127>, nullptr, rows_llm_compressor},
}};

constexpr bool rows_in_enum_order() {
  for (size_t i = 0; i < kFormats.size(); ++i)
    if (static_cast<size_t>(kFormats[i].id) != i) return false;
  return true;
}
static_assert(rows_in_enum_order(), "format_info indexes the table by the enum value");

bool equals_ignoring_case(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(a[i])) !=
        std::tolower(static_cast<unsigned char>(b[i])))
      return false;
  return true;
}

}  // namespace

std::span<const FormatInfo> all_formats() { return kFormats; }

const FormatInfo& format_info(Format format) {
  const auto i = static_cast<size_t>(format);
  if (i >= kFormats.size()) fail("unknown format id {}", static_cast<int>(format));
  return kFormats[i];
}

std::optional<Format> parse_format(std::string_view name) {
  for (const auto& f : kFormats)
    if (equals_ignoring_case(f.name, name)) return f.id;
  return std::nullopt;
}

std::string format_names(std::string_view separator, bool weight_only) {
  std::string out;
  for (const auto& f : kFormats) {
    if (weight_only && !f.weight_only) continue;
    if (!out.empty()) out += separator;
    out += f.name;
  }
  return out;
}

int resolve_block(Format format, int block) {
  const FormatInfo& info = format_info(format);
  switch (info.block_rule) {
    case BlockRule::per_row: return 1;
    case BlockRule::free: return block > 0 ? block : info.block;
    case BlockRule::fixed: break;
  }
  return info.block;
}

int64_t scale_span(Format format, int block, int64_t cols) {
  return format_info(format).block_rule == BlockRule::per_row ? cols
                                                              : int64_t(resolve_block(format, block));
}

double format_bits_per_weight(Format format, int64_t rows, int64_t cols, int block) {
  const FormatInfo& info = format_info(format);
  if (rows <= 0 || cols <= 0) fail("{}: bits per weight of an empty [{}, {}] matrix", info.name, rows, cols);
  if (block < 0) fail("{}: negative block size {}", info.name, block);
  if (block == 0) block = info.block;
  // block == 1 means one scale per row (FP8 per channel); otherwise one scale per block, a
  // partial last block counting as a whole one.
  const int64_t scales_per_row = block == 1 ? 1 : (cols + block - 1) / block;
  const double elements = double(rows) * double(cols);
  const double bits = elements * info.element_bits +
                      double(rows) * double(scales_per_row) * info.scale_bits +
                      info.tensor_scale_bits;
  return bits / elements;
}

uint64_t format_stored_bytes(Format format, uint64_t n, uint64_t span) {
  const FormatInfo& info = format_info(format);
  return n * uint64_t(info.element_bits) / 8 + n / span * uint64_t(info.scale_bits) / 8 +
         uint64_t(info.tensor_scale_bits) / 8;
}

}  // namespace qf

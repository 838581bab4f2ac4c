// Quantization with scales fixed in advance ("frozen"), and the rule each format uses to turn an
// amax into a scale: the building blocks of the weight algorithms (GPTQ freezes scales before
// its column sweep, MSE and AWQ-clip search amaxes, the static NVFP4 path exports given amaxes).
#pragma once

#include "core/dtype.h"
#include "formats/quantized_tensor.h"
#include "formats/registry.h"

#include <cstdint>
#include <vector>

namespace qf {

class ThreadPool;

// ---- scale rules: one amax in, the stored scale out ----------------------------------------
// NVFP4 dynamic-block path (specs modelopt-nvfp4 §1.1): E4M3 code of a block with amax `bamax`
// under global scale g (weight_scale_2): e4m3(clamp(bamax / fl32(6 g), 2^-9, 448)), a zero block
// giving 1.0. Same bytes as nvfp4_quantize.
uint8_t nvfp4_dynamic_block_scale(float bamax, float g);
// NVFP4 static-block path (§1.2): E4M3 code from a calibrated block amax and the (group) global
// amax: ps = bamax*fl32(1/6) (0 -> 1), psm = global_amax*fl32(1/6),
// e4m3(clamp((ps*m)/psm, 2^-9, 448)) with m = fp8_max (448; 256 for Four Over Six, specs
// moe-hybrid §1.3). A zero block therefore gets e4m3(min(6m/global_amax, 448)), not 1.0.
// global_amax must be positive and finite.
uint8_t nvfp4_static_block_scale(float bamax_cal, float global_amax,
                                 float fp8_max = 448.f);
// Every amax*fl32(1/c) below is div_by_constant (formats/weight_rows.h): that product on the
// default GPU setting, an exact amax / c with --scale-division cpu.
// INT4 group scale: amax*fl32(1/7) (0 -> 1) rounded to scale_dtype, as int4_quantize.
float int4_scale_from_amax(float amax, DType scale_dtype);
// FP8 row scale: amax*fl32(1/448) (0 -> 1) rounded to scale_dtype, as fp8_channel_quantize.
// (INT8 row scale: int8_scale_from_amax in formats/int8.h, amax*fl32(1/127).)
float fp8_scale_from_amax(float amax, DType scale_dtype);

// out[0, n) = x[0, n) quantized and dequantized with the one scale `format` derives from `amax`
// (int4, fp8, int8: the rules above; mxfp4: mxfp4_scale_code). For searches over one block or row.
// Formats with two-level scales (nvfp4: FormatInfo::fake_quantize_unit is null) throw qf::Error.
void fake_quantize_unit(Format format, const float* x, int64_t n, float amax, DType scale_dtype,
                        float* out);

// Scales (codes left empty) of `format` for a [rows, cols] matrix from one amax per scale:
//   nvfp4: block_amax [rows, cols/16], static-block rule above with `global_amax` (the group's;
//          weight_scale_2 = nvfp4_global_scale(global_amax));
//   mxfp4: [rows, cols/32] -> mxfp4_scale_code;  int4: [rows, cols/block];  fp8, int8: [rows].
// `block` = 0 takes the format's default (int4: 128). global_amax is read for nvfp4 only.
// Throws qf::Error for a shape the block does not divide.
QuantizedTensor scales_from_amax(Format format, int64_t rows, int64_t cols, int block,
                                 const float* amax, float global_amax,
                                 DType scale_dtype = DType::F32);

// Quantizes single elements against the frozen scales of a QuantizedTensor (its format, shape,
// block, block_scales / scales, global_scale; its codes are not read). Encoding rules are the
// formats' own (NVFP4: x / (e4m3*g), E2M1 RNE; MXFP4: x / 2^k; INT4: round-half-even of
// x / scale clamped to [-8, 7]; INT8: the same clamped to [-128, 127]; FP8: e4m3 of x / scale clamped to +-448), so encoding a matrix
// against the scales quantize_rtn chose gives exactly quantize_rtn's codes.
class FrozenQuantizer {
 public:
  explicit FrozenQuantizer(const QuantizedTensor& q);

  // The code of x at element (r, c) (int4: the int8 value as a byte) and its dequantized value,
  // computed as the format's dequantizer does (NVFP4: e2m1 * e4m3 * g, in that order).
  uint8_t encode(int64_t r, int64_t c, float x, float* dequantized) const;
  // Row r whole (x: its cols elements): one code per byte, never packed, and the dequantized
  // values; the format's encoder runs once per scale, not once per element.
  void encode_row(int64_t r, const float* x, uint8_t* codes, float* dequantized) const;
  float fake(int64_t r, int64_t c, float x) const {
    float d = 0.f;
    encode(r, c, x, &d);
    return d;
  }

 private:
  const FormatInfo* row_;
  int64_t cols_;
  int block_;
  int64_t scales_per_row_;
  std::vector<float> divisor_;  // per scale: what x is divided by
  std::vector<float> e4m3_;     // the scale's own value (nvfp4: e4m3, applied before g_)
  float g_ = 1.f;
};

// Stores `code` for element (r, c) in q.codes (allocating them if empty), in the layout
// quantize_rtn produces (nvfp4 / mxfp4: packed pairs, element 2j in the low nibble).
void set_code(QuantizedTensor& q, int64_t r, int64_t c, uint8_t code);

// Fills q.codes from w (float32 [q.rows, q.cols]) with q's frozen scales. Split by rows.
void encode_with_scales(QuantizedTensor& q, const float* w, ThreadPool& pool);
// out = dequantize(quantize(w)) with q's frozen scales (q.codes not read). Split by rows.
void fake_quantize_with_scales(const QuantizedTensor& q, const float* w, float* out,
                               ThreadPool& pool);
// out [rows, cols] = the dequantized values of q (any format), through the formats'
// dequantizers; split into tasks of rows on `pool` when given (same values either way).
void dequantize(const QuantizedTensor& q, float* out, ThreadPool* pool = nullptr);

// NVFP4 static-block scales (codes left empty) from calibrated block amaxes [rows, cols/16] and
// the group global amax: block scales by nvfp4_static_block_scale, weight_scale_2 =
// nvfp4_global_scale(global_amax, fp8_max). fp8_max: 448, or 256 for Four Over Six. Throws
// qf::Error for a global amax that is not positive and finite, or a bad shape.
QuantizedTensor nvfp4_static_scales(int64_t rows, int64_t cols, const float* block_amax,
                                    float global_amax, float fp8_max = 448.f);

// NVFP4 static-block export (specs §1.2): nvfp4_static_scales, then the codes of w (float32
// [rows, cols], cols % 16 == 0): x / (e4m3 * weight_scale_2), E2M1 round-half-even.
QuantizedTensor nvfp4_static_quantize(const float* w, int64_t rows, int64_t cols,
                                      const float* block_amax, float global_amax,
                                      ThreadPool& pool, float fp8_max = 448.f);

}  // namespace qf

// The result of quantizing one weight matrix, independent of how an exporter names and lays
// out its tensors on disk.
#pragma once

#include "core/dtype.h"
#include "formats/registry.h"

#include <cstdint>
#include <vector>

namespace qf {

struct QuantizedTensor {
  Format format = Format::nvfp4;
  int64_t rows = 0;  // output features
  int64_t cols = 0;  // input features
  int block = 0;     // elements per scale along a row (1 for per-row FP8)
  // nvfp4, mxfp4: packed E2M1 pairs [rows, cols/2]; fp8: E4M3 [rows, cols];
  // int4: one int8 in [-8, 7] per element [rows, cols] (exporters pack them);
  // int8: one int8 per element [rows, cols] (two's complement bytes).
  std::vector<uint8_t> codes;
  // nvfp4: E4M3 [rows, cols/16]; mxfp4: E8M0 [rows, cols/32]; empty otherwise.
  std::vector<uint8_t> block_scales;
  // fp8, int8: [rows]; int4: [rows, cols/block]; values exactly representable in scale_dtype.
  std::vector<float> scales;
  DType scale_dtype = DType::F32;
  float global_scale = 1.f;  // nvfp4 weight_scale_2 (dequantize: e2m1 * e4m3 * global_scale)
  // nvfp4 quantized by llm-compressor's rounding, which computes the reciprocal of global_scale
  // first: that value, as compressed-tensors stores it; 0 when the exporter should store
  // 1 / global_scale.
  float global_scale_reciprocal = 0.f;
};

// Rows first, first + 2, first + 4, ... of q with their scales (every format's codes and scales
// are laid out row by row; a per-tensor scale is kept): the even or odd rows of a Linear whose
// output rows interleave two projections (gpt-oss gate_up_proj).
QuantizedTensor every_other_row(const QuantizedTensor& q, int64_t first);

}  // namespace qf

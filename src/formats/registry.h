// One row per weight format, carrying its sizes, its block and scale rules and its behaviour
// (quantize, dequantize, fake quantize, scales from amax, encoding against frozen scales), the
// way ggml's type_traits carries to_float / from_float. Everything above formats/ asks the row
// instead of switching on the format. Adding a format means its file beside this one and a row
// in registry.cpp (kernels/ keeps its own row per stored layout, see kernels/weight_formats.h).
#pragma once

#include "core/dtype.h"

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace qf {

class ThreadPool;
struct QuantizedTensor;
struct WeightRows;

// The order is the table's order (format_info indexes it).
enum class Format { nvfp4, mxfp4, fp8, int4, int8 };

// How a format's elements per scale along a row are chosen.
enum class BlockRule : uint8_t {
  fixed,    // always FormatInfo::block (a request for another is ignored)
  per_row,  // one scale per row whatever its width; recorded as block 1
  free,     // any group dividing the row (kInt4ChannelGroup: the whole row); 0 = the default
};

struct FormatInfo {
  Format id;
  std::string_view name;  // CLI spelling: "nvfp4"
  int block;              // default elements per scale along a row; 1 = one scale per row
  int element_bits;       // bits per stored element
  int scale_bits;         // bits per block scale (per row for block == 1)
  int tensor_scale_bits;  // per-tensor scalars besides the block scales (NVFP4's weight_scale_2)
  BlockRule block_rule;
  // Scales stored as codes in QuantizedTensor::block_scales (E4M3, E8M0) have this fixed dtype;
  // DType::F32 means float scales in QuantizedTensor::scales, rounded to the requested dtype.
  DType scale_code_dtype;
  bool packed_pairs;  // two 4-bit codes per byte, element 2j in the low nibble
  bool weight_only;   // usable without activation quantization (INT8 is W8A8 only)
  std::string_view description;  // one line for --help
  std::string_view cli_summary;   // the parenthesis after the name in `quantize --format` help

  // ---- behaviour. q arrives with format, rows, cols, block (resolved) and scale_dtype set ----
  // Codes and scales of w (cols a multiple of the block) into q, as the format's scalar
  // reference / SIMD path computes them (same bytes). tensor_amax is read by formats with a
  // tensor scale only. Throws qf::Error for a bad dtype or shape.
  void (*quantize_reference)(const WeightRows& w, float tensor_amax, QuantizedTensor& q);
  void (*quantize)(const WeightRows& w, float tensor_amax, QuantizedTensor& q, ThreadPool& pool);
  // out [n, cols] = rows [r0, r0 + n) of q dequantized by the format's dequantizer.
  void (*dequantize_rows)(const QuantizedTensor& q, int64_t r0, int64_t n, float* out);
  // out[0, n) = x quantized and dequantized with the one scale derived from `amax`; null for a
  // format with two-level scales (NVFP4), which has no single-scale unit.
  void (*fake_quantize_unit)(const float* x, int64_t n, float amax, DType scale_dtype, float* out);
  // q's scales (block_scales or scales, and global_scale) from one amax per scale, count
  // rows * cols / span; global_amax is read by formats with a tensor scale only.
  void (*scales_from_amax)(const float* amax, float global_amax, QuantizedTensor& q);
  // What scale i of q divides an element by, and in *value the factor the dequantizer applies
  // before the tensor scale (both the scale itself for single-level formats).
  float (*frozen_divisor)(const QuantizedTensor& q, size_t i, float* value);
  // codes[k] and dequantized deq[k] of x[0, n) against one frozen scale (divisor, value as
  // frozen_divisor gives them, g the tensor scale): one code per byte, never packed.
  void (*encode_frozen)(const float* x, int64_t n, float divisor, float value, float g,
                        uint8_t* codes, float* deq);
  // The ModelOpt export's own rounding where it differs from `quantize` (MXFP4: ceil(log2)
  // exponents, ties toward zero), or null where ModelOpt rounds as the reference does.
  void (*quantize_modelopt)(const WeightRows& w, float tensor_amax, QuantizedTensor& q,
                            ThreadPool& pool) = nullptr;
  // llm-compressor's rounding, which the compressed-tensors target reproduces, where it differs
  // from `quantize` (NVFP4, FP8, INT4, INT8: formats/llm_compressor_rtn.h), or null.
  void (*quantize_llm_compressor)(const WeightRows& w, float tensor_amax, QuantizedTensor& q,
                                  ThreadPool& pool) = nullptr;

  bool has_tensor_scale() const { return tensor_scale_bits > 0; }
};

// Whose rounding a round-to-nearest quantization reproduces, where tools differ (an export
// target's choice, see targets/exporter.h).
enum class ExportNumerics : uint8_t { reference, modelopt, llm_compressor };

std::span<const FormatInfo> all_formats();
const FormatInfo& format_info(Format format);
// Case-insensitive: "NVFP4" and "nvfp4" are the same format.
std::optional<Format> parse_format(std::string_view name);
// The table's names joined by `separator` ("nvfp4, mxfp4, ..."), weight-only formats only when
// asked, for CLI choices and messages.
std::string format_names(std::string_view separator, bool weight_only = false);

// Elements per stored block along a row for a requested `block` (0 = the format's default):
// the block rule applied, so per-row formats give 1.
int resolve_block(Format format, int block);
// Elements one scale covers along a row of `cols` elements (per-row formats: cols).
int64_t scale_span(Format format, int block, int64_t cols);

// Stored bits per weight of a [rows, cols] matrix in `format` with `block` elements per scale
// (0 = the format's default), counting block scales and per-tensor scales.
double format_bits_per_weight(Format format, int64_t rows, int64_t cols, int block = 0);
// Stored bytes of `n` elements in rows of a scale span `span` dividing them: codes, one scale
// per span, the tensor scale.
uint64_t format_stored_bytes(Format format, uint64_t n, uint64_t span);

}  // namespace qf

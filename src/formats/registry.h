// One row per weight format: the table the CLI, planner and exporters consult. Adding a
// format means adding a row here and its file beside this one.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

namespace qf {

enum class Format { nvfp4, mxfp4, fp8, int4, int8 };

struct FormatInfo {
  Format id;
  std::string_view name;         // CLI spelling: "nvfp4"
  int block;                     // elements per scale along a row; 1 = one scale per row
  int element_bits;              // bits per stored element
  int scale_bits;                // bits per block scale (per row for block == 1)
  std::string_view description;  // one line for --help
};

std::span<const FormatInfo> all_formats();
const FormatInfo& format_info(Format format);
std::optional<Format> parse_format(std::string_view name);

// Stored bits per weight of a [rows, cols] matrix in `format` with `block` elements per scale
// (0 = the format's default), counting block scales and per-tensor scales.
double format_bits_per_weight(Format format, int64_t rows, int64_t cols, int block = 0);

}  // namespace qf

// The table of weight formats and the size arithmetic built on it.
#include "formats/registry.h"

#include "core/error.h"

#include <array>
#include <cctype>

namespace qf {
namespace {

// Per-tensor scalars stored besides the block scales (NVFP4's float32 weight_scale_2).
int tensor_scale_bits(Format format) { return format == Format::nvfp4 ? 32 : 0; }

constexpr std::array<FormatInfo, 5> kFormats = {{
    {Format::nvfp4, "nvfp4", 16, 4, 8,
     "NVFP4: E2M1 in blocks of 16 with E4M3 block scales and an F32 tensor scale (ModelOpt)"},
    {Format::mxfp4, "mxfp4", 32, 4, 8,
     "MXFP4: E2M1 in blocks of 32 with E8M0 power-of-two scales (OCP MX, compressed-tensors)"},
    {Format::fp8, "fp8", 1, 8, 32, "FP8: E4M3 with one F32 scale per output channel"},
    {Format::int4, "int4", 128, 4, 32,
     "INT4: symmetric 4-bit integers in groups of 128 with F32 scales (ModelOpt AWQ layout)"},
    {Format::int8, "int8", 1, 8, 32,
     "INT8: symmetric 8-bit integers with one F32 scale per output channel (SmoothQuant W8A8)"},
}};

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
  for (const auto& f : kFormats)
    if (f.id == format) return f;
  fail("unknown format id {}", static_cast<int>(format));
}

std::optional<Format> parse_format(std::string_view name) {
  for (const auto& f : kFormats)
    if (equals_ignoring_case(f.name, name)) return f.id;
  return std::nullopt;
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
                      tensor_scale_bits(format);
  return bits / elements;
}

}  // namespace qf

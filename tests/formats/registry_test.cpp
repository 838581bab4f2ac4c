// The format table: names, parsing, block and bit sizes, bits per weight.
#include "formats/registry.h"

#include "core/error.h"

#include <gtest/gtest.h>

namespace qf {
namespace {

TEST(FormatRegistry, TableRows) {
  ASSERT_EQ(all_formats().size(), 5u);
  const FormatInfo& nv = format_info(Format::nvfp4);
  EXPECT_EQ(nv.name, "nvfp4");
  EXPECT_EQ(nv.block, 16);
  EXPECT_EQ(nv.element_bits, 4);
  EXPECT_EQ(nv.scale_bits, 8);
  const FormatInfo& mx = format_info(Format::mxfp4);
  EXPECT_EQ(mx.block, 32);
  EXPECT_EQ(mx.element_bits, 4);
  EXPECT_EQ(mx.scale_bits, 8);
  const FormatInfo& fp8 = format_info(Format::fp8);
  EXPECT_EQ(fp8.block, 1);
  EXPECT_EQ(fp8.element_bits, 8);
  EXPECT_EQ(fp8.scale_bits, 32);
  const FormatInfo& i4 = format_info(Format::int4);
  EXPECT_EQ(i4.block, 128);
  EXPECT_EQ(i4.element_bits, 4);
  EXPECT_EQ(i4.scale_bits, 32);
  const FormatInfo& i8 = format_info(Format::int8);
  EXPECT_EQ(i8.name, "int8");
  EXPECT_EQ(i8.block, 1);
  EXPECT_EQ(i8.element_bits, 8);
  EXPECT_EQ(i8.scale_bits, 32);
  for (const FormatInfo& f : all_formats()) {
    EXPECT_EQ(&format_info(f.id), &f);
    EXPECT_FALSE(f.description.empty());
  }
}

TEST(FormatRegistry, ParseNames) {
  EXPECT_EQ(parse_format("nvfp4"), Format::nvfp4);
  EXPECT_EQ(parse_format("MXFP4"), Format::mxfp4);
  EXPECT_EQ(parse_format("Fp8"), Format::fp8);
  EXPECT_EQ(parse_format("int4"), Format::int4);
  EXPECT_EQ(parse_format("INT8"), Format::int8);
  EXPECT_EQ(parse_format("int2"), std::nullopt);
  EXPECT_EQ(parse_format(""), std::nullopt);
  EXPECT_EQ(parse_format("nvfp4 "), std::nullopt);
}

TEST(FormatRegistry, BitsPerWeight) {
  // NVFP4: 4 + 8/16 per element, plus one F32 tensor scale.
  const double nv = format_bits_per_weight(Format::nvfp4, 4096, 14336);
  EXPECT_NEAR(nv, 4.5, 1e-6);
  EXPECT_DOUBLE_EQ(nv, 4.5 + 32.0 / (4096.0 * 14336.0));
  EXPECT_DOUBLE_EQ(format_bits_per_weight(Format::nvfp4, 1, 16), (64 + 8 + 32) / 16.0);
  EXPECT_DOUBLE_EQ(format_bits_per_weight(Format::mxfp4, 64, 4096), 4.25);
  EXPECT_DOUBLE_EQ(format_bits_per_weight(Format::fp8, 10, 4096), 8.0 + 32.0 / 4096.0);
  EXPECT_DOUBLE_EQ(format_bits_per_weight(Format::int4, 8, 4096), 4.25);
  EXPECT_DOUBLE_EQ(format_bits_per_weight(Format::int4, 8, 4096, 32), 5.0);
  EXPECT_DOUBLE_EQ(format_bits_per_weight(Format::int4, 8, 4096, 64), 4.5);
  EXPECT_DOUBLE_EQ(format_bits_per_weight(Format::int8, 10, 4096), 8.0 + 32.0 / 4096.0);
  EXPECT_THROW(format_bits_per_weight(Format::int4, 0, 4096), Error);
  EXPECT_THROW(format_bits_per_weight(Format::int4, 8, 4096, -1), Error);
}

}  // namespace
}  // namespace qf

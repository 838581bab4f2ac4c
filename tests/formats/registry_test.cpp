// The format table: names, parsing, block and bit sizes, bits per weight, the rows' functions.
#include "formats/registry.h"

#include "core/error.h"
#include "core/thread_pool.h"
#include "formats/fake_quant.h"
#include "formats/quantized_tensor.h"
#include "formats/weight_rows.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

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

// Every row's functions agree with each other: the fast quantizer gives the reference's bytes,
// dequantize_rows of a row range matches the whole matrix, the row's encoder against its own
// scales gives its codes back, and stored bytes match bits per weight.
TEST(FormatRegistry, RowFunctionsAgree) {
  std::mt19937 rng(7);
  std::normal_distribution<float> dist(0.f, 0.05f);
  const int64_t rows = 6, cols = 256;
  std::vector<float> w(size_t(rows * cols));
  for (float& v : w) v = dist(rng);
  ThreadPool pool(2);
  for (const FormatInfo& f : all_formats()) {
    SCOPED_TRACE(std::string(f.name));
    const WeightRows wr{w.data(), DType::F32, rows, cols};
    QuantizedTensor a, b;
    for (QuantizedTensor* q : {&a, &b}) {
      q->format = f.id;
      q->rows = rows;
      q->cols = cols;
      q->block = resolve_block(f.id, 0);
      q->scale_dtype = DType::F32;
    }
    f.quantize_reference(wr, 0.3f, a);
    f.quantize(wr, 0.3f, b, pool);
    EXPECT_EQ(a.codes, b.codes);
    EXPECT_EQ(a.block_scales, b.block_scales);
    EXPECT_EQ(a.scales, b.scales);
    std::vector<float> whole(size_t(rows * cols)), part(size_t(2 * cols));
    f.dequantize_rows(b, 0, rows, whole.data());
    f.dequantize_rows(b, 3, 2, part.data());
    EXPECT_TRUE(std::equal(part.begin(), part.end(), whole.begin() + 3 * cols));
    QuantizedTensor again = b;
    encode_with_scales(again, w.data(), pool);
    EXPECT_EQ(again.codes, b.codes);
    const uint64_t n = uint64_t(rows * cols);
    EXPECT_DOUBLE_EQ(double(format_stored_bytes(f.id, n, uint64_t(scale_span(f.id, 0, cols)))) * 8,
                     format_bits_per_weight(f.id, rows, cols, resolve_block(f.id, 0)) * double(n));
    EXPECT_EQ(f.fake_quantize_unit == nullptr, f.has_tensor_scale());
  }
  EXPECT_EQ(format_names(", "), "nvfp4, mxfp4, fp8, int4, int8");
  EXPECT_EQ(format_names("|", true), "nvfp4|mxfp4|fp8|int4");
}

}  // namespace
}  // namespace qf

// ggml's block formats: bit-exact against vectors made by ggml's own reference quantizers
// (tests/data/ggml/README.md says how), exhaustive checks of the scale and index rules where
// the domain is small, and quantize/dequantize round trips.
#include "core/numeric.h"
#include "formats/ggml_quants.h"
#include "formats/ggml_types.h"
#include "test_util.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

namespace qf {
namespace {

struct Case {
  const char* file;
  GgmlType type;
};

class GgmlGolden : public ::testing::TestWithParam<Case> {};

TEST_P(GgmlGolden, QuantizeMatchesGgmlReferenceBitForBit) {
  const auto x = test::ggml_golden_floats("input_f32");
  ASSERT_EQ(x.size(), 1024u);
  const GgmlTypeInfo& t = ggml_type_info(GetParam().type);
  const auto want = test::ggml_golden(GetParam().file);
  ASSERT_EQ(want.size(), x.size() / size_t(t.block_size) * size_t(t.block_bytes));
  std::vector<uint8_t> got(want.size(), 0xCD);
  t.quantize(x.data(), got.data(), int64_t(x.size()));
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_EQ(int(got[i]), int(want[i])) << t.name << " byte " << i << " (block "
                                         << i / size_t(t.block_bytes) << ")";
}

TEST_P(GgmlGolden, DequantizeMatchesGgmlBitForBit) {
  const GgmlTypeInfo& t = ggml_type_info(GetParam().type);
  const auto blocks = test::ggml_golden(GetParam().file);
  const auto want = test::ggml_golden_floats(std::string(GetParam().file) + "_deq");
  std::vector<float> got(want.size());
  t.dequantize(blocks.data(), got.data(), int64_t(got.size()));
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_EQ(f32_bits(got[i]), f32_bits(want[i])) << t.name << " element " << i;
}

TEST_P(GgmlGolden, RoundTripErrorIsBoundedByTheBlockScale) {
  // Quantize, dequantize, quantize again: the codes are a fixed point for the simple formats,
  // and for every format the error stays below the block's amax.
  const auto x = test::ggml_golden_floats("input_f32");
  const GgmlTypeInfo& t = ggml_type_info(GetParam().type);
  std::vector<uint8_t> q(x.size() / size_t(t.block_size) * size_t(t.block_bytes));
  std::vector<float> y(x.size());
  t.quantize(x.data(), q.data(), int64_t(x.size()));
  t.dequantize(q.data(), y.data(), int64_t(y.size()));
  for (size_t b = 0; b < x.size(); b += 256) {
    float amax = 0.f;
    for (size_t i = b; i < b + 256; ++i) amax = std::max(amax, std::fabs(x[i]));
    for (size_t i = b; i < b + 256; ++i)
      ASSERT_LE(std::fabs(y[i] - x[i]), 0.5f * amax + 1e-6f) << t.name << " element " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Types, GgmlGolden,
                         ::testing::Values(Case{"q4_0", GgmlType::Q4_0},
                                           Case{"q8_0", GgmlType::Q8_0},
                                           Case{"mxfp4", GgmlType::MXFP4},
                                           Case{"nvfp4", GgmlType::NVFP4},
                                           Case{"q4_k", GgmlType::Q4_K},
                                           Case{"q5_k", GgmlType::Q5_K},
                                           Case{"q6_k", GgmlType::Q6_K}),
                         [](const auto& p) { return std::string(p.param.file); });

TEST(GgmlUe4m3, SweepMatchesGgmlBitForBit) {
  // Every exponent around the E4M3 range x every kept-mantissa and rounding bit, three fillers
  // of the remaining bits (tests/data/ggml/README.md).
  const auto want = test::ggml_golden("ue4m3_sweep");
  ASSERT_EQ(want.size(), 31u * 16 * 3);
  const uint32_t low[3] = {0u, 1u, 0x7FFFFu};
  for (uint32_t e = 110; e <= 140; ++e)
    for (uint32_t m4 = 0; m4 < 16; ++m4)
      for (uint32_t k = 0; k < 3; ++k) {
        const float x = f32_from_bits((e << 23) | (m4 << 19) | low[k]);
        ASSERT_EQ(int(ggml_f32_to_ue4m3(x)), int(want[((e - 110) * 16 + m4) * 3 + k])) << x;
      }
}

TEST(GgmlUe4m3, EveryCodeDecodesToHalfItsE4M3Value) {
  for (int c = 0; c < 256; ++c) {
    const uint8_t code = uint8_t(c);
    const float half = ggml_ue4m3_to_f32_half(code);
    if (code == 0x00 || code == 0x7F) {
      EXPECT_EQ(half, 0.f);
      continue;
    }
    // The sign bit is not masked: 0x80..0xFF decode as the positive value of the low 7 bits,
    // and 0xFF (whose low bits are E4M3's NaN) as 1.875 * 2^8 = 480.
    const float full = (code & 0x7F) == 0x7F ? 480.f : e4m3_to_f32(code & 0x7F);
    EXPECT_EQ(half, 0.5f * full) << c;
  }
}

TEST(GgmlUe4m3, EveryE4M3ValueIsAFixedPointAndMidpointsFollowGgmlsRules) {
  for (uint8_t c = 1; c <= 0x7E; ++c) {
    const float v = e4m3_to_f32(c);
    // Grid values encode to themselves, except those whose exponent is 15 (>= 256): ggml
    // saturates the whole [248, 448] range to 0x7E.
    const uint8_t want = v >= 248.f ? 0x7E : c;
    EXPECT_EQ(int(ggml_f32_to_ue4m3(v)), int(want)) << v;
    if (c == 0x7E) continue;
    const float mid = 0.5f * (v + e4m3_to_f32(uint8_t(c + 1)));
    uint8_t up;
    if (v < 0.015625f) up = uint8_t(std::min(7, int(mid * 512.f + 0.5f)));  // subnormal rule
    else up = uint8_t(c + 1);                                                // round half up
    if (mid >= 248.f) up = 0x7E;
    EXPECT_EQ(int(ggml_f32_to_ue4m3(mid)), int(up)) << "midpoint above " << v;
  }
}

TEST(GgmlUe4m3, TableOfTheSpec) {
  EXPECT_EQ(ggml_f32_to_ue4m3(0.f), 0);
  EXPECT_EQ(ggml_f32_to_ue4m3(-1.f), 0);
  EXPECT_EQ(ggml_f32_to_ue4m3(std::nanf("")), 0);
  EXPECT_EQ(ggml_f32_to_ue4m3(300.f), 0x7E);
  EXPECT_EQ(ggml_f32_to_ue4m3(256.f), 0x7E);
  EXPECT_EQ(ggml_f32_to_ue4m3(255.f), 0x7E);
  EXPECT_EQ(ggml_f32_to_ue4m3(240.f), 0x77);
  EXPECT_EQ(ggml_f32_to_ue4m3(1.0625f), 0x39);
  EXPECT_EQ(ggml_f32_to_ue4m3(0.0155f), 0x07);
  EXPECT_EQ(ggml_f32_to_ue4m3(std::ldexp(1.f, -10)), 0x01);
  EXPECT_EQ(ggml_f32_to_ue4m3(std::ldexp(1.f, -11)), 0x00);
}

TEST(GgmlFp4BestIndex, EveryTieGoesToTheLowerIndexNegativesToCodeZero) {
  // With d = 0.5 the kvalues * d are the E2M1 grid. Midpoints tie; the first minimum wins, so
  // the smaller magnitude, and for negatives the positive code of the same magnitude is never
  // chosen because codes 0..7 only match non-negative values except 0.
  const float d = 0.5f;
  const float mids[] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.f};
  const uint8_t lower[] = {0, 1, 2, 3, 4, 5, 6};
  for (size_t i = 0; i < std::size(mids); ++i) {
    EXPECT_EQ(int(ggml_fp4_best_index(mids[i], d)), int(lower[i])) << mids[i];
    // -0.25 ties between 0 (code 0, first) and -0.5 (code 9): code 0.
    EXPECT_EQ(int(ggml_fp4_best_index(-mids[i], d)), i == 0 ? 0 : int(lower[i]) + 8)
        << -mids[i];
  }
  EXPECT_EQ(ggml_fp4_best_index(-0.1f, d), 0);  // a negative that rounds to 0: code 0, not 8
  EXPECT_EQ(ggml_fp4_best_index(-0.f, d), 0);
  EXPECT_EQ(ggml_fp4_best_index(100.f, d), 7);
  EXPECT_EQ(ggml_fp4_best_index(-100.f, d), 15);
  // Every grid value maps to its own code (magnitude 0 to code 0).
  for (uint8_t c = 0; c < 16; ++c) {
    const float v = float(kGgmlFp4Values[c]) * d;
    EXPECT_EQ(int(ggml_fp4_best_index(v, d)), c == 8 ? 0 : int(c));
  }
  // d == 0 (an all-zero or too small block): everything is code 0.
  EXPECT_EQ(ggml_fp4_best_index(3.f, 0.f), 0);
}

TEST(GgmlE8m0, HalfDecodeIsExactForEveryCode) {
  for (int e = 0; e < 256; ++e)
    EXPECT_EQ(ggml_e8m0_to_f32_half(uint8_t(e)), std::ldexp(1.f, e - 128)) << e;
}

TEST(GgmlMxfp4, TinyBlockGetsScaleZeroNotAnInvalidCode) {
  std::vector<float> x(32, std::ldexp(1.f, -126));
  uint8_t b[17];
  ggml_quantize_mxfp4(x.data(), b, 32);
  EXPECT_EQ(b[0], 0);
}

TEST(GgmlTypes, TableRowsAndLookups) {
  EXPECT_EQ(ggml_type_info(39u)->name, "mxfp4");
  EXPECT_EQ(ggml_type_info(40u)->block_size, 64);
  EXPECT_EQ(ggml_type_info(40u)->block_bytes, 36);
  EXPECT_EQ(ggml_type_info(uint32_t(GgmlType::Q4_K))->block_bytes, 144);
  EXPECT_EQ(ggml_type_info(4u), nullptr);  // Q4_2, removed
  EXPECT_EQ(ggml_type_info(31u), nullptr);
  EXPECT_EQ(ggml_type_info(43u), nullptr);
  EXPECT_EQ(ggml_type_info(0xFFFFFFFFu), nullptr);
  EXPECT_EQ(ggml_type_from_name("Q4_K"), GgmlType::Q4_K);
  EXPECT_EQ(ggml_type_from_name("nvfp4"), GgmlType::NVFP4);
  EXPECT_FALSE(ggml_type_from_name("q4_2"));
  EXPECT_EQ(ggml_row_bytes(GgmlType::Q6_K, 512), 420u);
  EXPECT_FALSE(ggml_row_bytes(GgmlType::Q6_K, 500));
  EXPECT_EQ(ggml_row_bytes(GgmlType::BF16, 3), 6u);
  for (GgmlType t : {GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::Q8_0,
                     GgmlType::Q4_0, GgmlType::MXFP4, GgmlType::NVFP4, GgmlType::Q4_K,
                     GgmlType::Q5_K, GgmlType::Q6_K}) {
    EXPECT_NE(ggml_type_info(t).quantize, nullptr) << ggml_type_info(t).name;
    EXPECT_NE(ggml_type_info(t).dequantize, nullptr) << ggml_type_info(t).name;
  }
}

TEST(GgmlFloatTypes, RoundTripExactValuesAndRoundToNearestEven) {
  const float x[4] = {1.f, -2.5f, 65504.f, 1.00048828125f};  // last: a tie in f16
  uint8_t b[16];
  float y[4];
  ggml_quantize_f16(x, b, 4);
  ggml_dequantize_f16(b, y, 4);
  EXPECT_EQ(y[0], 1.f);
  EXPECT_EQ(y[1], -2.5f);
  EXPECT_EQ(y[2], 65504.f);
  EXPECT_EQ(y[3], 1.f);  // tie to even
  ggml_quantize_bf16(x, b, 2);
  ggml_dequantize_bf16(b, y, 2);
  EXPECT_EQ(y[1], -2.5f);
  ggml_quantize_f32(x, b, 4);
  ggml_dequantize_f32(b, y, 4);
  EXPECT_EQ(std::memcmp(x, y, 16), 0);
}

}  // namespace
}  // namespace qf

namespace qf {
namespace {

// The word-at-a-time unpacking of a Q4_K / Q5_K super-block's 12 scale bytes gives
// get_scale_min_k4's values for every sub-block: every byte value in every position.
TEST(GgmlK4Scales, AllAtOnceEqualsPerSubBlock) {
  uint8_t bytes[12];
  for (int pos = 0; pos < 12; ++pos)
    for (int v = 0; v < 256; ++v) {
      for (int i = 0; i < 12; ++i) bytes[i] = uint8_t(37 * i + 11 * v + pos);
      bytes[pos] = uint8_t(v);
      uint8_t all[16];
      ggml_k4_scales_mins(bytes, all);
      for (int j = 0; j < 8; ++j) {
        uint8_t s, m;
        ggml_k4_scale_min(j, bytes, &s, &m);
        ASSERT_EQ(all[j], s) << "byte " << pos << " = " << v << " sub-block " << j;
        ASSERT_EQ(all[8 + j], m) << "byte " << pos << " = " << v << " sub-block " << j;
      }
    }
}

}  // namespace
}  // namespace qf

// Exhaustive tests of the scalar numeric types against independent definitions.
#include "core/numeric.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace qf {
namespace {

// Value of an E4M3FN code from its definition.
double e4m3_definition(uint8_t c) {
  const int s = c >> 7, e = (c >> 3) & 0xF, m = c & 7;
  const double mag = e == 0 ? m * std::ldexp(1.0, -9) : (1 + m / 8.0) * std::ldexp(1.0, e - 7);
  return s ? -mag : mag;
}

TEST(E4M3, EveryCodeDecodes) {
  for (int c = 0; c < 256; ++c) {
    const float v = e4m3_to_f32(uint8_t(c));
    if ((c & 0x7F) == 0x7F) {
      EXPECT_TRUE(std::isnan(v)) << c;
      continue;
    }
    EXPECT_EQ(double(v), e4m3_definition(uint8_t(c))) << c;
    EXPECT_EQ(f32_to_e4m3(v), c) << "round trip of code " << c;
    EXPECT_EQ(f32_to_e4m3_satfinite(v), c) << c;
  }
  EXPECT_EQ(e4m3_to_f32(0x7E), 448.f);
  EXPECT_EQ(e4m3_to_f32(0x38), 1.f);
  EXPECT_EQ(e4m3_to_f32(0x01), 0x1p-9f);
}

TEST(E4M3, EveryTieRoundsToEven) {
  // Midpoints between consecutive positive codes round to the code with an even mantissa.
  for (int c = 0; c < 0x7E; ++c) {
    const double lo = e4m3_definition(uint8_t(c)), hi = e4m3_definition(uint8_t(c + 1));
    const float mid = float((lo + hi) / 2);
    ASSERT_EQ(double(mid), (lo + hi) / 2);
    const int even = (c % 2 == 0) ? c : c + 1;
    EXPECT_EQ(f32_to_e4m3(mid), even) << "tie between " << lo << " and " << hi;
    EXPECT_EQ(f32_to_e4m3(-mid), even | 0x80);
    // Just off the tie goes to the nearer neighbour.
    EXPECT_EQ(f32_to_e4m3(std::nextafter(mid, 0.f)), c);
    EXPECT_EQ(f32_to_e4m3(std::nextafter(mid, 1e9f)), c + 1);
  }
}

TEST(E4M3, SaturationRules) {
  EXPECT_EQ(f32_to_e4m3(464.f), 0x7E);  // tie between 448 and 480 (NaN code) goes to even
  EXPECT_EQ(f32_to_e4m3(464.5f), 0x7F);
  EXPECT_EQ(f32_to_e4m3(1000.f), 0x7F);
  EXPECT_EQ(f32_to_e4m3(-1000.f), 0xFF);
  EXPECT_EQ(f32_to_e4m3(INFINITY), 0x7F);
  EXPECT_EQ(f32_to_e4m3(NAN) & 0x7F, 0x7F);
  EXPECT_EQ(f32_to_e4m3_satfinite(1000.f), 0x7E);
  EXPECT_EQ(f32_to_e4m3_satfinite(-INFINITY), 0xFE);
  EXPECT_EQ(f32_to_e4m3(0x1p-10f), 0x00);  // tie between 0 and 2^-9 goes to even (0)
  EXPECT_EQ(f32_to_e4m3(0x1.8p-9f), 0x02);  // tie between 1 and 2 quanta goes to 2
  EXPECT_EQ(f32_to_e4m3(-0.f), 0x80);
}

TEST(E5M2, EveryCodeRoundTripsAndTiesToEven) {
  for (int c = 0; c < 256; ++c) {
    const float v = e5m2_to_f32(uint8_t(c));
    if ((c & 0x7F) > 0x7C) {
      EXPECT_TRUE(std::isnan(v));
      continue;
    }
    EXPECT_EQ(f32_to_e5m2(v), c) << c;
  }
  for (int c = 0; c < 0x7B; ++c) {
    const double lo = e5m2_to_f32(uint8_t(c)), hi = e5m2_to_f32(uint8_t(c + 1));
    const float mid = float((lo + hi) / 2);
    EXPECT_EQ(f32_to_e5m2(mid), (c % 2 == 0) ? c : c + 1) << c;
  }
  EXPECT_EQ(e5m2_to_f32(0x7B), 57344.f);
  EXPECT_EQ(f32_to_e5m2(1e6f), 0x7C);  // overflow to infinity
  EXPECT_EQ(f32_to_e5m2(61440.f), 0x7C);  // tie above max rounds to even: infinity
}

TEST(FP16, EveryCodeRoundTripsAndTiesToEven) {
  for (uint32_t c = 0; c < 65536; ++c) {
    const float v = f16_to_f32(uint16_t(c));
    if ((c & 0x7C00) == 0x7C00 && (c & 0x3FF)) {
      EXPECT_TRUE(std::isnan(v));
      EXPECT_TRUE(std::isnan(f16_to_f32(f32_to_f16(v))));
      continue;
    }
    ASSERT_EQ(f32_to_f16(v), c) << c;
    EXPECT_EQ(v, float(static_cast<_Float16>(v)));
  }
  for (uint32_t c = 0; c < 0x7BFF; ++c) {
    const double lo = f16_to_f32(uint16_t(c)), hi = f16_to_f32(uint16_t(c + 1));
    const float mid = float((lo + hi) / 2);
    ASSERT_EQ(f32_to_f16(mid), (c % 2 == 0) ? c : c + 1) << c;
    ASSERT_EQ(f32_to_f16(-mid), ((c % 2 == 0) ? c : c + 1) | 0x8000u) << c;
  }
  EXPECT_EQ(f32_to_f16(65519.f), 0x7BFF);
  EXPECT_EQ(f32_to_f16(65520.f), 0x7C00);
  EXPECT_EQ(f32_to_f16(1e-8f), 0x0000);
  EXPECT_EQ(f32_to_f16(0x1p-25f), 0x0000);  // tie between 0 and the smallest subnormal
  EXPECT_EQ(f32_to_f16(0x1.8p-24f), 0x0002);
}

TEST(BF16, EveryCodeRoundTripsAndTiesToEven) {
  for (uint32_t c = 0; c < 65536; ++c) {
    const float v = bf16_to_f32(uint16_t(c));
    if (std::isnan(v)) {
      EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(v))));
      continue;
    }
    ASSERT_EQ(f32_to_bf16(v), c);
    // The exact midpoint above this code.
    if ((c & 0x7FFF) < 0x7F7F) {
      const float mid = f32_from_bits((c << 16) | 0x8000u);
      EXPECT_EQ(f32_to_bf16(mid), (c % 2 == 0) ? c : c + 1);
    }
  }
  EXPECT_EQ(f32_to_bf16(3.4e38f), 0x7F80);  // rounds past the largest finite: infinity
}

TEST(E8M0, EveryCodeDecodes) {
  for (int c = 0; c < 255; ++c) EXPECT_EQ(double(e8m0_to_f32(uint8_t(c))), std::ldexp(1.0, c - 127));
  EXPECT_TRUE(std::isnan(e8m0_to_f32(0xFF)));
}

TEST(E2M1, EveryCodeDecodes) {
  const float mags[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
  for (int c = 0; c < 16; ++c) {
    EXPECT_EQ(std::fabs(e2m1_to_f32(uint8_t(c))), mags[c & 7]);
    EXPECT_EQ(std::signbit(e2m1_to_f32(uint8_t(c))), c >= 8);
    EXPECT_EQ(e2m1_index_rne(mags[c & 7]), c & 7);
    EXPECT_EQ(e2m1_index_rtz_ties(mags[c & 7]), c & 7);
  }
}

TEST(E2M1, EveryTie) {
  // Midpoints between grid neighbours: RNE picks the even index, the MXFP4-export rule the lower.
  const float mids[7] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.f};
  const int rne[7] = {0, 2, 2, 4, 4, 6, 6};
  for (int i = 0; i < 7; ++i) {
    EXPECT_EQ(e2m1_index_rne(mids[i]), rne[i]) << mids[i];
    EXPECT_EQ(e2m1_index_rtz_ties(mids[i]), i) << mids[i];
    EXPECT_EQ(e2m1_index_rne(std::nextafter(mids[i], 0.f)), i);
    EXPECT_EQ(e2m1_index_rne(std::nextafter(mids[i], 10.f)), i + 1);
  }
  EXPECT_EQ(e2m1_index_rne(1e30f), 7);
  EXPECT_EQ(e2m1_index_rne(INFINITY), 7);
}

TEST(E2M1, ModelOptSignRule) {
  EXPECT_EQ(e2m1_from_f32_modelopt(-0.1f), 0x8);  // negative rounding to zero keeps the sign
  EXPECT_EQ(e2m1_from_f32_modelopt(-0.f), 0x0);   // -0.0 is not < 0
  EXPECT_EQ(e2m1_from_f32_modelopt(-6.f), 0xF);
  EXPECT_EQ(e2m1_from_f32_modelopt(-0.75f), 0xA);
}

}  // namespace
}  // namespace qf

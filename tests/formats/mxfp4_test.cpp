// MXFP4 against the compressed-tensors rules documented in formats/mxfp4.h: the power-of-two
// scale with its 0.75 round-up, E2M1 ties, signs of zero, degenerate blocks, round trip.
#include "formats/mxfp4.h"

#include "core/error.h"
#include "core/numeric.h"
#include "core/thread_pool.h"
#include "formats/formats_test_util.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

namespace qf {
namespace {

struct Mxfp4Out {
  std::vector<uint8_t> packed, scales;
};

// Reference and, on every SIMD target, the fast path at 2 threads; asserts they agree.
Mxfp4Out quantize_all_ways(const test::Matrix& m) {
  const size_t n = size_t(m.rows * m.cols);
  Mxfp4Out ref{std::vector<uint8_t>(n / 2), std::vector<uint8_t>(n / kMxfp4Block)};
  mxfp4_quantize_reference(m.view(), ref.packed.data(), ref.scales.data());
  ThreadPool pool(2);
  test::for_each_simd_target([&](const std::string& target) {
    Mxfp4Out fast{std::vector<uint8_t>(n / 2), std::vector<uint8_t>(n / kMxfp4Block)};
    mxfp4_quantize(m.view(), fast.packed.data(), fast.scales.data(), pool);
    EXPECT_EQ(fast.packed, ref.packed) << target;
    EXPECT_EQ(fast.scales, ref.scales) << target;
  });
  return ref;
}

// The scale rule from its description: 2^k with k = floor(log2 amax), plus one when the
// mantissa fraction amax / 2^k - 1 is at least 0.75; code 127 + k - 2 clamped to [0, 252].
int scale_code_by_definition(float amax) {
  if (amax == 0.f) return 0;
  int k = int(std::floor(std::log2(double(amax))));
  if (double(amax) / std::ldexp(1.0, k) - 1.0 >= 0.75) ++k;
  return std::clamp(127 + k - 2, 0, 252);
}

TEST(Mxfp4ScaleCode, HandPickedAmaxes) {
  EXPECT_EQ(mxfp4_scale_code(0.f), 0);        // all-zero block: scale 2^-127
  EXPECT_EQ(mxfp4_scale_code(6.f), 127);      // 6 = 1.5 * 2^2 -> 2^2 -> 127 + 2 - 2
  EXPECT_EQ(mxfp4_scale_code(1.f), 125);
  EXPECT_EQ(mxfp4_scale_code(1.5f), 125);
  EXPECT_EQ(mxfp4_scale_code(std::nextafter(1.75f, 0.f)), 125);  // fraction just below 0.75
  EXPECT_EQ(mxfp4_scale_code(1.75f), 126);    // fraction 0.75 rounds up to 2
  EXPECT_EQ(mxfp4_scale_code(2.f), 126);
  EXPECT_EQ(mxfp4_scale_code(7.f), 128);      // 1.75 * 2^2 -> 2^3
  EXPECT_EQ(mxfp4_scale_code(0x1p-124f), 1);
  EXPECT_EQ(mxfp4_scale_code(0x1.8p-125f), 0);  // 2^-125 * 1.5 -> 2^-125 -> 127 - 125 - 2
  EXPECT_EQ(mxfp4_scale_code(0x1.cp-125f), 1);  // 1.75 * 2^-125 rounds up to 2^-124
  EXPECT_EQ(mxfp4_scale_code(1e-40f), 0);     // subnormal
  EXPECT_EQ(mxfp4_scale_code(0x1p-149f), 0);
  EXPECT_EQ(mxfp4_scale_code(0x1.7p127f), 252);
  // CT would overflow to +inf and store 255 (NaN); we cap at 2^125 so products stay finite.
  EXPECT_EQ(mxfp4_scale_code(std::numeric_limits<float>::max()), 252);
  EXPECT_EQ(mxfp4_scale_code(0x1.cp127f), 252);
}

TEST(Mxfp4ScaleCode, MatchesDefinitionOnRandomAndBoundaryValues) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<uint32_t> bits(0, 0x7F7FFFFFu);
  for (int i = 0; i < 200000; ++i) {
    const float a = f32_from_bits(bits(rng));
    ASSERT_EQ(mxfp4_scale_code(a), scale_code_by_definition(a)) << a;
  }
  for (int e = -126; e <= 127; ++e)
    for (float m : {1.f, 1.5f, std::nextafter(1.75f, 0.f), 1.75f, std::nextafter(2.f, 0.f)}) {
      const float a = std::ldexp(m, e);
      ASSERT_EQ(mxfp4_scale_code(a), scale_code_by_definition(a)) << a;
    }
}

// E2M1 ties and neighbours at two block scales (2^0 and 2^-20): block amax 6 * 2^e gives the
// scale 2^e exactly, so every x / scale is the intended value.
TEST(Mxfp4Ties, EveryTieAndNeighbourThroughQuantizer) {
  std::vector<float> q;
  for (float t : {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f})
    for (float x : {std::nextafter(t, 0.f), t, std::nextafter(t, 7.f)}) {
      q.push_back(x);
      q.push_back(-x);
    }
  for (float x : {0.f, -0.f, 0.5f, 1.f, 1.5f, 2.f, 3.f, 4.f, 6.f, -6.f, 1e-30f, -1e-30f})
    q.push_back(x);
  for (int e : {0, -20}) {
    std::vector<float> v, tested;
    for (size_t i = 0; i < q.size(); i += 31) {
      v.push_back(std::ldexp(6.f, e));
      tested.push_back(6.f);
      for (size_t k = 0; k < 31; ++k) {
        const float x = i + k < q.size() ? q[i + k] : 0.f;
        v.push_back(std::ldexp(x, e));
        tested.push_back(std::ldexp(x, e) / std::ldexp(1.f, e));
      }
    }
    const test::Matrix m = test::matrix_from_floats(v, DType::F32, 1, int64_t(v.size()));
    const Mxfp4Out out = quantize_all_ways(m);
    for (uint8_t s : out.scales) ASSERT_EQ(s, 127 + e);
    for (size_t i = 0; i < tested.size(); ++i)
      EXPECT_EQ(test::nibble(out.packed, i), test::e2m1_by_definition(tested[i]))
          << "x / scale = " << tested[i] << " e " << e;
  }
}

TEST(Mxfp4Rounding, MantissaThreeQuartersBoundary) {
  // amax 1.75: scale rounds up to 2^-1 (code 126); 1.75 / 0.5 = 3.5 is a tie -> 4.
  // amax just below: scale 2^-2 (code 125); 6.99999... -> 6.
  std::vector<float> v(64, 0.f);
  v[0] = 1.75f;
  v[1] = -1.25f;  // / 0.5 = 2.5, a tie -> 2
  v[32] = std::nextafter(1.75f, 0.f);
  v[33] = 1.25f;  // / 0.25 = 5, a tie -> 4
  const test::Matrix m = test::matrix_from_floats(v, DType::F32, 1, 64);
  const Mxfp4Out out = quantize_all_ways(m);
  EXPECT_EQ(out.scales[0], 126);
  EXPECT_EQ(out.scales[1], 125);
  EXPECT_EQ(test::nibble(out.packed, 0), 0x6);   // 4 * 0.5 = 2.0
  EXPECT_EQ(test::nibble(out.packed, 1), 0xC);   // -2 * 0.5 = -1.0
  EXPECT_EQ(test::nibble(out.packed, 32), 0x7);  // 6 * 0.25 = 1.5
  EXPECT_EQ(test::nibble(out.packed, 33), 0x6);  // 4 * 0.25 = 1.0
  std::vector<float> y(64);
  mxfp4_dequantize(out.packed.data(), out.scales.data(), 1, 64, y.data());
  EXPECT_EQ(y[0], 2.f);
  EXPECT_EQ(y[1], -1.f);
  EXPECT_EQ(y[32], 1.5f);
  EXPECT_EQ(y[33], 1.f);
}

TEST(Mxfp4Sign, NegativesRoundingToZeroKeepTheSignZerosDoNot) {
  std::vector<float> v(32, 0.f);
  const float x[] = {6.f, -0.2f, -0.f, 0.f, 0.2f, -0.25f, -0.26f, -1e-30f};
  const uint8_t expected[] = {0x7, 0x8, 0x0, 0x0, 0x0, 0x8, 0x9, 0x8};
  std::copy(std::begin(x), std::end(x), v.begin());
  const test::Matrix m = test::matrix_from_floats(v, DType::F32, 1, 32);
  const Mxfp4Out out = quantize_all_ways(m);
  for (size_t i = 0; i < std::size(expected); ++i)
    EXPECT_EQ(test::nibble(out.packed, i), expected[i]) << "x = " << x[i];
}

TEST(Mxfp4Degenerate, AllZeroAndExtremeBlocks) {
  std::vector<float> v(96, 0.f);
  for (int k = 0; k < 32; k += 3) v[size_t(k)] = -0.f;              // block 0: zeros
  v[32] = std::numeric_limits<float>::max();                        // block 1: FLT_MAX
  v[33] = -std::numeric_limits<float>::max();
  for (int k = 64; k < 96; ++k) v[size_t(k)] = (k % 2 ? 1 : -1) * 0x1p-140f;  // subnormals
  const test::Matrix m = test::matrix_from_floats(v, DType::F32, 1, 96);
  const Mxfp4Out out = quantize_all_ways(m);
  EXPECT_EQ(out.scales[0], 0);
  EXPECT_EQ(out.scales[1], 252);
  EXPECT_EQ(out.scales[2], 0);
  for (int k = 0; k < 16; ++k) EXPECT_EQ(out.packed[size_t(k)], 0x00);
  EXPECT_EQ(out.packed[16], 0xF7);  // FLT_MAX / 2^125 ~ 8 saturates to 6
  // 2^-140 / 2^-127 = 2^-13 rounds to zero; the negatives keep their sign bit.
  for (int k = 64; k < 96; ++k) EXPECT_EQ(test::nibble(out.packed, size_t(k)), k % 2 ? 0x0 : 0x8);
  std::vector<float> y(96);
  mxfp4_dequantize(out.packed.data(), out.scales.data(), 1, 96, y.data());
  for (float f : y) EXPECT_TRUE(std::isfinite(f));
}

TEST(Mxfp4RoundTrip, ErrorWithinHalfAGridStep) {
  for (DType dtype : {DType::F32, DType::BF16, DType::F16})
    for (test::Dist dist : {test::Dist::normal, test::Dist::heavy_tailed, test::Dist::wide_range}) {
      const test::Matrix m = test::make_matrix(dist, dtype, 7, 256, kMxfp4Block, 13);
      const std::vector<float> x = m.values();
      ThreadPool pool(2);
      std::vector<uint8_t> packed(x.size() / 2), scales(x.size() / kMxfp4Block);
      mxfp4_quantize(m.view(), packed.data(), scales.data(), pool);
      std::vector<float> y(x.size());
      mxfp4_dequantize(packed.data(), scales.data(), m.rows, m.cols, y.data());
      for (size_t i = 0; i < x.size(); ++i) {
        const float scale = e8m0_to_f32(scales[i / kMxfp4Block]);
        const float q = std::fabs(x[i] / scale);
        ASSERT_LT(q, 7.f) << "the 0.75 round-up keeps every block below 7 * scale";
        const float half_step = q < 2.f ? 0.25f : (q < 4.f ? 0.5f : 1.f);
        ASSERT_LE(std::fabs(y[i] - x[i]), std::max(half_step, q - 6.f) * scale)
            << test::dtype_label(dtype) << " " << test::dist_name(dist) << " i " << i;
      }
    }
}

// ModelOpt's export rule (specs modelopt-nvfp4 §3.3): every E2M1 midpoint rounds toward
// zero, every exact zero is 0x8, exponents are ceil(log2(amax * fl32(1/6))).
TEST(Mxfp4ModelOpt, EveryTieRoundsTowardZeroAndZerosCarryTheSignBit) {
  const float values[8] = {0.f, 0.5f, 1.f, 1.5f, 2.f, 3.f, 4.f, 6.f};
  for (uint8_t idx = 0; idx < 8; ++idx) {
    // Exact grid values keep their code (zero takes the sign bit).
    EXPECT_EQ(e2m1_from_f32_modelopt_mx(values[idx]), idx == 0 ? 0x8 : idx);
    EXPECT_EQ(e2m1_from_f32_modelopt_mx(-values[idx]), uint8_t(0x8 | idx));
    if (idx == 7) continue;
    const float tie = (values[idx] + values[idx + 1]) / 2;  // exact in float32
    EXPECT_EQ(e2m1_from_f32_modelopt_mx(tie), idx) << tie;  // toward zero
    EXPECT_EQ(e2m1_from_f32_modelopt_mx(-tie), uint8_t(0x8 | idx)) << tie;
    EXPECT_EQ(e2m1_from_f32_modelopt_mx(std::nextafter(tie, 10.f)), idx + 1) << tie;
  }
  EXPECT_EQ(e2m1_from_f32_modelopt_mx(-0.0f), 0x8);
  EXPECT_EQ(e2m1_from_f32_modelopt_mx(1e-30f), 0x0);
  EXPECT_EQ(e2m1_from_f32_modelopt_mx(-1e-30f), 0x8);
  EXPECT_EQ(e2m1_from_f32_modelopt_mx(100.f), 0x7);  // saturates
}

TEST(Mxfp4ModelOpt, ScaleExponentIsCeilLog2OfAmaxOverSix) {
  EXPECT_EQ(mxfp4_scale_code_modelopt(6.f), 127);  // 6 * fl32(1/6) rounds to exactly 1
  EXPECT_EQ(mxfp4_scale_code_modelopt(std::nextafter(6.f, 7.f)), 128);
  EXPECT_EQ(mxfp4_scale_code_modelopt(3.f), 126);
  EXPECT_EQ(mxfp4_scale_code_modelopt(12.f), 128);
  EXPECT_EQ(mxfp4_scale_code_modelopt(7.f), 128);
  EXPECT_EQ(mxfp4_scale_code_modelopt(0.f), 0);   // log2(0) = -inf, clamped to -127
  EXPECT_EQ(mxfp4_scale_code_modelopt(1e-38f), 0);
  // Where the two rules part: amax in (1.5, 1.75) * 2^k gives CT 2^(k-2), ModelOpt 2^(k-1).
  EXPECT_EQ(mxfp4_scale_code(1.6f), 125);
  EXPECT_EQ(mxfp4_scale_code_modelopt(1.6f), 126);
}

TEST(Mxfp4ModelOpt, QuantizerUsesTheRuleAndIsThreadCountIndependent) {
  const test::Matrix m = test::make_matrix(test::Dist::fp4_ties, DType::BF16, 8, 128, kMxfp4Block, 5);
  std::vector<uint8_t> p1(8 * 64), s1(8 * 4), p2(p1.size()), s2(s1.size());
  ThreadPool two(2);
  mxfp4_quantize_modelopt(m.view(), p1.data(), s1.data(), nullptr);
  mxfp4_quantize_modelopt(m.view(), p2.data(), s2.data(), &two);
  EXPECT_EQ(p1, p2);
  EXPECT_EQ(s1, s2);
  const std::vector<float> x = m.values();
  for (size_t i = 0; i < x.size(); ++i) {
    const size_t b = i / kMxfp4Block;
    float amax = 0.f;
    for (size_t k = b * kMxfp4Block; k < (b + 1) * kMxfp4Block; ++k) amax = std::max(amax, std::fabs(x[k]));
    ASSERT_EQ(s1[b], mxfp4_scale_code_modelopt(amax));
    const uint8_t nib = (i % 2 == 0) ? (p1[i / 2] & 0xF) : (p1[i / 2] >> 4);
    ASSERT_EQ(nib, e2m1_from_f32_modelopt_mx(x[i] / e8m0_to_f32(s1[b]))) << i;
  }
}

TEST(Mxfp4Errors, RejectsBadInput) {
  std::vector<float> v(64, 1.f);
  std::vector<uint8_t> p(32), s(2);
  ThreadPool pool(1);
  const WeightRows not_block{v.data(), DType::F32, 1, 48};
  EXPECT_THROW(mxfp4_quantize(not_block, p.data(), s.data(), pool), Error);
  EXPECT_THROW(mxfp4_quantize_reference(not_block, p.data(), s.data()), Error);
  const WeightRows u8{v.data(), DType::U8, 1, 32};
  EXPECT_THROW(mxfp4_quantize(u8, p.data(), s.data(), pool), Error);
  EXPECT_THROW(mxfp4_dequantize(p.data(), s.data(), 1, 48, nullptr), Error);
}

}  // namespace
}  // namespace qf

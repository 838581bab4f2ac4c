// FP8 E4M3 per-channel quantization: scales as ModelOpt computes them, rounding of codes, the
// clamp, scale dtypes and their underflow/overflow guards, round trip, errors.
#include "formats/fp8.h"

#include "core/error.h"
#include "core/numeric.h"
#include "core/thread_pool.h"
#include "formats/formats_test_util.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

namespace qf {
namespace {

struct Fp8Out {
  std::vector<uint8_t> codes;
  std::vector<float> scales;
};

Fp8Out quantize_all_ways(const test::Matrix& m, DType scale_dtype) {
  const size_t n = size_t(m.rows * m.cols);
  Fp8Out ref{std::vector<uint8_t>(n), std::vector<float>(size_t(m.rows))};
  fp8_channel_quantize_reference(m.view(), scale_dtype, ref.codes.data(), ref.scales.data());
  ThreadPool pool(2);
  test::for_each_simd_target([&](const std::string& target) {
    Fp8Out fast{std::vector<uint8_t>(n), std::vector<float>(size_t(m.rows))};
    fp8_channel_quantize(m.view(), scale_dtype, fast.codes.data(), fast.scales.data(), pool);
    EXPECT_EQ(fast.codes, ref.codes) << target;
    EXPECT_EQ(fast.scales, ref.scales) << target;
  });
  return ref;
}

TEST(Fp8Scale, IsAmaxTimesReciprocalRoundedToScaleDtype) {
  std::vector<float> v = {3.f, -5.f, 1.f, 0.f,   // amax 5
                          0.f, -0.f, 0.f, 0.f};  // dead channel
  const test::Matrix m = test::matrix_from_floats(v, DType::F32, 2, 4);
  const float expected = 5.f * (1.0f / 448.0f);
  EXPECT_EQ(quantize_all_ways(m, DType::F32).scales, (std::vector<float>{expected, 1.f}));
  EXPECT_EQ(quantize_all_ways(m, DType::BF16).scales,
            (std::vector<float>{bf16_to_f32(f32_to_bf16(expected)), 1.f}));
  EXPECT_EQ(quantize_all_ways(m, DType::F16).scales,
            (std::vector<float>{f16_to_f32(f32_to_f16(expected)), 1.f}));
}

TEST(Fp8Codes, RoundToNearestEvenOnTheE4M3Grid) {
  // Row amax 448 with a BF16 scale: 448 * fl32(1/448) rounds to exactly 1.0 in BF16.
  const std::vector<float> v = {448.f, -448.f, 1.f, 0.5f,
                                0x1p-10f,        // half the smallest subnormal: tie -> 0
                                0x1.8p-9f,       // 1.5 * 2^-9: tie -> 2 * 2^-9
                                17.f,            // between 16 and 18: tie -> 16 (even)
                                19.f,            // between 18 and 20: tie -> 20 (even)
                                -0.f, 300.f};
  const test::Matrix m = test::matrix_from_floats(v, DType::F32, 1, int64_t(v.size()));
  const Fp8Out out = quantize_all_ways(m, DType::BF16);
  ASSERT_EQ(out.scales[0], 1.f);
  const std::vector<uint8_t> expected = {0x7E, 0xFE, 0x38, 0x30, 0x00, 0x02,
                                         0x58, 0x5A, 0x80, f32_to_e4m3(300.f)};
  EXPECT_EQ(out.codes, expected);
  EXPECT_EQ(f32_to_e4m3(300.f), 0x79);  // 288 and 320 bracket it; 288 is nearer
}

TEST(Fp8Scale, F16ScaleOverflowSaturatesAndCodesClamp) {
  // F32 weights of 1e30 cannot have an F16 scale of 1e30/448: it saturates to 65504 and the
  // quotient is clamped to +-448 before the (non-saturating) E4M3 cast.
  const std::vector<float> v = {1e30f, -1e30f, 1e25f, 0.f};
  const test::Matrix m = test::matrix_from_floats(v, DType::F32, 1, 4);
  const Fp8Out out = quantize_all_ways(m, DType::F16);
  EXPECT_EQ(out.scales[0], 65504.f);
  EXPECT_EQ(out.codes, (std::vector<uint8_t>{0x7E, 0xFE, 0x7E, 0x00}));
}

TEST(Fp8Scale, F16ScaleUnderflowUsesSmallestSubnormal) {
  // 1e-6 / 448 is below half of F16's smallest subnormal 2^-24: the scale would round to 0.
  const std::vector<float> v = {1e-6f, -5e-7f};
  const test::Matrix m = test::matrix_from_floats(v, DType::F32, 1, 2);
  const Fp8Out out = quantize_all_ways(m, DType::F16);
  EXPECT_EQ(out.scales[0], 0x1p-24f);
  EXPECT_EQ(out.codes[0], f32_to_e4m3(1e-6f / 0x1p-24f));
  EXPECT_EQ(out.codes[1], f32_to_e4m3(-5e-7f / 0x1p-24f));
}

TEST(Fp8RoundTrip, ErrorWithinHalfAnE4M3Step) {
  for (DType dtype : {DType::F32, DType::BF16, DType::F16})
    for (DType scale_dtype : {DType::F32, DType::BF16})
      for (test::Dist dist : {test::Dist::normal, test::Dist::heavy_tailed, test::Dist::tiny}) {
        const test::Matrix m = test::make_matrix(dist, dtype, 6, 333, 1, 17);
        const std::vector<float> x = m.values();
        ThreadPool pool(2);
        std::vector<uint8_t> codes(x.size());
        std::vector<float> scales(size_t(m.rows));
        fp8_channel_quantize(m.view(), scale_dtype, codes.data(), scales.data(), pool);
        std::vector<float> y(x.size());
        fp8_channel_dequantize(codes.data(), scales.data(), m.rows, m.cols, y.data());
        for (size_t i = 0; i < x.size(); ++i) {
          const float s = scales[i / size_t(m.cols)];
          // Half an E4M3 ulp: 1/16 relative for normals, 2^-10 absolute in the subnormals,
          // plus the clamp of quotients pushed past 448 by a rounded-down BF16 scale.
          const float q = std::fabs(x[i] / s);
          const float bound =
              std::max({q * 0.0625f, 0x1p-10f, q - 448.f}) * s * (1.f + 1e-6f) + 1e-44f;
          ASSERT_LE(std::fabs(y[i] - x[i]), bound)
              << test::dtype_label(dtype) << " " << test::dist_name(dist) << " i " << i;
        }
      }
}

TEST(Fp8Errors, RejectsBadDtypes) {
  std::vector<float> v(8, 1.f);
  std::vector<uint8_t> c(8);
  std::vector<float> s(2);
  ThreadPool pool(1);
  const WeightRows ok{v.data(), DType::F32, 2, 4};
  EXPECT_THROW(fp8_channel_quantize(ok, DType::F8_E4M3, c.data(), s.data(), pool), Error);
  EXPECT_THROW(fp8_channel_quantize_reference(ok, DType::I32, c.data(), s.data()), Error);
  const WeightRows f64{v.data(), DType::F64, 1, 4};
  EXPECT_THROW(fp8_channel_quantize(f64, DType::F32, c.data(), s.data(), pool), Error);
}

}  // namespace
}  // namespace qf

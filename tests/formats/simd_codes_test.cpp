// The SIMD E4M3 and E2M1 encoders shared by the quantizer kernels, on every compiled target,
// against the scalar definitions of core/numeric.h over dense samples of the float line.
#include "core/numeric.h"
#include "formats/formats_internal.h"
#include "formats/formats_test_util.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace qf {
namespace {

// Positive floats from 0 to `top` every `stride` bit patterns, every rounding boundary of
// `codes` (midpoints and the float on either side), both signs.
std::vector<float> samples(float top, uint32_t stride, const std::vector<float>& boundaries) {
  std::vector<float> v;
  for (uint32_t b = 0; b <= f32_bits(top); b += stride) v.push_back(f32_from_bits(b));
  for (float m : boundaries)
    for (float x : {std::nextafter(m, 0.f), m, std::nextafter(m, 2 * top)}) v.push_back(x);
  const size_t n = v.size();
  for (size_t i = 0; i < n; ++i) v.push_back(-v[i]);
  return v;
}

TEST(FormatSimdCodes, E4M3EncoderMatchesScalarOnEveryTarget) {
  std::vector<float> mids;
  for (int c = 0; c < 0x7E; ++c) mids.push_back((e4m3_to_f32(uint8_t(c)) + e4m3_to_f32(uint8_t(c + 1))) / 2);
  mids.push_back(448.f);
  mids.push_back(0x1p-6f);  // smallest normal: the subnormal/normal switch
  const std::vector<float> x = samples(448.f, 4099, mids);
  std::vector<uint8_t> expected(x.size());
  for (size_t i = 0; i < x.size(); ++i) expected[i] = f32_to_e4m3(std::fabs(x[i]) > 448.f ? std::copysign(448.f, x[i]) : x[i]);
  test::for_each_simd_target([&](const std::string& target) {
    std::vector<float> clamped(x);
    for (float& f : clamped) f = std::fmin(std::fmax(f, -448.f), 448.f);
    std::vector<uint8_t> got(x.size());
    detail::e4m3_encode_simd(clamped.data(), got.data(), got.size());
    for (size_t i = 0; i < x.size(); ++i)
      ASSERT_EQ(got[i], expected[i]) << target << " x = " << clamped[i];
  });
}

TEST(FormatSimdCodes, E2M1EncoderMatchesScalarOnEveryTarget) {
  const std::vector<float> x =
      samples(8.f, 1021, {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.f, 6.f, 0x1p-149f});
  test::for_each_simd_target([&](const std::string& target) {
    std::vector<uint8_t> got(x.size());
    detail::e2m1_encode_simd(x.data(), got.data(), got.size());
    for (size_t i = 0; i < x.size(); ++i)
      ASSERT_EQ(got[i], e2m1_from_f32_modelopt(x[i])) << target << " x = " << x[i];
  });
}

}  // namespace
}  // namespace qf

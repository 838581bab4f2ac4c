// INT4 group-wise quantization: ModelOpt scales, round half to even, clamping, group sizes,
// round trip, and both packers against hand-computed bytes.
#include "formats/int4.h"

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

struct Int4Out {
  std::vector<int8_t> q;
  std::vector<float> scales;
};

Int4Out quantize_all_ways(const test::Matrix& m, int group, DType scale_dtype) {
  const size_t n = size_t(m.rows * m.cols);
  Int4Out ref{std::vector<int8_t>(n), std::vector<float>(n / size_t(group))};
  int4_quantize_reference(m.view(), group, scale_dtype, ref.q.data(), ref.scales.data());
  ThreadPool pool(2);
  test::for_each_simd_target([&](const std::string& target) {
    Int4Out fast{std::vector<int8_t>(n), std::vector<float>(n / size_t(group))};
    int4_quantize(m.view(), group, scale_dtype, fast.q.data(), fast.scales.data(), pool);
    EXPECT_EQ(fast.q, ref.q) << target;
    EXPECT_EQ(fast.scales, ref.scales) << target;
  });
  return ref;
}

TEST(Int4Quantize, HalfIntegersRoundToEven) {
  // Group amax 7 gives scale 7 * fl32(1/7) = 1.0 exactly, so x / scale = x.
  std::vector<float> v(32, 0.f);
  const float x[] = {7.f, -7.f, 0.5f, 1.5f, 2.5f, 3.5f, -0.5f, -1.5f, -2.5f, 6.5f, -6.5f, 0.49f, -0.51f};
  const int8_t expected[] = {7, -7, 0, 2, 2, 4, 0, -2, -2, 6, -6, 0, -1};
  std::copy(std::begin(x), std::end(x), v.begin());
  const test::Matrix m = test::matrix_from_floats(v, DType::F32, 1, 32);
  const Int4Out out = quantize_all_ways(m, 32, DType::F32);
  ASSERT_EQ(out.scales[0], 1.f);
  for (size_t i = 0; i < std::size(expected); ++i) EXPECT_EQ(out.q[i], expected[i]) << x[i];
}

TEST(Int4Quantize, ScalePerGroupForEachGroupSize) {
  for (int group : {32, 64, 128}) {
    const test::Matrix m = test::make_matrix(test::Dist::normal, DType::BF16, 3, 256, group, 3);
    const std::vector<float> x = m.values();
    for (DType scale_dtype : {DType::F32, DType::BF16, DType::F16}) {
      const Int4Out out = quantize_all_ways(m, group, scale_dtype);
      ASSERT_EQ(out.scales.size(), x.size() / size_t(group));
      for (size_t g = 0; g < out.scales.size(); ++g) {
        float amax = 0.f;
        for (int k = 0; k < group; ++k) amax = std::max(amax, std::fabs(x[g * size_t(group) + size_t(k)]));
        float s = amax * (1.0f / 7.0f);
        if (scale_dtype == DType::BF16) s = bf16_to_f32(f32_to_bf16(s));
        if (scale_dtype == DType::F16) s = f16_to_f32(f32_to_f16(s));
        EXPECT_EQ(out.scales[g], s) << "group " << group << " index " << g;
      }
    }
  }
}

TEST(Int4Quantize, PerChannelIsOneGroupPerRow) {
  // --group-size channel: the group is the whole row, including widths that are no multiple of
  // a SIMD vector (172: stories260K's down_proj) or of any usual group size.
  for (int64_t cols : {int64_t(64), int64_t(172), int64_t(384)})
    for (DType dtype : {DType::F32, DType::BF16})
      for (test::Dist dist : {test::Dist::normal, test::Dist::heavy_tailed}) {
        const int64_t rows = 6;
        const test::Matrix m = test::make_matrix(dist, dtype, rows, cols, int(cols), 7);
        const std::vector<float> x = m.values();
        ASSERT_EQ(int4_resolve_group(kInt4ChannelGroup, cols), int(cols));
        const Int4Out out = quantize_all_ways(m, int(cols), DType::F32);
        ASSERT_EQ(out.scales.size(), size_t(rows));
        for (int64_t r = 0; r < rows; ++r) {
          float amax = 0.f;
          for (int64_t c = 0; c < cols; ++c) amax = std::max(amax, std::fabs(x[size_t(r * cols + c)]));
          const float s = amax == 0.f ? 1.f : amax * (1.0f / 7.0f);
          EXPECT_EQ(out.scales[size_t(r)], s) << cols << " row " << r;
          for (int64_t c = 0; c < cols; ++c) {
            const float v = std::clamp(std::nearbyint(x[size_t(r * cols + c)] / s), -8.f, 7.f);
            EXPECT_EQ(out.q[size_t(r * cols + c)], int8_t(v)) << cols << " " << r << "," << c;
          }
        }
      }
}

TEST(Int4Quantize, ZeroGroupAndClampedExtremes) {
  std::vector<float> v(64, 0.f);  // group 0: zeros
  v[32] = 1e30f;                  // group 1: F16 scale saturates at 65504 -> clamped codes
  v[33] = -1e30f;
  const test::Matrix m = test::matrix_from_floats(v, DType::F32, 1, 64);
  const Int4Out out = quantize_all_ways(m, 32, DType::F16);
  EXPECT_EQ(out.scales[0], 1.f);
  EXPECT_EQ(out.scales[1], 65504.f);
  for (int k = 0; k < 32; ++k) EXPECT_EQ(out.q[size_t(k)], 0);
  EXPECT_EQ(out.q[32], 7);
  EXPECT_EQ(out.q[33], -8);
}

TEST(Int4RoundTrip, ErrorWithinHalfAScale) {
  for (DType dtype : {DType::F32, DType::BF16, DType::F16})
    for (DType scale_dtype : {DType::F32, DType::BF16})
      for (int group : {32, 128}) {
        const test::Matrix m = test::make_matrix(test::Dist::heavy_tailed, dtype, 5, 512, group, 19);
        const std::vector<float> x = m.values();
        ThreadPool pool(2);
        std::vector<int8_t> q(x.size());
        std::vector<float> scales(x.size() / size_t(group));
        int4_quantize(m.view(), group, scale_dtype, q.data(), scales.data(), pool);
        std::vector<float> y(x.size());
        int4_dequantize(q.data(), scales.data(), group, m.rows, m.cols, y.data());
        for (size_t i = 0; i < x.size(); ++i) {
          const float s = scales[i / size_t(group)];
          ASSERT_GE(q[i], -8);
          ASSERT_LE(q[i], 7);
          ASSERT_LE(std::fabs(y[i] - x[i]), 0.5f * s * (1.f + 1e-6f)) << i;
        }
      }
}

TEST(Int4Pack, RowPairsHandBytes) {
  const std::vector<int8_t> q = {1, -1, 7, -8,   // row 0 -> low nibbles
                                 -2, 3, 0, -8};  // row 1 -> high nibbles
  std::vector<uint8_t> out(4);
  int4_pack_row_pairs(q.data(), 2, 4, out.data());
  EXPECT_EQ(out, (std::vector<uint8_t>{0xE1, 0x3F, 0x07, 0x88}));
}

TEST(Int4Pack, Int32HandWords) {
  const std::vector<int8_t> q = {-8, -7, -6, -5, -4, -3, -2, -1,  // offset nibbles 0..7
                                 0, 1, 2, 3, 4, 5, 6, 7,          // 8..15
                                 7, 0, 0, 0, 0, 0, 0, -8};
  std::vector<int32_t> out(3);
  int4_pack_int32(q.data(), 1, 24, out.data());
  EXPECT_EQ(uint32_t(out[0]), 0x76543210u);
  EXPECT_EQ(uint32_t(out[1]), 0xFEDCBA98u);
  EXPECT_EQ(uint32_t(out[2]), 0x0888888Fu);
}

TEST(Int4Pack, RejectsBadShapes) {
  const std::vector<int8_t> q(24, 0);
  std::vector<uint8_t> b(24);
  std::vector<int32_t> w(3);
  EXPECT_THROW(int4_pack_row_pairs(q.data(), 3, 8, b.data()), Error);
  EXPECT_THROW(int4_pack_int32(q.data(), 2, 12, w.data()), Error);
}

TEST(Int4Errors, RejectsBadGroups) {
  std::vector<float> v(64, 1.f);
  std::vector<int8_t> q(64);
  std::vector<float> s(4);
  ThreadPool pool(1);
  const WeightRows w{v.data(), DType::F32, 1, 64};
  EXPECT_THROW(int4_quantize(w, 0, DType::F32, q.data(), s.data(), pool), Error);
  EXPECT_THROW(int4_quantize(w, -32, DType::F32, q.data(), s.data(), pool), Error);
  EXPECT_THROW(int4_quantize(w, 48, DType::F32, q.data(), s.data(), pool), Error);
  EXPECT_THROW(int4_quantize_reference(w, 128, DType::F32, q.data(), s.data()), Error);
  EXPECT_THROW(int4_quantize(w, 32, DType::U8, q.data(), s.data(), pool), Error);
  EXPECT_THROW(int4_dequantize(q.data(), s.data(), 48, 1, 64, nullptr), Error);
}

}  // namespace
}  // namespace qf

// NVFP4 against the ModelOpt spec: the hand-derived vector of specs modelopt-nvfp4 §1.4, every
// E2M1 tie through the whole quantizer, round-trip error bounds, degenerate tensors, errors.
#include "formats/nvfp4.h"

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

struct Nvfp4Out {
  std::vector<uint8_t> packed, scales;
};

// Quantizes with the reference and, on every SIMD target, with the fast path at 2 threads;
// asserts they agree and returns the reference bytes.
Nvfp4Out quantize_all_ways(const test::Matrix& m, float g) {
  const size_t n = size_t(m.rows * m.cols);
  Nvfp4Out ref{std::vector<uint8_t>(n / 2), std::vector<uint8_t>(n / kNvfp4Block)};
  nvfp4_quantize_reference(m.view(), g, ref.packed.data(), ref.scales.data());
  ThreadPool pool(2);
  test::for_each_simd_target([&](const std::string& target) {
    Nvfp4Out fast{std::vector<uint8_t>(n / 2), std::vector<uint8_t>(n / kNvfp4Block)};
    nvfp4_quantize(m.view(), g, fast.packed.data(), fast.scales.data(), pool);
    EXPECT_EQ(fast.packed, ref.packed) << target;
    EXPECT_EQ(fast.scales, ref.scales) << target;
  });
  return ref;
}

TEST(Nvfp4GlobalScale, FollowsCudaReciprocalMultiply) {
  EXPECT_EQ(nvfp4_global_scale(2688.f), 1.0f);  // 2688 * fl32(1/2688) = 1.0000000186 -> 1.0
  EXPECT_EQ(f32_bits(nvfp4_global_scale(1.f)), 0x39C30C31u);  // fl32(1/2688), spec §0.3
  const float amax = 3.1f;
  EXPECT_EQ(nvfp4_global_scale(amax), amax * (1.0f / 2688.0f));
}

TEST(Nvfp4GlobalScale, ZeroAndUnderflowGiveOne) {
  EXPECT_EQ(nvfp4_global_scale(0.f), 1.f);
  EXPECT_EQ(nvfp4_global_scale(0x1p-149f), 1.f);  // the product flushes to zero
}

TEST(Nvfp4GlobalScale, RejectsNegativeAndNonFinite) {
  EXPECT_THROW(nvfp4_global_scale(-1.f), Error);
  EXPECT_THROW(nvfp4_global_scale(NAN), Error);
  EXPECT_THROW(nvfp4_global_scale(INFINITY), Error);
}

// specs/modelopt-nvfp4.md §1.4: four blocks of one tensor whose global amax is 2688 (g = 1).
TEST(Nvfp4HandVector, ModelOptSpecBlocksAToD) {
  std::vector<float> v(64, 0.f);
  const float a[16] = {0, .25f, .3f, .75f, -.75f, 1.25f, 1.75f, 2.5f,
                       3.5f, 5, 5.5f, 6, -6, -.1f, 4.2f, -2.9f};
  for (int k = 0; k < 16; ++k) v[size_t(k)] = a[k];  // block A
  // block B: zeros
  v[32] = 2688.f;   // block C: the tensor amax
  v[33] = -2688.f;
  v[48] = 0.001f;   // block D: tiny amax
  for (DType dtype : {DType::F32, DType::BF16}) {
    const test::Matrix m = test::matrix_from_floats(v, dtype, 1, 64);
    ThreadPool pool(1);
    const float g = nvfp4_global_scale(weight_amax(m.view(), pool).amax);
    ASSERT_EQ(g, 1.0f);
    const Nvfp4Out out = quantize_all_ways(m, g);
    const std::vector<uint8_t> expected_scales = {0x38, 0x38, 0x7E, 0x01};
    const std::vector<uint8_t> expected_packed = {
        0x00, 0x21, 0x2A, 0x44, 0x66, 0x77, 0x8F, 0xD6,  // A
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,  // B
        0xF7, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,  // C: 2688 -> 7, -2688 -> F
        0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,  // D: 0.001 / 2^-9 = 0.512 -> 1
    };
    EXPECT_EQ(out.scales, expected_scales) << test::dtype_label(dtype);
    EXPECT_EQ(out.packed, expected_packed) << test::dtype_label(dtype);
  }
}

// Every E2M1 decision boundary, at the tie and one float step either side, both signs, plus
// zeros and tiny negatives, through the whole quantizer (g = 1, block amax 6 -> divisor 1).
TEST(Nvfp4Ties, EveryTieAndNeighbourThroughQuantizer) {
  std::vector<float> q;
  for (float t : {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f})
    for (float x : {std::nextafter(t, 0.f), t, std::nextafter(t, 7.f)}) {
      q.push_back(x);
      q.push_back(-x);
    }
  for (float x : {0.f, -0.f, 0.5f, 1.f, 1.5f, 2.f, 3.f, 4.f, 6.f, -6.f, 1e-30f, -1e-30f,
                  0x1p-149f, -0x1p-149f})
    q.push_back(x);
  // Blocks of [6, 15 test values].
  std::vector<float> v;
  std::vector<float> tested;
  for (size_t i = 0; i < q.size(); i += 15) {
    v.push_back(6.f);
    tested.push_back(6.f);
    for (size_t k = 0; k < 15; ++k) {
      const float x = i + k < q.size() ? q[i + k] : 0.f;
      v.push_back(x);
      tested.push_back(x);
    }
  }
  const test::Matrix m = test::matrix_from_floats(v, DType::F32, 1, int64_t(v.size()));
  const Nvfp4Out out = quantize_all_ways(m, 1.0f);
  for (uint8_t s : out.scales) ASSERT_EQ(s, 0x38);
  for (size_t i = 0; i < tested.size(); ++i)
    EXPECT_EQ(test::nibble(out.packed, i), test::e2m1_by_definition(tested[i])) << "x = " << tested[i];
}

// Every BF16 value of magnitude <= 6, both signs, through the whole quantizer (divisor 1).
TEST(Nvfp4Ties, AllBf16ValuesUpToSix) {
  std::vector<float> v;
  for (uint32_t bits = 0; bits <= 0x40C0u; ++bits)
    for (uint32_t sign : {0u, 0x8000u}) {
      if (v.size() % 16 == 0) v.push_back(6.f);
      v.push_back(bf16_to_f32(uint16_t(bits | sign)));
    }
  while (v.size() % 16 != 0) v.push_back(0.f);
  const test::Matrix m = test::matrix_from_floats(v, DType::BF16, 1, int64_t(v.size()));
  const Nvfp4Out out = quantize_all_ways(m, 1.0f);
  for (size_t i = 0; i < v.size(); ++i)
    ASSERT_EQ(test::nibble(out.packed, i), test::e2m1_by_definition(v[i])) << "x = " << v[i];
}

TEST(Nvfp4RoundTrip, ErrorWithinHalfAGridStep) {
  for (DType dtype : {DType::F32, DType::BF16, DType::F16})
    for (test::Dist dist : {test::Dist::normal, test::Dist::heavy_tailed, test::Dist::wide_range}) {
      const test::Matrix m = test::make_matrix(dist, dtype, 9, 256, kNvfp4Block, 11);
      const std::vector<float> x = m.values();
      ThreadPool pool(2);
      const float g = nvfp4_global_scale(weight_amax(m.view(), pool).amax);
      std::vector<uint8_t> packed(x.size() / 2), scales(x.size() / kNvfp4Block);
      nvfp4_quantize(m.view(), g, packed.data(), scales.data(), pool);
      std::vector<float> y(x.size());
      nvfp4_dequantize(packed.data(), scales.data(), g, m.rows, m.cols, y.data());
      for (size_t i = 0; i < x.size(); ++i) {
        const float divisor = e4m3_to_f32(scales[i / kNvfp4Block]) * g;
        const float q = std::fabs(x[i] / divisor);
        // Half the grid spacing around q. Past 6 the value saturates: an E4M3 block scale
        // rounded down (by up to 1/16 when normal, far more for a subnormal E4M3 scale of a
        // block much smaller than the tensor amax) leaves q above 6 and the error is q - 6.
        const float half_step = q < 2.f ? 0.25f : (q < 4.f ? 0.5f : 1.f);
        const float bound = std::max(half_step, q - 6.f) * divisor * (1.f + 1e-6f) + 1e-37f;
        ASSERT_LE(std::fabs(y[i] - x[i]), bound)
            << test::dtype_label(dtype) << " " << test::dist_name(dist) << " i " << i << " x "
            << x[i] << " y " << y[i] << " q " << q << " divisor " << divisor;
      }
    }
}

TEST(Nvfp4RoundTrip, DequantizeIsCodeTimesScaleTimesG) {
  const std::vector<uint8_t> packed = {0x7F, 0x10, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00};
  const std::vector<uint8_t> scales = {0x40};  // 2.0
  std::vector<float> out(16);
  nvfp4_dequantize(packed.data(), scales.data(), 0.5f, 1, 16, out.data());
  EXPECT_EQ(out[0], -6.f * 2.f * 0.5f);  // low nibble first
  EXPECT_EQ(out[1], 6.f);
  EXPECT_EQ(out[2], 0.f);
  EXPECT_EQ(out[3], 0.5f);
}

TEST(Nvfp4Degenerate, AllZeroTensorEncodesFinite) {
  const test::Matrix m = test::make_matrix(test::Dist::zeros, DType::BF16, 5, 64, 16, 1);
  ThreadPool pool(1);
  const float g = nvfp4_global_scale(weight_amax(m.view(), pool).amax);
  EXPECT_EQ(g, 1.f);
  const Nvfp4Out out = quantize_all_ways(m, g);
  for (uint8_t s : out.scales) EXPECT_EQ(s, 0x38);  // 1.0
  for (uint8_t b : out.packed) EXPECT_EQ(b, 0x00);  // -0.0 is not < 0: no sign bit
  std::vector<float> y(size_t(m.rows * m.cols));
  nvfp4_dequantize(out.packed.data(), out.scales.data(), g, m.rows, m.cols, y.data());
  for (float f : y) EXPECT_EQ(f, 0.f);
}

TEST(Nvfp4Degenerate, BlockAboveGlobalAmaxSaturates) {
  // g from amax 1 but a block reaching 4000: s clamps to 448 and q saturates at 6.
  std::vector<float> v(16, 0.f);
  v[0] = 4000.f;
  v[1] = -4000.f;
  v[2] = -0.01f;
  const test::Matrix m = test::matrix_from_floats(v, DType::F32, 1, 16);
  const Nvfp4Out out = quantize_all_ways(m, nvfp4_global_scale(1.f));
  EXPECT_EQ(out.scales[0], 0x7E);
  EXPECT_EQ(out.packed[0], 0xF7);
  EXPECT_EQ(test::nibble(out.packed, 2), 0x8);  // -0.01 / 448g rounds to zero but keeps its sign
}

TEST(Nvfp4Errors, RejectsBadInput) {
  std::vector<float> v(32, 1.f);
  std::vector<uint8_t> p(16), s(2);
  ThreadPool pool(1);
  const WeightRows not_block{v.data(), DType::F32, 1, 24};
  EXPECT_THROW(nvfp4_quantize(not_block, 1.f, p.data(), s.data(), pool), Error);
  EXPECT_THROW(nvfp4_quantize_reference(not_block, 1.f, p.data(), s.data()), Error);
  const WeightRows int_input{v.data(), DType::I32, 1, 16};
  EXPECT_THROW(nvfp4_quantize(int_input, 1.f, p.data(), s.data(), pool), Error);
  const WeightRows ok{v.data(), DType::F32, 1, 16};
  EXPECT_THROW(nvfp4_quantize(ok, 0.f, p.data(), s.data(), pool), Error);
  EXPECT_THROW(nvfp4_quantize(ok, NAN, p.data(), s.data(), pool), Error);
  EXPECT_THROW(nvfp4_quantize_reference(ok, -1.f, p.data(), s.data()), Error);
  EXPECT_THROW(nvfp4_dequantize(p.data(), s.data(), 1.f, 1, 24, nullptr), Error);
}

TEST(Nvfp4Errors, EmptyMatrixIsANoOp) {
  ThreadPool pool(2);
  const WeightRows empty{nullptr, DType::BF16, 0, 64};
  EXPECT_NO_THROW(nvfp4_quantize(empty, 1.f, nullptr, nullptr, pool));
  EXPECT_NO_THROW(nvfp4_quantize_reference(empty, 1.f, nullptr, nullptr));
}

}  // namespace
}  // namespace qf

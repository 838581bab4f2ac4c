// The MXFP4 -> NVFP4 cast (formats/mxfp4_nvfp4_cast.h): exact, value for value, when the block
// scales of a tensor span at most 18 binades; blocks further below the largest are requantized,
// counted, and only they change; zero blocks never count; the bytes do not depend on threads.
#include "core/error.h"
#include "core/thread_pool.h"
#include "formats/mxfp4.h"
#include "formats/mxfp4_nvfp4_cast.h"
#include "formats/nvfp4.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

namespace qf {
namespace {

struct Mx {
  int64_t rows = 0, cols = 0;
  std::vector<uint8_t> codes, scales;
  std::vector<float> values() const {
    std::vector<float> out(size_t(rows * cols));
    mxfp4_dequantize(codes.data(), scales.data(), rows, cols, out.data());
    return out;
  }
};

// Random codes; block b of row r gets the E8M0 code `scale(r, b)`.
template <class F>
Mx random_mx(int64_t rows, int64_t cols, F scale, uint32_t seed) {
  Mx m{rows, cols, std::vector<uint8_t>(size_t(rows * cols / 2)), {}};
  std::mt19937 rng(seed);
  for (uint8_t& c : m.codes) c = uint8_t(rng());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t b = 0; b < cols / 32; ++b) m.scales.push_back(uint8_t(scale(r, b)));
  return m;
}

std::vector<float> nv_values(const QuantizedTensor& q) {
  std::vector<float> out(size_t(q.rows * q.cols));
  nvfp4_dequantize(q.codes.data(), q.block_scales.data(), q.global_scale, q.rows, q.cols, out.data());
  return out;
}

TEST(Mxfp4Nvfp4Cast, EighteenBinadesAreExact) {
  ThreadPool pool(2);
  // Codes 100..117: 18 binades, the largest at E4M3 2^8, the smallest at its subnormal 2^-9.
  const Mx m = random_mx(24, 128, [](int64_t r, int64_t b) { return 100 + (r * 4 + b) % 18; }, 1);
  const int top = mxfp4_max_scale_code(m.codes.data(), m.scales.data(), m.rows, m.cols);
  ASSERT_EQ(top, 117);
  const int k = mxfp4_cast_exponent(top);
  EXPECT_EQ(k, 117 - 127 - 8);
  Mxfp4CastStats stats;
  const QuantizedTensor q = mxfp4_to_nvfp4(m.codes.data(), m.scales.data(), m.rows, m.cols, k, pool, stats);
  EXPECT_EQ(q.global_scale, std::ldexp(1.0f, k));
  EXPECT_EQ(q.codes, m.codes);  // the E2M1 codes as they were
  EXPECT_EQ(stats.blocks, 24 * 4);
  EXPECT_EQ(stats.inexact, 0);
  const auto a = m.values(), b = nv_values(q);
  for (size_t i = 0; i < a.size(); ++i) ASSERT_EQ(a[i], b[i]) << i;
}

TEST(Mxfp4Nvfp4Cast, BlocksBeyondTheSpanAreRequantizedAndCounted) {
  ThreadPool pool(3);
  // Row 5's blocks sit 20 and 30 binades below the largest (code 127); the rest within 17.
  auto scale = [](int64_t r, int64_t b) {
    if (r == 5) return b == 0 ? 107 : 97;
    return 110 + int((r + b) % 18);
  };
  const Mx m = random_mx(16, 64, scale, 2);
  const int k = mxfp4_cast_exponent(mxfp4_max_scale_code(m.codes.data(), m.scales.data(), 16, 64));
  Mxfp4CastStats stats;
  const QuantizedTensor q = mxfp4_to_nvfp4(m.codes.data(), m.scales.data(), 16, 64, k, pool, stats);
  EXPECT_EQ(stats.blocks, 32);
  EXPECT_GE(stats.inexact, 1);
  EXPECT_LE(stats.inexact, 2);
  const auto a = m.values(), b = nv_values(q);
  for (int64_t r = 0; r < 16; ++r)
    for (int64_t c = 0; c < 64; ++c) {
      const size_t i = size_t(r * 64 + c);
      if (r != 5) ASSERT_EQ(a[i], b[i]) << r << "," << c;
      // A requantized value stays within one E4M3 step of the block's own scale.
      else EXPECT_LE(std::fabs(a[i] - b[i]), std::ldexp(1.0f, k - 9) * 6) << r << "," << c;
    }
  // The same bytes on one thread.
  ThreadPool one(1);
  Mxfp4CastStats s1;
  const QuantizedTensor q1 = mxfp4_to_nvfp4(m.codes.data(), m.scales.data(), 16, 64, k, one, s1);
  EXPECT_EQ(q1.codes, q.codes);
  EXPECT_EQ(q1.block_scales, q.block_scales);
  EXPECT_EQ(s1.inexact, stats.inexact);
}

TEST(Mxfp4Nvfp4Cast, ZeroBlocksDoNotSetTheSpanOrCount) {
  ThreadPool pool(1);
  Mx m = random_mx(2, 64, [](int64_t r, int64_t b) { return r == 1 && b == 1 ? 3 : 120; }, 3);
  for (int j = 16; j < 32; ++j) m.codes[size_t(32 + j)] = 0x88;  // row 1, block 1: -0 and -0
  EXPECT_EQ(mxfp4_max_scale_code(m.codes.data(), m.scales.data(), 2, 64), 120);
  Mxfp4CastStats stats;
  const QuantizedTensor q = mxfp4_to_nvfp4(m.codes.data(), m.scales.data(), 2, 64,
                                           mxfp4_cast_exponent(120), pool, stats);
  EXPECT_EQ(stats.inexact, 0);
  const auto a = m.values(), b = nv_values(q);
  for (size_t i = 0; i < a.size(); ++i) ASSERT_EQ(a[i], b[i]) << i;
  // An all-zero tensor: exponent 0.
  EXPECT_EQ(mxfp4_cast_exponent(-1), 0);
}

TEST(Mxfp4Nvfp4Cast, NanScaleIsAnError) {
  const Mx m = random_mx(1, 32, [](int64_t, int64_t) { return 255; }, 4);
  EXPECT_THROW(mxfp4_max_scale_code(m.codes.data(), m.scales.data(), 1, 32), Error);
}

}  // namespace
}  // namespace qf

// Holds every SIMD fast path (weight_amax and the four quantizers) bit-identical to its scalar
// reference: every compiled SIMD target, F32/BF16/F16 input, 1-3 threads, many data shapes.
#include "core/thread_pool.h"
#include "formats/formats_internal.h"
#include "formats/formats_test_util.h"
#include "formats/fp8.h"
#include "formats/int4.h"
#include "formats/mxfp4.h"
#include "formats/nvfp4.h"

#include <gtest/gtest.h>

#include <hwy/targets.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

namespace qf {
namespace {

using test::Dist;
using test::Matrix;

struct Shape {
  int64_t rows, cols;
};

// Columns any multiple of the block, row counts that are not multiples of any lane count, and
// one matrix big enough to be split into three or more tasks.
std::vector<Shape> shapes_for(int block) {
  return {{1, block}, {3, 3 * block}, {7, 5 * block}, {17, 13 * block}, {67, 2048}};
}

const DType kInputDtypes[] = {DType::F32, DType::BF16, DType::F16};
const DType kScaleDtypes[] = {DType::F32, DType::BF16, DType::F16};

class FormatsFastPath : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    for (int t = 1; t <= 3; ++t) pools_.push_back(std::make_unique<ThreadPool>(t));
  }
  static void TearDownTestSuite() { pools_.clear(); }
  static std::vector<std::unique_ptr<ThreadPool>> pools_;
};
std::vector<std::unique_ptr<ThreadPool>> FormatsFastPath::pools_;

// Index of the first differing byte, or -1.
template <typename T>
int64_t first_mismatch(const std::vector<T>& a, const std::vector<T>& b) {
  if (a.size() != b.size()) return 0;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::memcmp(&a[i], &b[i], sizeof(T)) != 0) return int64_t(i);
  return -1;
}

std::string where(const std::string& target, DType dtype, Dist dist, const Shape& s, int threads) {
  return target + " " + test::dtype_label(dtype) + " " + test::dist_name(dist) + " [" +
         std::to_string(s.rows) + "x" + std::to_string(s.cols) + "] threads " +
         std::to_string(threads);
}

TEST_F(FormatsFastPath, DispatchReallySwitchesTargets) {
  std::vector<int64_t> seen;
  test::for_each_simd_target([&](const std::string&) { seen.push_back(detail::simd_target_in_use()); });
  EXPECT_EQ(seen, hwy::SupportedAndGeneratedTargets());
  EXPECT_GE(seen.size(), 2u) << "expected a SIMD target and the scalar fallback";
}

TEST_F(FormatsFastPath, AmaxMatchesReference) {
  for (DType dtype : kInputDtypes)
    for (Dist dist : test::all_dists())
      for (const Shape& s : shapes_for(16)) {
        Matrix m = test::make_matrix(dist, dtype, s.rows, s.cols, 16, 1);
        // Plant NaN and Inf of both signs in some matrices (they must be counted, not maxed).
        if (dist == Dist::heavy_tailed || dist == Dist::zeros) {
          std::vector<float> v = m.values();
          for (size_t i = 3; i < v.size(); i += 97) v[i] = (i % 2) ? NAN : -INFINITY;
          m = test::matrix_from_floats(v, dtype, s.rows, s.cols);
        }
        const AmaxResult ref = weight_amax_reference(m.view());
        test::for_each_simd_target([&](const std::string& target) {
          for (auto& pool : pools_) {
            const AmaxResult fast = weight_amax(m.view(), *pool);
            ASSERT_EQ(std::memcmp(&fast.amax, &ref.amax, sizeof(float)), 0)
                << where(target, dtype, dist, s, pool->size()) << " " << fast.amax << " vs "
                << ref.amax;
            ASSERT_EQ(fast.nonfinite, ref.nonfinite) << where(target, dtype, dist, s, pool->size());
          }
        });
      }
}

TEST_F(FormatsFastPath, Nvfp4MatchesReference) {
  for (DType dtype : kInputDtypes)
    for (Dist dist : test::all_dists())
      for (const Shape& s : shapes_for(kNvfp4Block)) {
        const Matrix m = test::make_matrix(dist, dtype, s.rows, s.cols, kNvfp4Block, 2);
        const size_t n = size_t(s.rows * s.cols);
        // The calibrated scale, and a power of two that makes constructed ties exact and
        // saturates large blocks at the 448 clamp.
        const float g_real = nvfp4_global_scale(weight_amax_reference(m.view()).amax);
        for (float g : {g_real, 0x1p-8f}) {
          std::vector<uint8_t> ref_p(n / 2), ref_s(n / kNvfp4Block);
          nvfp4_quantize_reference(m.view(), g, ref_p.data(), ref_s.data());
          test::for_each_simd_target([&](const std::string& target) {
            for (auto& pool : pools_) {
              std::vector<uint8_t> p(n / 2, 0xAA), sc(n / kNvfp4Block, 0xAA);
              nvfp4_quantize(m.view(), g, p.data(), sc.data(), *pool);
              const std::string at = where(target, dtype, dist, s, pool->size());
              ASSERT_EQ(first_mismatch(sc, ref_s), -1) << at << " scales, g " << g;
              ASSERT_EQ(first_mismatch(p, ref_p), -1) << at << " codes, g " << g;
            }
          });
        }
      }
}

TEST_F(FormatsFastPath, Mxfp4MatchesReference) {
  for (DType dtype : kInputDtypes)
    for (Dist dist : test::all_dists())
      for (const Shape& s : shapes_for(kMxfp4Block)) {
        const Matrix m = test::make_matrix(dist, dtype, s.rows, s.cols, kMxfp4Block, 3);
        const size_t n = size_t(s.rows * s.cols);
        std::vector<uint8_t> ref_p(n / 2), ref_s(n / kMxfp4Block);
        mxfp4_quantize_reference(m.view(), ref_p.data(), ref_s.data());
        test::for_each_simd_target([&](const std::string& target) {
          for (auto& pool : pools_) {
            std::vector<uint8_t> p(n / 2, 0xAA), sc(n / kMxfp4Block, 0xAA);
            mxfp4_quantize(m.view(), p.data(), sc.data(), *pool);
            const std::string at = where(target, dtype, dist, s, pool->size());
            ASSERT_EQ(first_mismatch(sc, ref_s), -1) << at << " scales";
            ASSERT_EQ(first_mismatch(p, ref_p), -1) << at << " codes";
          }
        });
      }
}

TEST_F(FormatsFastPath, Fp8MatchesReference) {
  // FP8 has one scale per row, so any column count is allowed: include odd ones.
  const std::vector<Shape> shapes = {{1, 1}, {3, 7}, {5, 33}, {9, 250}, {40, 4099}};
  for (DType dtype : kInputDtypes)
    for (DType scale_dtype : kScaleDtypes)
      for (Dist dist : test::all_dists())
        for (const Shape& s : shapes) {
          const Matrix m = test::make_matrix(dist, dtype, s.rows, s.cols, 1, 4);
          const size_t n = size_t(s.rows * s.cols);
          std::vector<uint8_t> ref_c(n);
          std::vector<float> ref_s(size_t(s.rows));
          fp8_channel_quantize_reference(m.view(), scale_dtype, ref_c.data(), ref_s.data());
          test::for_each_simd_target([&](const std::string& target) {
            for (auto& pool : pools_) {
              std::vector<uint8_t> c(n, 0xAA);
              std::vector<float> sc(size_t(s.rows), -1.f);
              fp8_channel_quantize(m.view(), scale_dtype, c.data(), sc.data(), *pool);
              const std::string at = where(target, dtype, dist, s, pool->size()) + " scale " +
                                     test::dtype_label(scale_dtype);
              ASSERT_EQ(first_mismatch(sc, ref_s), -1) << at << " scales";
              ASSERT_EQ(first_mismatch(c, ref_c), -1) << at << " codes";
            }
          });
        }
}

TEST_F(FormatsFastPath, Int4MatchesReference) {
  // 24 is not a multiple of the wider lane counts, so its groups end in the scalar tail.
  for (int group : {32, 64, 128, 24})
    for (DType dtype : kInputDtypes)
      for (DType scale_dtype : kScaleDtypes)
        for (Dist dist : test::all_dists())
          for (const Shape& s : shapes_for(group)) {
            if (s.cols % group != 0) continue;
            const Matrix m = test::make_matrix(dist, dtype, s.rows, s.cols, group, 5);
            const size_t n = size_t(s.rows * s.cols);
            std::vector<int8_t> ref_q(n);
            std::vector<float> ref_s(n / size_t(group));
            int4_quantize_reference(m.view(), group, scale_dtype, ref_q.data(), ref_s.data());
            test::for_each_simd_target([&](const std::string& target) {
              for (auto& pool : pools_) {
                std::vector<int8_t> q(n, 99);
                std::vector<float> sc(n / size_t(group), -1.f);
                int4_quantize(m.view(), group, scale_dtype, q.data(), sc.data(), *pool);
                const std::string at = where(target, dtype, dist, s, pool->size()) + " group " +
                                       std::to_string(group) + " scale " +
                                       test::dtype_label(scale_dtype);
                ASSERT_EQ(first_mismatch(sc, ref_s), -1) << at << " scales";
                ASSERT_EQ(first_mismatch(q, ref_q), -1) << at << " codes";
              }
            });
          }
}

}  // namespace
}  // namespace qf

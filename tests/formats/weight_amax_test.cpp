// weight_amax: largest finite |x| and the NaN/Inf count over F32, BF16 and F16 matrices.
#include "formats/weight_rows.h"

#include "core/error.h"
#include "core/numeric.h"
#include "core/thread_pool.h"
#include "formats/formats_test_util.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

namespace qf {
namespace {

AmaxResult amax_of(const std::vector<float>& v, DType dtype, int64_t rows, int threads = 2) {
  const test::Matrix m = test::matrix_from_floats(v, dtype, rows, int64_t(v.size()) / rows);
  ThreadPool pool(threads);
  const AmaxResult fast = weight_amax(m.view(), pool);
  const AmaxResult ref = weight_amax_reference(m.view());
  EXPECT_EQ(fast.amax, ref.amax);
  EXPECT_EQ(fast.nonfinite, ref.nonfinite);
  return fast;
}

TEST(WeightAmax, NegativeMaximumAndNonFiniteCount) {
  for (DType dtype : {DType::F32, DType::BF16, DType::F16}) {
    std::vector<float> v(1000, 0.25f);
    v[17] = -3.5f;
    v[18] = NAN;
    v[500] = INFINITY;
    v[999] = -INFINITY;
    v[998] = -NAN;
    const AmaxResult r = amax_of(v, dtype, 8);
    EXPECT_EQ(r.amax, 3.5f) << test::dtype_label(dtype);
    EXPECT_EQ(r.nonfinite, 4) << test::dtype_label(dtype);
  }
}

TEST(WeightAmax, SubnormalsZerosAndOddSizes) {
  EXPECT_EQ(amax_of({-0.f, 0.f, -0.f}, DType::F32, 1).amax, 0.f);
  EXPECT_EQ(amax_of({0x1p-149f, -0x1p-148f, 0.f}, DType::F32, 3).amax, 0x1p-148f);
  EXPECT_EQ(amax_of({0x1p-24f, -0x1p-23f, 0.f, 0x1p-24f, 0.f}, DType::F16, 1).amax, 0x1p-23f);
  EXPECT_EQ(amax_of({0x1p-133f, 0.f, -0x1p-130f}, DType::BF16, 1).amax, 0x1p-130f);
  // Largest finite values of each dtype are not mistaken for infinity.
  EXPECT_EQ(amax_of({std::numeric_limits<float>::max(), 1.f}, DType::F32, 1).amax,
            std::numeric_limits<float>::max());
  EXPECT_EQ(amax_of({-65504.f, 1.f, 2.f}, DType::F16, 1).amax, 65504.f);
  EXPECT_EQ(amax_of({bf16_to_f32(0x7F7F), 1.f}, DType::BF16, 2).amax, bf16_to_f32(0x7F7F));
}

TEST(WeightAmax, LargeMatrixAtOneTwoThreeThreads) {
  const test::Matrix m = test::make_matrix(test::Dist::heavy_tailed, DType::BF16, 301, 1000, 16, 9);
  const AmaxResult ref = weight_amax_reference(m.view());
  for (int threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    const AmaxResult r = weight_amax(m.view(), pool);
    EXPECT_EQ(r.amax, ref.amax);
    EXPECT_EQ(r.nonfinite, 0);
  }
}

TEST(WeightAmax, EmptyAndBadInput) {
  ThreadPool pool(1);
  const AmaxResult r = weight_amax(WeightRows{nullptr, DType::F32, 0, 0}, pool);
  EXPECT_EQ(r.amax, 0.f);
  EXPECT_EQ(r.nonfinite, 0);
  std::vector<float> v(4);
  EXPECT_THROW(weight_amax(WeightRows{v.data(), DType::I8, 1, 4}, pool), Error);
  EXPECT_THROW(weight_amax(WeightRows{v.data(), DType::F32, -1, 4}, pool), Error);
}

}  // namespace
}  // namespace qf

// GPTQ onto ggml's frozen grids: the scale bytes stay, the output error under correlated inputs
// drops below the scale search's own codes, a diagonal Hessian gives plain nearest rounding on
// the frozen grid, and the bytes do not depend on the thread count.
#include "algo/ggml_gptq.h"
#include "core/thread_pool.h"
#include "formats/ggml_types.h"
#include "formats/ggml_weighted.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

namespace qf {
namespace {

constexpr int64_t kRows = 24, kCols = 256, kTokens = 2048;

struct Data {
  std::vector<float> w, x;  // x: [tokens, cols], correlated inputs
  std::vector<double> xtx;
};

Data make_data() {
  Data d;
  std::mt19937 rng(3);
  std::normal_distribution<float> n(0.f, 1.f);
  d.w.resize(kRows * kCols);
  for (float& v : d.w) v = n(rng) * 0.05f;
  d.x.resize(kTokens * kCols);
  for (int64_t t = 0; t < kTokens; ++t) {
    const float common = n(rng);
    for (int64_t c = 0; c < kCols; ++c)
      d.x[size_t(t * kCols + c)] = 0.8f * common + 0.6f * n(rng) * (c % 7 == 0 ? 4.f : 1.f);
  }
  d.xtx.assign(kCols * kCols, 0.0);
  for (int64_t t = 0; t < kTokens; ++t)
    for (int64_t i = 0; i < kCols; ++i)
      for (int64_t j = 0; j < kCols; ++j)
        d.xtx[size_t(i * kCols + j)] += double(d.x[size_t(t * kCols + i)]) * d.x[size_t(t * kCols + j)];
  return d;
}

// sum over tokens and rows of (x . (w - q))^2
double output_error(const Data& d, GgmlType t, const std::vector<uint8_t>& q) {
  std::vector<float> y(kRows * kCols);
  ggml_type_info(t).dequantize(q.data(), y.data(), int64_t(y.size()));
  double e = 0;
  for (int64_t r = 0; r < kRows; ++r)
    for (int64_t i = 0; i < kCols; ++i)
      for (int64_t j = 0; j < kCols; ++j)
        e += (double(d.w[size_t(r * kCols + i)]) - y[size_t(r * kCols + i)]) *
             (double(d.w[size_t(r * kCols + j)]) - y[size_t(r * kCols + j)]) *
             d.xtx[size_t(i * kCols + j)];
  return e;
}

class GgmlGptq : public ::testing::TestWithParam<GgmlType> {};

TEST_P(GgmlGptq, LowersTheOutputErrorAndKeepsTheScales) {
  const GgmlType t = GetParam();
  const Data d = make_data();
  const uint64_t row = *ggml_row_bytes(t, kCols);
  std::vector<uint8_t> q(row * kRows);
  for (int64_t r = 0; r < kRows; ++r)
    ggml_quantize_row_weighted(t, d.w.data() + r * kCols, q.data() + r * row, kCols, nullptr);
  ThreadPool pool1(1), pool3(3);
  std::vector<uint8_t> a = q, b = q;
  const GgmlGptqReport rep = ggml_gptq(t, d.w, kRows, kCols, a.data(), 1.f, d.xtx, kTokens, {}, pool1);
  ggml_gptq(t, d.w, kRows, kCols, b.data(), 1.f, d.xtx, kTokens, {}, pool3);
  EXPECT_FALSE(rep.fell_back);
  EXPECT_EQ(a, b);  // thread count does not matter
  EXPECT_LT(output_error(d, t, a), 0.9 * output_error(d, t, q)) << ggml_type_info(t).name;
  // Scales kept: the frozen grids of both rows agree.
  for (int64_t r = 0; r < kRows; ++r) {
    GgmlFrozenRow fa, fq;
    ggml_frozen_row(t, a.data() + r * row, kCols, 1.f, fa);
    ggml_frozen_row(t, q.data() + r * row, kCols, 1.f, fq);
    ASSERT_EQ(fa.scale, fq.scale);
    ASSERT_EQ(fa.offset, fq.offset);
  }
}

TEST_P(GgmlGptq, DiagonalHessianIsNearestRoundingOnTheFrozenGrid) {
  const GgmlType t = GetParam();
  const Data d = make_data();
  const uint64_t row = *ggml_row_bytes(t, kCols);
  std::vector<uint8_t> q(row * kRows);
  for (int64_t r = 0; r < kRows; ++r)
    ggml_quantize_row_weighted(t, d.w.data() + r * kCols, q.data() + r * row, kCols, nullptr);
  std::vector<double> diag(kCols * kCols, 0.0);
  for (int64_t i = 0; i < kCols; ++i) diag[size_t(i * kCols + i)] = 1.0 + double(i % 5);
  ThreadPool pool(2);
  std::vector<uint8_t> a = q;
  ggml_gptq(t, d.w, kRows, kCols, a.data(), 1.f, diag, kTokens, {}, pool);
  for (int64_t r = 0; r < kRows; ++r) {
    GgmlFrozenRow f;
    ggml_frozen_row(t, q.data() + r * row, kCols, 1.f, f);
    for (int64_t i = 0; i < kCols; ++i) {
      float v;
      f.codes[size_t(i)] = ggml_frozen_round(f, i, d.w[size_t(r * kCols + i)], &v);
    }
    std::vector<uint8_t> want(q.begin() + r * row, q.begin() + (r + 1) * row);
    ggml_pack_codes(f, want.data());
    ASSERT_EQ(std::vector<uint8_t>(a.begin() + r * row, a.begin() + (r + 1) * row), want)
        << ggml_type_info(t).name << " row " << r;
  }
}

INSTANTIATE_TEST_SUITE_P(Types, GgmlGptq,
                         ::testing::Values(GgmlType::Q4_0, GgmlType::Q8_0, GgmlType::Q4_K,
                                           GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::MXFP4,
                                           GgmlType::NVFP4),
                         [](const auto& p) { return std::string(ggml_type_info(p.param).name); });

}  // namespace
}  // namespace qf

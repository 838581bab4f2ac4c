// ggml's importance-weighted quantizers bit for bit against ggml's own quantize_<type> (vectors
// made by scripts/dev/ggml_imatrix_golden.sh through ggml_quantize_chunk of a llama.cpp build),
// qforge's FP4 weighted searches, and the frozen grid GPTQ rounds to.
#include "core/numeric.h"
#include "formats/ggml_quants.h"
#include "formats/ggml_types.h"
#include "formats/ggml_weighted.h"
#include "test_util.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace qf {
namespace {

struct Case {
  const char* file;
  GgmlType type;
};

class GgmlWeightedGolden : public ::testing::TestWithParam<Case> {};

TEST_P(GgmlWeightedGolden, MatchesGgmlQuantizeWithImportanceBitForBit) {
  const auto x = test::ggml_golden_floats("input_f32");
  const auto w = test::ggml_golden_floats("imatrix_weights");
  ASSERT_EQ(x.size(), 1024u);
  ASSERT_EQ(w.size(), 256u);
  const GgmlType type = GetParam().type;
  const auto want = test::ggml_golden(GetParam().file);
  const uint64_t row = *ggml_row_bytes(type, 256);
  ASSERT_EQ(want.size(), 4 * row);
  std::vector<uint8_t> got(want.size(), 0xCD);
  for (int r = 0; r < 4; ++r)
    ggml_quantize_row_weighted(type, x.data() + 256 * r, got.data() + r * row, 256, w.data());
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_EQ(int(got[i]), int(want[i])) << ggml_type_info(type).name << " byte " << i;
}

INSTANTIATE_TEST_SUITE_P(Types, GgmlWeightedGolden,
                         ::testing::Values(Case{"imatrix_q4_0", GgmlType::Q4_0},
                                           Case{"imatrix_q4_k", GgmlType::Q4_K},
                                           Case{"imatrix_q5_k", GgmlType::Q5_K},
                                           Case{"imatrix_q6_k", GgmlType::Q6_K},
                                           // ggml ignores the importance of these three
                                           Case{"imatrix_q8_0", GgmlType::Q8_0},
                                           Case{"imatrix_mxfp4", GgmlType::MXFP4},
                                           Case{"imatrix_nvfp4", GgmlType::NVFP4}),
                         [](const auto& p) { return std::string(p.param.file).substr(8); });

TEST(GgmlWeighted, NullImportanceIsTheReferenceQuantizer) {
  const auto x = test::ggml_golden_floats("input_f32");
  for (GgmlType t : {GgmlType::Q4_0, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K}) {
    const GgmlTypeInfo& info = ggml_type_info(t);
    std::vector<uint8_t> a(*ggml_row_bytes(t, 1024)), b(a.size());
    info.quantize(x.data(), a.data(), 1024);
    ggml_quantize_row_weighted(t, x.data(), b.data(), 1024, nullptr);
    EXPECT_EQ(a, b) << info.name;
  }
}

double weighted_error(GgmlType t, const std::vector<float>& x, const std::vector<uint8_t>& q,
                      const std::vector<float>& w, float g = 1.f) {
  std::vector<float> y(x.size());
  ggml_type_info(t).dequantize(q.data(), y.data(), int64_t(y.size()));
  double e = 0;
  for (size_t i = 0; i < x.size(); ++i) e += double(w[i]) * std::pow(double(x[i]) - double(y[i]) * g, 2);
  return e;
}

TEST(GgmlWeighted, Fp4SearchesNeverLoseToRoundToNearestUnderTheirOwnWeights) {
  std::mt19937 rng(7);
  std::normal_distribution<float> n(0.f, 1.f);
  std::uniform_real_distribution<float> u(0.f, 4.f);
  std::vector<float> x(4096), w(4096);
  for (size_t i = 0; i < x.size(); ++i) {
    x[i] = n(rng) * (i % 97 == 0 ? 8.f : 1.f);
    w[i] = std::exp(u(rng));
  }
  std::vector<uint8_t> a(*ggml_row_bytes(GgmlType::MXFP4, 4096)), b(a.size());
  ggml_quantize_mxfp4(x.data(), a.data(), 4096);
  qforge_quantize_mxfp4_weighted(x.data(), b.data(), 4096, w.data());
  EXPECT_LT(weighted_error(GgmlType::MXFP4, x, b, w), weighted_error(GgmlType::MXFP4, x, a, w));
  // NVFP4 with a tensor scale g: every candidate scale is tried, the max-based one among them.
  const float g = 5.f / 448.f / 6.f;
  std::vector<float> xs(x.size());
  for (size_t i = 0; i < x.size(); ++i) xs[i] = x[i] / g;  // ggml's one-level RTN of x / g
  std::vector<uint8_t> c(*ggml_row_bytes(GgmlType::NVFP4, 4096)), d(c.size());
  ggml_quantize_nvfp4(xs.data(), c.data(), 4096);
  qforge_quantize_nvfp4_weighted(x.data(), d.data(), 4096, g, w.data(), nullptr);
  EXPECT_LT(weighted_error(GgmlType::NVFP4, x, d, w, g), weighted_error(GgmlType::NVFP4, x, c, w, g));
}

TEST(GgmlFrozenGrid, ReadsBackEveryTypeAndRepacksToTheSameBytes) {
  const auto x = test::ggml_golden_floats("input_f32");
  for (GgmlType t : {GgmlType::Q4_0, GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q5_K,
                     GgmlType::Q6_K, GgmlType::MXFP4, GgmlType::NVFP4}) {
    const GgmlTypeInfo& info = ggml_type_info(t);
    std::vector<uint8_t> q(*ggml_row_bytes(t, 1024));
    info.quantize(x.data(), q.data(), 1024);
    std::vector<float> y(1024);
    info.dequantize(q.data(), y.data(), 1024);
    GgmlFrozenRow r;
    ggml_frozen_row(t, q.data(), 1024, 1.f, r);
    for (int64_t i = 0; i < 1024; ++i) {
      // The grid holds the dequantized value: rounding it gives it back.
      float v;
      ggml_frozen_round(r, i, y[size_t(i)], &v);
      ASSERT_NEAR(v, y[size_t(i)], 1e-6f * (1.f + std::fabs(y[size_t(i)]))) << info.name << " " << i;
    }
    std::vector<uint8_t> back = q;
    ggml_pack_codes(r, back.data());
    EXPECT_EQ(back, q) << info.name;
  }
}

}  // namespace
}  // namespace qf

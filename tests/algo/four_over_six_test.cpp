// Four Over Six (specs moe-hybrid §1): the spec's worked example byte for byte in both scale
// division modes, the tie rule against exact integer arithmetic over every two-value block of a
// fine grid, zero blocks and zero tensors, the scale range, fused-group amaxes, thread counts,
// and GPTQ over the frozen 4/6 scales.
#include "algo/four_over_six.h"
#include "algo/gptq.h"
#include "algo/round_to_nearest.h"
#include "algo_test_util.h"
#include "core/error.h"
#include "core/numeric.h"
#include "core/thread_pool.h"
#include "formats/fake_quant.h"
#include "formats/nvfp4.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>

namespace qf {
namespace {

// Restores the process-wide scale division when a test changes it.
class DivisionGuard {
 public:
  DivisionGuard() : saved_(constant_division()) {}
  ~DivisionGuard() { set_constant_division(saved_); }

 private:
  ConstantDivision saved_;
};

float max_abs(const std::vector<float>& w) {
  float g = 0.f;
  for (float v : w) g = std::max(g, std::fabs(v));
  return g;
}

std::vector<float> dequantized(const QuantizedTensor& q) {
  std::vector<float> d(size_t(q.rows * q.cols));
  dequantize(q, d.data());
  return d;
}

double squared_error(const std::vector<float>& a, const std::vector<float>& b) {
  double e = 0.0;
  for (size_t i = 0; i < a.size(); ++i) e += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
  return e;
}

// §1.5: one bf16 row of 32 (2 blocks), global amax 1536, so weight_scale_2 = 1.0 exactly.
TEST(FourOverSixTest, WorkedExampleByteForByte) {
  DivisionGuard guard;
  const float a[16] = {6, 4.5f, 4.5f, 4.5f, 2.25f, 2.25f, .75f, .75f, 0, 0, 0, 0, 0, 0, 0, 0};
  const float b[16] = {6, 4, 3, 2, 1, .5f, -.5f, -1, 0, 0, 0, 0, 0, 0, 0, 0};
  std::vector<uint16_t> row(32);
  std::vector<float> fa(16), fb(16);
  for (int k = 0; k < 16; ++k) {
    fa[size_t(k)] = 256.f * a[k];
    fb[size_t(k)] = 256.f * b[k];
    row[size_t(k)] = f32_to_bf16(fa[size_t(k)]);
    row[size_t(16 + k)] = f32_to_bf16(fb[size_t(k)]);
    ASSERT_EQ(bf16_to_f32(row[size_t(k)]), fa[size_t(k)]);  // exact in bf16
  }
  const WeightRows w{row.data(), DType::BF16, 1, 32};
  for (ConstantDivision d : {ConstantDivision::gpu, ConstantDivision::cpu}) {
    SCOPED_TRACE(d == ConstantDivision::gpu ? "gpu division" : "cpu division");
    set_constant_division(d);
    // Block A: M=6 loses 65536 (4.5 -> 4, 2.25 -> 2, .75 -> 1), M=4 is exact.
    EXPECT_EQ(four_over_six_block_error(fa.data(), 1536.f, 1536.f), 65536.f);
    EXPECT_EQ(four_over_six_block_error(fa.data(), 2304.f, 1536.f), 0.f);
    EXPECT_TRUE(four_over_six_block_m4(fa.data(), 1536.f));
    // Block B: M=6 is exact, M=4 loses 36864.
    EXPECT_EQ(four_over_six_block_error(fb.data(), 1536.f, 1536.f), 0.f);
    EXPECT_EQ(four_over_six_block_error(fb.data(), 2304.f, 1536.f), 36864.f);
    EXPECT_FALSE(four_over_six_block_m4(fb.data(), 1536.f));

    ThreadPool pool(2);
    std::vector<float> amax;
    FourOverSixCounts counts;
    const QuantizedTensor q = quantize_nvfp4_four_over_six(w, 1536.f, pool, &amax, &counts);
    EXPECT_EQ(amax, (std::vector<float>{2304.f, 1536.f}));
    EXPECT_EQ(q.global_scale, 1.0f);  // weight_scale_2
    EXPECT_EQ(q.block_scales, (std::vector<uint8_t>{0x7C, 0x78}));  // 384, 256
    EXPECT_EQ(q.codes, (std::vector<uint8_t>{0x56, 0x55, 0x33, 0x11, 0, 0, 0, 0,  //
                                             0x67, 0x45, 0x12, 0xA9, 0, 0, 0, 0}));
    EXPECT_EQ(counts.blocks, 2);
    EXPECT_EQ(counts.m4_blocks, 1);
    EXPECT_EQ(q.format, Format::nvfp4);
    EXPECT_EQ(q.block, 16);
  }
}

// E2M1 round-half-even of an exact rational n / den (den > 0), as a multiple of 1/2: the grid
// value index times two, computed in integers.
int64_t e2m1_half_units(int64_t n, int64_t den) {
  // grid in halves: 0 1 2 3 4 6 8 12; thresholds between them in quarters: 1 3 5 7 10 14 20.
  static const int64_t grid[8] = {0, 1, 2, 3, 4, 6, 8, 12};
  static const int64_t bound_q[7] = {1, 3, 5, 7, 10, 14, 20};  // in quarters
  int idx = 0;
  for (int i = 0; i < 7; ++i) {
    // compare 4n/den with bound_q[i]
    const int64_t lhs = 4 * n, rhs = bound_q[i] * den;
    if (lhs > rhs || (lhs == rhs && (i % 2 == 1))) idx = i + 1;  // ties to the even mantissa
  }
  return grid[idx];
}

// Every block 256 * [6, y1, y2, 0...] with y1, y2 on the grid k/16 in [0, 6] (and the same with
// the signs of y1 flipped), global amax 1536: both candidate scales (256, 384) and weight_scale_2
// are exact, so the errors are integers. M=4 exactly when its error is strictly smaller; every
// tie, nonzero ones included, keeps M=6.
TEST(FourOverSixTest, TieRuleOverAllTwoValueBlocks) {
  DivisionGuard guard;
  set_constant_division(ConstantDivision::gpu);
  int64_t m4 = 0, ties = 0, nonzero_ties = 0, total = 0;
  float x[16] = {};
  for (int sign : {1, -1})
    for (int k1 = 0; k1 <= 96; ++k1)
      for (int k2 = 0; k2 <= 96; ++k2) {
        x[0] = 1536.f;
        x[1] = float(sign * k1 * 16);  // 256 * k1 / 16
        x[2] = float(k2 * 16);
        // Exact errors in units of 1 (values are integers): M=6 divides by 256, M=4 by 384.
        int64_t e6 = 0, e4 = 0;
        for (int i = 0; i < 3; ++i) {
          const int64_t v = int64_t(std::fabs(x[i]));
          const int64_t q6 = e2m1_half_units(v, 256) * 128;  // half-units * 256 / 2
          const int64_t q4 = e2m1_half_units(v, 384) * 192;
          e6 += (v - q6) * (v - q6);
          e4 += (v - q4) * (v - q4);
        }
        const bool expect_m4 = e4 < e6;
        ASSERT_EQ(four_over_six_block_m4(x, 1536.f), expect_m4)
            << "y1 " << sign * k1 << "/16 y2 " << k2 << "/16: e6 " << e6 << " e4 " << e4;
        ASSERT_EQ(four_over_six_block_error(x, 1536.f, 1536.f), float(e6));
        ASSERT_EQ(four_over_six_block_error(x, 2304.f, 1536.f), float(e4));
        m4 += expect_m4;
        ties += e4 == e6;
        nonzero_ties += e4 == e6 && e4 > 0;
        ++total;
      }
  // The grid exercises both outcomes and ties with and without error.
  EXPECT_GT(m4, total / 10);
  EXPECT_LT(m4, total - total / 10);
  EXPECT_GT(ties, 0);
  EXPECT_GT(nonzero_ties, 0);
}

TEST(FourOverSixTest, ZeroBlocksKeepM6AndTheStaticZeroScale) {
  ThreadPool pool(2);
  const int64_t rows = 4, cols = 64;
  std::vector<float> w = test::random_weights(rows, cols, 11);
  for (int k = 0; k < 16; ++k) w[size_t(1 * cols + 32 + k)] = 0.f;  // row 1, block 2
  for (int k = 0; k < 16; ++k) w[size_t(3 * cols + k)] = -0.f;      // row 3, block 0
  const float global = max_abs(w);
  const float zeros[16] = {};
  EXPECT_FALSE(four_over_six_block_m4(zeros, global));
  EXPECT_EQ(four_over_six_block_error(zeros, 0.f, global), 0.f);
  std::vector<float> amax;
  const QuantizedTensor q = quantize_nvfp4_four_over_six(test::f32_view(w, rows, cols), global,
                                                         pool, &amax);
  for (int64_t b : {int64_t(1 * 4 + 2), int64_t(3 * 4 + 0)}) {
    EXPECT_EQ(amax[size_t(b)], 0.f);
    // ps = 1: e4m3(min(256 * 6 / global, 448)) under the 256 normalisation.
    EXPECT_EQ(q.block_scales[size_t(b)], nvfp4_static_block_scale(0.f, global, 256.f));
    for (int k = 0; k < 8; ++k) EXPECT_EQ(q.codes[size_t(b * 8 + k)], 0) << b;
  }
}

TEST(FourOverSixTest, AllZeroTensorEncodesFinite) {
  ThreadPool pool(1);
  const std::vector<float> w(32 * 16, 0.f);
  FourOverSixCounts counts;
  const QuantizedTensor q =
      quantize_nvfp4_four_over_six(test::f32_view(w, 32, 16), 0.f, pool, nullptr, &counts);
  EXPECT_EQ(q.global_scale, 1.f);
  EXPECT_EQ(q.block_scales, std::vector<uint8_t>(32, 0x38));
  EXPECT_EQ(q.codes, std::vector<uint8_t>(32 * 8, 0));
  EXPECT_EQ(counts.blocks, 32);
  EXPECT_EQ(counts.m4_blocks, 0);
}

TEST(FourOverSixTest, ScalesStayAt384AndBelowAndEachChoiceIsTheSmallerError) {
  DivisionGuard guard;
  for (ConstantDivision d : {ConstantDivision::gpu, ConstantDivision::cpu}) {
    set_constant_division(d);
    ThreadPool pool(3);
    const int64_t rows = 48, cols = 128;
    const std::vector<float> w = test::random_weights(rows, cols, 21);
    const float global = max_abs(w);
    std::vector<float> amax;
    FourOverSixCounts counts;
    const QuantizedTensor q =
        quantize_nvfp4_four_over_six(test::f32_view(w, rows, cols), global, pool, &amax, &counts);
    EXPECT_EQ(q.global_scale, div_by_constant(global, 1536.f));
    int64_t m4 = 0;
    bool saw_global_block = false;
    for (int64_t b = 0; b < rows * cols / 16; ++b) {
      const float* x = w.data() + b * 16;
      float bamax = 0.f;
      for (int k = 0; k < 16; ++k) bamax = std::max(bamax, std::fabs(x[k]));
      const bool chose_m4 = four_over_six_block_error(x, bamax * 1.5f, global) <
                            four_over_six_block_error(x, bamax, global);
      EXPECT_EQ(amax[size_t(b)], chose_m4 ? bamax * 1.5f : bamax) << b;
      m4 += chose_m4;
      const float s8 = e4m3_to_f32(q.block_scales[size_t(b)]);
      EXPECT_LE(s8, 384.f) << b;
      if (bamax == global) {
        // The block holding the tensor's amax: exactly 256 (M=6) or 384 (M=4), never clipped.
        EXPECT_EQ(s8, chose_m4 ? 384.f : 256.f);
        saw_global_block = true;
      }
      EXPECT_EQ(q.block_scales[size_t(b)], nvfp4_static_block_scale(amax[size_t(b)], global, 256.f));
    }
    EXPECT_TRUE(saw_global_block);
    EXPECT_EQ(counts.m4_blocks, m4);
    EXPECT_GT(m4, 0);
    EXPECT_LT(m4, rows * cols / 16);
    // Codes: the static export against those scales.
    const QuantizedTensor ref =
        nvfp4_static_quantize(w.data(), rows, cols, amax.data(), global, pool, 256.f);
    EXPECT_EQ(q.codes, ref.codes);
    // Overall it is closer to the weights than round to nearest (dynamic scales, /2688).
    const QuantizedTensor rtn =
        quantize_rtn(test::f32_view(w, rows, cols), RtnOptions{Format::nvfp4}, global, pool);
    EXPECT_LT(squared_error(w, dequantized(q)), squared_error(w, dequantized(rtn)));
  }
}

TEST(FourOverSixTest, GroupAmaxAndThreadCounts) {
  ThreadPool one(1), four(4);
  const int64_t rows = 40, cols = 96;
  const std::vector<float> w = test::random_weights(rows, cols, 31);
  const float group = 2.f * max_abs(w);  // a fused sibling holds a larger amax
  const QuantizedTensor a = quantize_nvfp4_four_over_six(test::f32_view(w, rows, cols), group, one);
  const QuantizedTensor b = quantize_nvfp4_four_over_six(test::f32_view(w, rows, cols), group, four);
  EXPECT_EQ(a.codes, b.codes);
  EXPECT_EQ(a.block_scales, b.block_scales);
  EXPECT_EQ(a.global_scale, b.global_scale);
  EXPECT_EQ(a.global_scale, div_by_constant(group, 1536.f));
  for (uint8_t s : a.block_scales) EXPECT_LE(e4m3_to_f32(s), 192.f);  // 384 * amax / group
}

TEST(FourOverSixTest, GptqKeepsTheFourOverSixScales) {
  ThreadPool pool(2);
  const int64_t rows = 32, cols = 64, tokens = 512;
  const std::vector<float> w = test::random_weights(rows, cols, 41);
  const float global = max_abs(w);
  const QuantizedTensor q46 = quantize_nvfp4_four_over_six(test::f32_view(w, rows, cols), global, pool);
  GptqOptions go;
  go.format = RtnOptions{Format::nvfp4};
  // A diagonal Hessian: GPTQ propagates nothing, the codes are the 4/6 ones.
  LinearStats diag;
  diag.tokens = 4;
  diag.xtx.assign(size_t(cols * cols), 0.0);
  for (int64_t i = 0; i < cols; ++i) diag.xtx[size_t(i * cols + i)] = 4.0 * double(1 + i % 5);
  const GptqResult d = gptq_with_scales(w, q46, diag.xtx, diag.tokens, go, pool);
  EXPECT_EQ(d.tensor.codes, q46.codes);
  EXPECT_EQ(d.tensor.block_scales, q46.block_scales);
  // Correlated inputs: the scales stay, the codes move and the output error drops.
  const std::vector<float> x = test::correlated_inputs(tokens, cols, 42);
  const LinearStats s = test::stats_from_inputs(x, tokens, cols, 0);
  const GptqResult g = gptq_with_scales(w, q46, s.xtx, s.tokens, go, pool);
  EXPECT_EQ(g.tensor.block_scales, q46.block_scales);
  EXPECT_EQ(g.tensor.global_scale, q46.global_scale);
  EXPECT_NE(g.tensor.codes, q46.codes);
  EXPECT_LT(test::output_error(x, tokens, cols, w, dequantized(g.tensor), rows),
            test::output_error(x, tokens, cols, w, dequantized(q46), rows));
}

TEST(FourOverSixTest, BadInputsThrow) {
  ThreadPool pool(1);
  const std::vector<float> w(2 * 24, 1.f);
  EXPECT_THROW(quantize_nvfp4_four_over_six(test::f32_view(w, 2, 24), 1.f, pool), Error);
  const std::vector<float> v(2 * 16, 1.f);
  EXPECT_THROW(quantize_nvfp4_four_over_six(test::f32_view(v, 2, 16), -1.f, pool), Error);
  EXPECT_THROW(quantize_nvfp4_four_over_six(test::f32_view(v, 2, 16), INFINITY, pool), Error);
}

}  // namespace
}  // namespace qf

// Kernel tests: every weight format's matrix-vector and matrix-matrix products against the
// scalar reference built from the formats' dequantizers, and bit-identical results at any
// thread count.
#include "core/numeric.h"
#include "core/thread_pool.h"
#include "formats/fp8.h"
#include "formats/ggml_types.h"
#include "formats/int4.h"
#include "formats/int8.h"
#include "formats/mxfp4.h"
#include "formats/nvfp4.h"
#include "kernels/ggml_vec_dot.h"
#include "kernels/kernels_internal.h"
#include "kernels/linear.h"
#include "kernels/q4_rows16.h"
#include "kernels/q4_int8_activation.h"
#include "kernels/ops.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <vector>

namespace qf {
namespace {

// A quantized (or float) weight together with the buffers it views.
struct TestWeight {
  LinearWeight w;
  std::vector<float> f32;
  std::vector<uint16_t> half;
  std::vector<uint8_t> bytes, block_scales;
  std::vector<int32_t> words;
  std::vector<float> scales;
};

std::vector<float> random_vector(size_t n, uint32_t seed, float scale = 1.f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

std::unique_ptr<TestWeight> make_weight(WeightFormat f, int64_t rows, int64_t cols, int group = 32,
                                        uint32_t seed = 1) {
  auto t = std::make_unique<TestWeight>();
  t->f32 = random_vector(size_t(rows * cols), seed, 0.05f);
  const WeightRows wr{t->f32.data(), DType::F32, rows, cols};
  LinearWeight& w = t->w;
  w.format = f;
  w.rows = rows;
  w.cols = cols;
  switch (f) {
    case WeightFormat::f32: w.data = t->f32.data(); break;
    case WeightFormat::bf16:
    case WeightFormat::f16:
      t->half.resize(t->f32.size());
      for (size_t i = 0; i < t->f32.size(); ++i)
        t->half[i] = f == WeightFormat::bf16 ? f32_to_bf16(t->f32[i]) : f32_to_f16(t->f32[i]);
      w.data = t->half.data();
      break;
    case WeightFormat::nvfp4: {
      float amax = 0;
      for (float x : t->f32) amax = std::max(amax, std::fabs(x));
      w.global_scale = nvfp4_global_scale(amax);
      t->bytes.resize(size_t(rows * cols / 2));
      t->block_scales.resize(size_t(rows * cols / 16));
      nvfp4_quantize_reference(wr, w.global_scale, t->bytes.data(), t->block_scales.data());
      w.data = t->bytes.data();
      w.block_scales = t->block_scales.data();
      break;
    }
    case WeightFormat::mxfp4:
      t->bytes.resize(size_t(rows * cols / 2));
      t->block_scales.resize(size_t(rows * cols / 32));
      mxfp4_quantize_reference(wr, t->bytes.data(), t->block_scales.data());
      w.data = t->bytes.data();
      w.block_scales = t->block_scales.data();
      break;
    case WeightFormat::fp8:
      t->bytes.resize(size_t(rows * cols));
      t->scales.resize(size_t(rows));
      fp8_channel_quantize_reference(wr, DType::F32, t->bytes.data(), t->scales.data());
      w.data = t->bytes.data();
      w.scales = t->scales.data();
      break;
    case WeightFormat::int8: {
      ThreadPool pool(1);
      const Int8ChannelTensor q = int8_channel_quantize(t->f32.data(), rows, cols, DType::F32, pool);
      t->bytes.assign(reinterpret_cast<const uint8_t*>(q.codes.data()),
                      reinterpret_cast<const uint8_t*>(q.codes.data()) + q.codes.size());
      t->scales = q.scales;
      w.data = t->bytes.data();
      w.scales = t->scales.data();
      break;
    }
    case WeightFormat::int4_row_pairs:
    case WeightFormat::int4_packed32: {
      std::vector<int8_t> q(static_cast<size_t>(rows * cols));
      t->scales.resize(size_t(rows * cols / group));
      int4_quantize_reference(wr, group, DType::F32, q.data(), t->scales.data());
      if (f == WeightFormat::int4_row_pairs) {
        t->bytes.resize(size_t(rows / 2 * cols));
        int4_pack_row_pairs(q.data(), rows, cols, t->bytes.data());
        w.data = t->bytes.data();
      } else {
        t->words.resize(size_t(rows * cols / 8));
        int4_pack_int32(q.data(), rows, cols, t->words.data());
        w.data = t->words.data();
      }
      w.scales = t->scales.data();
      w.group = group;
      break;
    }
    case WeightFormat::nvfp4_rows16:
    case WeightFormat::mxfp4_rows16:
    case WeightFormat::int4_row_pairs_rows16:
    case WeightFormat::int4_packed32_rows16: {  // the stored weight of the same seed, repacked
      const auto stored = make_weight(kernels::q4_rows16_source(f), rows, cols, group, seed);
      t->bytes.resize(size_t(kernels::q4_rows16_bytes(stored->w)));
      kernels::q4_repack_rows16(stored->w, t->bytes.data());
      w = kernels::q4_rows16_weight(stored->w, t->bytes.data());
      break;
    }
    case WeightFormat::ggml:  // GgmlBlockWeightsMatchTheirDequantization builds its own
      ADD_FAILURE() << "make_weight has no ggml weights";
      break;
  }
  return t;
}

// |y - ref| within float reassociation error of sum |w x|.
void expect_close(const LinearWeight& w, const std::vector<float>& x, int64_t tokens,
                  const std::vector<float>& y, const std::vector<float>& ref) {
  std::vector<float> row(static_cast<size_t>(w.cols));
  for (int64_t r = 0; r < w.rows; ++r) {
    dequantize_weight_rows(w, r, 1, row.data());
    for (int64_t t = 0; t < tokens; ++t) {
      double mag = 0;
      for (int64_t c = 0; c < w.cols; ++c) mag += std::fabs(double(row[size_t(c)]) * x[size_t(t * w.cols + c)]);
      const size_t i = size_t(t * w.rows + r);
      ASSERT_NEAR(y[i], ref[i], 2e-6 * mag + 1e-30)
          << weight_format_name(w.format) << " row " << r << " token " << t;
    }
  }
}

// The int8-activation product (tokens == 1): within float summation error of the reference that
// quantizes x the same way (integer dot products are exact), and within the activation
// rounding bound of the float reference: each x moves by at most half its block's step
// amax_block / 127, so |y - ref| <= sum |w| * amax_block / 254.
void expect_int8_activation_close(const LinearWeight& w, const std::vector<float>& x,
                                  const std::vector<float>& y, const std::vector<float>& ref) {
  std::vector<float> ref8(static_cast<size_t>(w.rows)), row(static_cast<size_t>(w.cols));
  linear_reference_int8_activation(w, x.data(), ref8.data());
  for (int64_t r = 0; r < w.rows; ++r) {
    dequantize_weight_rows(w, r, 1, row.data());
    double mag = 0, bound = 0;
    for (int64_t c = 0; c < w.cols; ++c) {
      float amax = 0;
      for (int64_t i = c / 16 * 16; i < c / 16 * 16 + 16; ++i)
        amax = std::max(amax, std::fabs(x[size_t(i)]));
      mag += std::fabs(double(row[size_t(c)]) * x[size_t(c)]);
      bound += std::fabs(double(row[size_t(c)])) * amax / 254.0;
    }
    ASSERT_NEAR(y[size_t(r)], ref8[size_t(r)], 4e-6 * mag + 1e-30)
        << weight_format_name(w.format) << " row " << r << " vs int8 reference";
    ASSERT_NEAR(y[size_t(r)], ref[size_t(r)], bound * 1.001 + 4e-6 * mag + 1e-30)
        << weight_format_name(w.format) << " row " << r << " vs float reference";
  }
}

// BF16 prefill: the activation is rounded to BF16 (relative 2^-9), the decoded weights are exact
// in BF16 except INT4's q x scale (rounded, relative 2^-9 too). Against the float reference on
// the rounded activation exact weights leave only summation error; against `ref` (the float
// reference on x) the roundings too.
void expect_bf16_matmul_close(const LinearWeight& w, const std::vector<float>& x, int64_t tokens,
                              const std::vector<float>& y, const std::vector<float>& ref) {
  std::vector<float> xr(x.size()), refr(ref.size());
  for (size_t i = 0; i < x.size(); ++i) xr[i] = bf16_to_f32(f32_to_bf16(x[i]));
  linear_reference(w, xr.data(), tokens, refr.data());
  const bool int4 = kernels::q4_rows16_source(w.format) == WeightFormat::int4_row_pairs ||
                    kernels::q4_rows16_source(w.format) == WeightFormat::int4_packed32;
  std::vector<float> row(static_cast<size_t>(w.cols));
  for (int64_t r = 0; r < w.rows; ++r) {
    dequantize_weight_rows(w, r, 1, row.data());
    for (int64_t tk = 0; tk < tokens; ++tk) {
      double mag = 0;
      for (int64_t k = 0; k < w.cols; ++k)
        mag += std::fabs(double(row[size_t(k)]) * x[size_t(tk * w.cols + k)]);
      const size_t i = size_t(tk * w.rows + r);
      ASSERT_NEAR(y[i], refr[i], (int4 ? std::ldexp(1.0, -8) : 4e-6) * mag + 1e-30)
          << weight_format_name(w.format) << " row " << r << " token " << tk;
      ASSERT_NEAR(y[i], ref[i], std::ldexp(1.0, -8) * mag + 1e-30)
          << weight_format_name(w.format) << " row " << r << " token " << tk;
    }
  }
}

struct Case {
  WeightFormat format;
  int64_t rows, cols;
  int group;
};

class KernelLinear : public ::testing::TestWithParam<Case> {};

TEST_P(KernelLinear, MatchesReferenceAndIsThreadCountIndependent) {
  const Case c = GetParam();
  auto t = make_weight(c.format, c.rows, c.cols, c.group);
  ThreadPool one(1), two(2);
  for (int64_t tokens : {int64_t(1), int64_t(3), int64_t(9), kernels::kVnniInt8PrefillTokens + 1}) {
    const auto x = random_vector(size_t(tokens * c.cols), 7);
    std::vector<float> ref(static_cast<size_t>(tokens * c.rows)), y1(ref.size()), y2(ref.size());
    linear_reference(t->w, x.data(), tokens, ref.data());
    linear_forward(t->w, x.data(), tokens, y1.data(), &one, KernelMode::fast);
    linear_forward(t->w, x.data(), tokens, y2.data(), &two, KernelMode::fast);
    // Which fast path linear_forward takes (kernels/linear.cpp): the int8 path where
    // takes_int8_activations holds (up to 8 tokens; short 4-bit prompts on AVX-512 VNNI
    // without AMX, every 4-bit prompt on AVX2-only CPUs); else
    // BF16 activations where the BF16 kernels take the weight (a few tokens of BF16
    // weights stream once on vdpbf16ps, more take the matrix product), float ones otherwise.
    if (kernels::takes_int8_activations(t->w, tokens, KernelMode::fast)) {
      // Each token as alone: its activation quantized to int8 per 16 elements.
      for (int64_t k = 0; k < tokens; ++k) {
        auto part = [&](const std::vector<float>& v, int64_t n) {
          return std::vector<float>(v.begin() + k * n, v.begin() + (k + 1) * n);
        };
        expect_int8_activation_close(t->w, part(x, c.cols), part(y1, c.rows), part(ref, c.rows));
      }
      // The exact (float-activation) kernels stay selectable and exact.
      std::vector<float> yp(ref.size());
      linear_forward(t->w, x.data(), tokens, yp.data(), &two, KernelMode::exact);
      expect_close(t->w, x, tokens, yp, ref);
    } else if (tokens > 1 && kernels::use_bf16_matmul(t->w)) {
      expect_bf16_matmul_close(t->w, x, tokens, y1, ref);
    } else {
      // Float weights on a few tokens stream once with float activations.
      expect_close(t->w, x, tokens, y1, ref);
    }
    for (size_t i = 0; i < y1.size(); ++i)
      ASSERT_EQ(y1[i], y2[i]) << "thread count changed output " << i << " tokens " << tokens;
  }
}

INSTANTIATE_TEST_SUITE_P(
    KernelFormats, KernelLinear,
    ::testing::Values(Case{WeightFormat::f32, 37, 300, 0}, Case{WeightFormat::bf16, 64, 256, 0},
                      Case{WeightFormat::f16, 33, 129, 0}, Case{WeightFormat::nvfp4, 70, 256, 0},
                      Case{WeightFormat::nvfp4, 9, 80, 0},  // 80: a chunk tail of 16
                      Case{WeightFormat::nvfp4, 130, 1024, 0}, Case{WeightFormat::mxfp4, 65, 256, 0},
                      Case{WeightFormat::mxfp4, 8, 96, 0}, Case{WeightFormat::fp8, 40, 200, 0},
                      Case{WeightFormat::int8, 40, 200, 0}, Case{WeightFormat::int8, 67, 4099, 0},
                      Case{WeightFormat::int4_row_pairs, 66, 256, 32},
                      Case{WeightFormat::int4_row_pairs, 8, 384, 128},
                      // The VNNI row-pair kernel's 256-column quads: groups of 16 with a
                      // chunk and a tail after the quad, 256, and 512 (two quads a group).
                      Case{WeightFormat::int4_row_pairs, 6, 336, 16},
                      Case{WeightFormat::int4_row_pairs, 4, 768, 256},
                      Case{WeightFormat::int4_row_pairs, 6, 1536, 512},
                      Case{WeightFormat::int4_packed32, 65, 256, 32},
                      Case{WeightFormat::int4_packed32, 7, 512, 128},
                      Case{WeightFormat::int4_packed32, 5, 64, 8},
                      Case{WeightFormat::nvfp4, 13, 4096 + 48, 0},  // chunks plus a tail of 48
                      // Rows longer than kShortRowBytes: one token reads 4 at a time on
                      // AVX-512 VNNI (shorter rows one at a time).
                      Case{WeightFormat::mxfp4, 9, 4096 + 128, 0},
                      Case{WeightFormat::int4_packed32, 9, 4096 + 256, 128},
                      Case{WeightFormat::mxfp4, 6, 32, 0},
                      Case{WeightFormat::int4_packed32, 9, 768, 256},
                      Case{WeightFormat::int4_packed32, 6, 208, 8},
                      Case{WeightFormat::int4_packed32, 7, 336, 16},
                      Case{WeightFormat::int4_packed32, 5, 320, 64},
                      Case{WeightFormat::bf16, 35, 129, 0},  // odd K: padded BF16 pairs
                      // INT4 per channel (group = in_features): stories260K's down_proj (172),
                      // a group no SIMD chunk divides (168), whole rows of 64 and 384.
                      Case{WeightFormat::int4_row_pairs, 64, 172, 172},
                      Case{WeightFormat::int4_row_pairs, 10, 64, 64},
                      Case{WeightFormat::int4_packed32, 7, 168, 168},
                      Case{WeightFormat::int4_packed32, 6, 384, 384},
                      // NVFP4 repacked 16 rows at a time: a tail of 16 after the chunks, rows
                      // beyond kShortRowBytes, one group.
                      Case{WeightFormat::nvfp4_rows16, 64, 272, 0},
                      Case{WeightFormat::nvfp4_rows16, 32, 4096 + 48, 0},
                      Case{WeightFormat::nvfp4_rows16, 16, 16, 0},
                      Case{WeightFormat::mxfp4_rows16, 48, 288, 0},
                      Case{WeightFormat::mxfp4_rows16, 16, 4096 + 96, 0},
                      Case{WeightFormat::mxfp4_rows16, 16, 32, 0},
                      // INT4 repacked: groups of 16 (one sub-block), 32, 128 and whole rows,
                      // rows beyond kShortRowBytes.
                      Case{WeightFormat::int4_row_pairs_rows16, 48, 336, 16},
                      Case{WeightFormat::int4_row_pairs_rows16, 32, 4096 + 128, 128},
                      Case{WeightFormat::int4_row_pairs_rows16, 16, 64, 64},
                      Case{WeightFormat::int4_packed32_rows16, 64, 256, 32},
                      Case{WeightFormat::int4_packed32_rows16, 16, 4096 + 256, 128},
                      Case{WeightFormat::int4_packed32_rows16, 32, 768, 256}),
    [](const ::testing::TestParamInfo<Case>& p) {
      std::string n(weight_format_name(p.param.format));
      for (char& ch : n)
        if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
      return n + "_" + std::to_string(p.param.rows) + "x" + std::to_string(p.param.cols);
    });

// Both BF16 matrix-matrix kernels called directly (linear_forward takes AMX where the CPU has it,
// which would leave the AVX512-BF16 kernel untested there): token counts around the AMX kernel's
// blocks of 16 and pairs of blocks, row counts around its tasks of 32, K tails and an INT4 group
// that no 32 divides; bit-identical at 1 and 2 threads.
TEST(KernelLinear, Bf16MatMulKernelsMatchReference) {
  if (!kernels::cpu_has_avx512bf16()) GTEST_SKIP() << "no AVX512-BF16";
  ThreadPool one(1), two(2);
  const Case cases[] = {{WeightFormat::bf16, 64, 256, 0},   {WeightFormat::bf16, 35, 129, 0},
                        {WeightFormat::bf16, 33, 1090, 0},  {WeightFormat::nvfp4, 70, 256, 0},
                        {WeightFormat::nvfp4, 9, 80, 0},    {WeightFormat::nvfp4, 40, 1072, 0},
                        {WeightFormat::mxfp4, 65, 608, 0},  {WeightFormat::fp8, 40, 200, 0},
                        {WeightFormat::int8, 67, 300, 0},   {WeightFormat::int4_row_pairs, 64, 172, 172},
                        {WeightFormat::int4_packed32, 7, 512, 128}};
  for (const Case& c : cases) {
    auto t = make_weight(c.format, c.rows, c.cols, c.group);
    ASSERT_TRUE(kernels::use_bf16_matmul(t->w)) << weight_format_name(c.format);
    for (int64_t tokens : {2, 16, 17, 33, 48, 70, 530}) {
      // 530: two of the AMX kernel's token chunks of 512, the second partial (two cases only).
      if (tokens == 530 && c.cols > 300) continue;
      SCOPED_TRACE(std::string(weight_format_name(c.format)) + " " + std::to_string(c.rows) + "x" +
                   std::to_string(c.cols) + " tokens " + std::to_string(tokens));
      const auto x = random_vector(size_t(tokens * c.cols), 17);
      std::vector<float> ref(static_cast<size_t>(tokens * c.rows)), y1(ref.size()), y2(ref.size());
      linear_reference(t->w, x.data(), tokens, ref.data());
      kernels::matmul_bf16_avx512bf16(t->w, x.data(), tokens, y1.data(), &one);
      kernels::matmul_bf16_avx512bf16(t->w, x.data(), tokens, y2.data(), &two);
      expect_bf16_matmul_close(t->w, x, tokens, y1, ref);
      ASSERT_EQ(y1, y2) << "AVX512-BF16: thread count changed the output";
      if (!kernels::cpu_has_amx_bf16() || !kernels::fits_amx_bf16(t->w)) continue;
      kernels::matmul_bf16_amx(t->w, x.data(), tokens, y1.data(), &one);
      kernels::matmul_bf16_amx(t->w, x.data(), tokens, y2.data(), &two);
      expect_bf16_matmul_close(t->w, x, tokens, y1, ref);
      ASSERT_EQ(y1, y2) << "AMX: thread count changed the output";
    }
  }
}

// Every FP8 and INT8 code through the AVX512-BF16 product's packer (FP8 decoded through FP16's
// fields, not the table): one-hot activations read each weight back exactly (the values and the
// one-hot rows are exact in BF16), so y[k, r] is the code's value times its row scale, bit for
// bit; FP8's NaN codes (kept on a row of their own, which they poison) give NaN.
TEST(KernelLinear, Bf16MatMulPacksEveryByteCode) {
  if (!kernels::cpu_has_avx512bf16()) GTEST_SKIP() << "no AVX512-BF16";
  ThreadPool one(1);
  const int64_t cols = 128, rows = 3;
  std::vector<float> x(size_t(cols * cols), 0.f);
  for (int64_t k = 0; k < cols; ++k) x[size_t(k * cols + k)] = 1.f;
  for (WeightFormat f : {WeightFormat::fp8, WeightFormat::int8}) {
    // Row 0: codes 0-127, row 1: 128-255, row 2: FP8's NaNs (INT8: codes 0-127 again).
    std::vector<uint8_t> codes(size_t(rows * cols));
    for (int64_t k = 0; k < cols; ++k) {
      codes[size_t(k)] = uint8_t(k);
      codes[size_t(cols + k)] = uint8_t(128 + k);
      codes[size_t(2 * cols + k)] =
          f == WeightFormat::fp8 ? uint8_t(k % 2 ? 0xFF : 0x7F) : uint8_t(k);
    }
    // The NaNs of rows 0, 1.
    if (f == WeightFormat::fp8) codes[127] = codes[size_t(cols + 127)] = 0;
    std::vector<float> scales = {0.5f, 3.f, 1.f};
    LinearWeight w;
    w.format = f;
    w.rows = rows;
    w.cols = cols;
    w.data = codes.data();
    w.scales = scales.data();
    std::vector<float> y(size_t(cols * rows));
    kernels::matmul_bf16_avx512bf16(w, x.data(), cols, y.data(), &one);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t k = 0; k < cols; ++k) {
        const uint8_t c = codes[size_t(r * cols + k)];
        const float v = f == WeightFormat::fp8 ? kernels::e4m3_table()[c] : float(int8_t(c));
        const float got = y[size_t(k * rows + r)];
        if (std::isnan(v))
          EXPECT_TRUE(std::isnan(got)) << "code " << int(c);
        else
          EXPECT_EQ(got, v * scales[size_t(r)]) << weight_format_name(f) << " code " << int(c);
      }
  }
}

// The batched-decode BF16 kernel on AMX tiles called directly: row counts around its blocks of
// 32 (the rest on AVX512-BF16), 1 to 8 tokens and a second group of 16; within the BF16
// product's bounds, bit-identical at 1 and 2 threads, and each token's outputs the same whether
// it comes alone or with others.
TEST(KernelLinear, Bf16TokensAmxMatchesReference) {
  ThreadPool one(1), two(2);
  for (const Case& c : {Case{WeightFormat::bf16, 64, 256, 0}, Case{WeightFormat::bf16, 70, 96, 0},
                        Case{WeightFormat::bf16, 32, 1024, 0}}) {
    auto t = make_weight(c.format, c.rows, c.cols, c.group);
    if (!kernels::fits_bf16_tokens_amx(t->w)) GTEST_SKIP() << "no AMX-BF16";
    for (int64_t tokens : {1, 2, 5, 8, 19}) {
      SCOPED_TRACE(std::to_string(c.rows) + "x" + std::to_string(c.cols) + " tokens " +
                   std::to_string(tokens));
      const auto x = random_vector(size_t(tokens * c.cols), 29);
      std::vector<float> ref(static_cast<size_t>(tokens * c.rows)), y1(ref.size()), y2(ref.size());
      linear_reference(t->w, x.data(), tokens, ref.data());
      kernels::matvec_bf16_tokens_amx(t->w, x.data(), tokens, y1.data(), &one);
      kernels::matvec_bf16_tokens_amx(t->w, x.data(), tokens, y2.data(), &two);
      expect_bf16_matmul_close(t->w, x, tokens, y1, ref);
      ASSERT_EQ(y1, y2) << "thread count changed the output";
      std::vector<float> alone(static_cast<size_t>(c.rows));
      kernels::matvec_bf16_tokens_amx(t->w, x.data() + (tokens - 1) * c.cols, 1, alone.data(), &two);
      for (int64_t r = 0; r < c.rows; ++r)
        ASSERT_EQ(alone[size_t(r)], y1[size_t((tokens - 1) * c.rows + r)]) << "row " << r;
    }
  }
}

// One token over the repacked 4-bit layouts reads 4 groups of 16 rows at a time where a row task
// holds that many (matvec_q4_rows16_avx512vnni.cpp's groups_dot): each row's output is the same,
// bit for bit, as in a product of its 16-row group alone (a weight of those rows, whose one task
// runs the one-group kernel). 1072 rows: tasks of 272 rows, four sets of 4 groups and one left.
TEST(KernelLinear, Rows16GroupsReadTogetherMatchEachGroupAlone) {
  ThreadPool one(1), two(2);
  const int64_t rows = 1072, cols = 512;
  for (const Case& c : {Case{WeightFormat::nvfp4_rows16, rows, cols, 0},
                        Case{WeightFormat::mxfp4_rows16, rows, cols, 0},
                        Case{WeightFormat::int4_packed32_rows16, rows, cols, 128},
                        Case{WeightFormat::int4_row_pairs_rows16, rows, cols, 64}}) {
    const auto t = make_weight(c.format, c.rows, c.cols, c.group, 11);
    const size_t group_bytes = t->bytes.size() / size_t(rows / 16);
    const auto x = random_vector(size_t(cols), 31);
    for (ThreadPool* pool : {&one, &two}) {
      std::vector<float> y(static_cast<size_t>(rows)), alone(16);
      linear_forward(t->w, x.data(), 1, y.data(), pool, KernelMode::fast);
      for (int64_t g = 0; g < rows / 16; ++g) {
        LinearWeight w16 = t->w;
        w16.rows = 16;
        w16.data = t->bytes.data() + size_t(g) * group_bytes;
        linear_forward(w16, x.data(), 1, alone.data(), pool, KernelMode::fast);
        for (int64_t r = 0; r < 16; ++r)
          ASSERT_EQ(y[size_t(16 * g + r)], alone[size_t(r)])
              << weight_format_name(c.format) << " row " << 16 * g + r << " threads "
              << pool->size();
      }
    }
  }
}

// Products sharing their input (q/k/v, gate/up) equal one linear_forward per weight, bit for bit,
// in both modes, at 1 and 2 threads: the AMX path (x laid out once, one task loop), the repacked
// 4-bit one (x quantized once, one task loop), mixed formats, and groups neither can share (an
// INT4 group that changes the K-blocks, an F32 weight).
TEST(KernelLinear, SharedInputProductsMatchSeparateOnes) {
  ThreadPool one(1), two(2);
  const int64_t cols = 512;
  struct Group {
    std::vector<Case> cases;
  };
  const Group groups[] = {
      {{{WeightFormat::bf16, 96, cols, 0}, {WeightFormat::bf16, 32, cols, 0}, {WeightFormat::bf16, 40, cols, 0}}},
      {{{WeightFormat::nvfp4, 130, cols, 0}, {WeightFormat::mxfp4, 64, cols, 0}, {WeightFormat::fp8, 20, cols, 0}}},
      {{{WeightFormat::nvfp4, 64, cols, 0}, {WeightFormat::int4_packed32, 64, cols, 512}}},
      {{{WeightFormat::bf16, 64, cols, 0}, {WeightFormat::f32, 33, cols, 0}}},
      // The repacked 4-bit layouts' one-loop path (VNNI + VBMI CPUs; elsewhere one call each),
      // and groups it cannot share (two formats; INT4 groups of different sizes).
      {{{WeightFormat::nvfp4_rows16, 96, cols, 0}, {WeightFormat::nvfp4_rows16, 32, cols, 0},
        {WeightFormat::nvfp4_rows16, 48, cols, 0}}},
      {{{WeightFormat::mxfp4_rows16, 64, cols, 0}, {WeightFormat::mxfp4_rows16, 16, cols, 0}}},
      {{{WeightFormat::int4_packed32_rows16, 32, cols, 128},
        {WeightFormat::int4_packed32_rows16, 48, cols, 128}}},
      {{{WeightFormat::nvfp4_rows16, 32, cols, 0}, {WeightFormat::mxfp4_rows16, 32, cols, 0}}},
      {{{WeightFormat::int4_row_pairs_rows16, 32, cols, 64},
        {WeightFormat::int4_row_pairs_rows16, 32, cols, 128}}},
  };
  for (const Group& g : groups) {
    std::vector<std::unique_ptr<TestWeight>> ts;
    std::vector<const LinearWeight*> ws;
    for (const Case& c : g.cases) {
      ts.push_back(make_weight(c.format, c.rows, c.cols, c.group, uint32_t(ts.size() + 3)));
      ws.push_back(&ts.back()->w);
    }
    for (int64_t tokens : {1, 5, 40}) {
      const auto x = random_vector(size_t(tokens * cols), 23);
      for (KernelMode mode : {KernelMode::exact, KernelMode::fast}) {
        for (ThreadPool* pool : {&one, &two}) {
          std::vector<std::vector<float>> sep(ws.size()), shared(ws.size());
          std::vector<float*> ys;
          for (size_t i = 0; i < ws.size(); ++i) {
            sep[i].resize(size_t(tokens * ws[i]->rows));
            shared[i].assign(sep[i].size(), -1.f);
            linear_forward(*ws[i], x.data(), tokens, sep[i].data(), pool, mode);
            ys.push_back(shared[i].data());
          }
          linear_forward_shared_input(ws, x.data(), tokens, ys, pool, mode);
          for (size_t i = 0; i < ws.size(); ++i)
            ASSERT_EQ(shared[i], sep[i]) << weight_format_name(ws[i]->format) << " tokens " << tokens
                                         << " " << kernel_mode_name(mode) << " threads " << pool->size();
        }
      }
    }
  }
}

// The gated SiLU product equals the two products followed by silu_mul (exact mode) or
// silu_mul_fast (fast mode) bit for bit, fused in the AMX kernel or not, at 1 and 2 threads.
TEST(KernelLinear, GatedSiluMatchesProductsThenGating) {
  ThreadPool one(1), two(2);
  const int64_t rows = 160, cols = 256;
  for (auto [gf, uf] : {std::pair{WeightFormat::bf16, WeightFormat::bf16},
                        std::pair{WeightFormat::nvfp4, WeightFormat::nvfp4},
                        std::pair{WeightFormat::nvfp4, WeightFormat::f32}}) {
    auto g = make_weight(gf, rows, cols, 32, 5), u = make_weight(uf, rows, cols, 32, 6);
    for (int64_t tokens : {1, 5, 40}) {
      const auto x = random_vector(size_t(tokens * cols), 29);
      for (KernelMode mode : {KernelMode::exact, KernelMode::fast}) {
        for (ThreadPool* pool : {&one, &two}) {
          std::vector<float> gy(static_cast<size_t>(tokens * rows)), uy(gy.size()), y(gy.size()),
              scratch(gy.size());
          linear_forward(g->w, x.data(), tokens, gy.data(), pool, mode);
          linear_forward(u->w, x.data(), tokens, uy.data(), pool, mode);
          if (mode == KernelMode::fast) silu_mul_fast(gy.data(), uy.data(), int64_t(gy.size()));
          else silu_mul(gy.data(), uy.data(), int64_t(gy.size()));
          linear_forward_gated_silu(g->w, u->w, x.data(), tokens, y.data(), scratch.data(), pool,
                                    mode);
          ASSERT_EQ(y, gy) << weight_format_name(gf) << "/" << weight_format_name(uf) << " tokens "
                           << tokens << " " << kernel_mode_name(mode) << " threads " << pool->size();
        }
      }
    }
  }
}

// A float weight stored transposed (gpt-oss experts, read in place): every product equals the
// same weight stored row-major, for a few tokens (the column-streaming kernel) and many (decoded
// tiles), at any thread count; shapes with row counts no vector width divides and input counts no 4 divides.
TEST(KernelLinear, TransposedFloatWeightsMatchRowMajor) {
  ThreadPool one(1), two(2);
  for (WeightFormat f : {WeightFormat::f32, WeightFormat::bf16, WeightFormat::f16}) {
    for (auto [rows, cols] : {std::pair<int64_t, int64_t>{37, 301}, {64, 2050}, {5, 7}}) {
      auto t = make_weight(f, rows, cols);
      // The transpose of t's stored values, viewed as the same logical weight.
      std::vector<float> f32(t->f32.size());
      std::vector<uint16_t> half(t->half.size());
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) {
          const size_t from = size_t(r * cols + c), to = size_t(c * rows + r);
          if (f == WeightFormat::f32) f32[to] = t->f32[from];
          else half[to] = t->half[from];
        }
      LinearWeight wt = t->w;
      wt.transposed = true;
      wt.data = f == WeightFormat::f32 ? static_cast<const void*>(f32.data()) : half.data();
      std::vector<float> a(static_cast<size_t>(cols)), b(a.size());
      for (int64_t r = 0; r < rows; r += std::max<int64_t>(1, rows / 5)) {
        dequantize_weight_rows(t->w, r, 1, a.data());
        dequantize_weight_rows(wt, r, 1, b.data());
        ASSERT_EQ(a, b) << weight_format_name(f) << " row " << r;
      }
      // 1 and 3: the stored rows streamed once for all tokens; 20: decoded tiles.
      for (int64_t tokens : {1, 3, 20}) {
        const auto x = random_vector(size_t(tokens * cols), 11);
        std::vector<float> ref(size_t(tokens * rows)), y1(ref.size()), y2(ref.size());
        linear_reference(t->w, x.data(), tokens, ref.data());
        for (KernelMode mode : {KernelMode::fast, KernelMode::exact}) {
          linear_forward(wt, x.data(), tokens, y1.data(), &one, mode);
          linear_forward(wt, x.data(), tokens, y2.data(), &two, mode);
          expect_close(t->w, x, tokens, y1, ref);
          ASSERT_EQ(y1, y2) << weight_format_name(f) << " thread count changed the output";
        }
      }
    }
  }
}

// Fast mode on several tokens (batched decode, and prefill where the int8 kernels take it:
// takes_int8_activations): the weights read once per token group (8, 4, 2, 1; row-pair INT4 on
// AVX2: 4, 1). 4-bit int8-activation products (AVX-512 VNNI or AVX2) give each token exactly
// what it gets alone; elsewhere a 4-bit product of several tokens takes the decoded float tiles
// (or the BF16 matrix-matrix kernels) and one token the float matrix-vector kernel (another
// summation order: within float rounding); F32 weights sum in another order (within float
// rounding), BF16 ones take BF16 activations (within their rounding, 2^-9 relative).
TEST(KernelLinear, FewTokensEqualEachTokenAlone) {
  ThreadPool two(2);
  // 704 columns: two pairs of 128-column chunks, an odd chunk and a tail of 64.
  for (int64_t cols : {int64_t(512), int64_t(704)}) {
    for (WeightFormat f : {WeightFormat::nvfp4, WeightFormat::mxfp4, WeightFormat::int4_packed32,
                           WeightFormat::int4_row_pairs, WeightFormat::bf16, WeightFormat::f32,
                           WeightFormat::nvfp4_rows16, WeightFormat::mxfp4_rows16,
                           WeightFormat::int4_row_pairs_rows16,
                           WeightFormat::int4_packed32_rows16}) {
      // 70 rows: tails of every row grouping but the 16-row blocks (whole groups only).
      const int64_t rows = kernels::is_q4_rows16(f) ? 80 : 70;
      auto t = make_weight(f, rows, cols);
      for (int64_t tokens : {int64_t(2), int64_t(3), int64_t(7), int64_t(8), int64_t(9),
                             int64_t(64), kernels::kRowPairInt8PrefillTokens + 1,
                             kernels::kVnniInt8PrefillTokens + 1}) {
        const auto x = random_vector(size_t(tokens * cols), 5);
        std::vector<float> y(size_t(tokens * rows)), one(static_cast<size_t>(rows));
        linear_forward(t->w, x.data(), tokens, y.data(), &two, KernelMode::fast);
        // Past kRowPairInt8PrefillTokens the row-pair layout's prefill leaves the int8 kernels
        // that one token takes: the token alone in exact mode is then its float counterpart.
        const bool int8 = kernels::takes_int8_activations(t->w, tokens, KernelMode::fast);
        const KernelMode alone =
            int8 == kernels::takes_int8_activations(t->w, 1, KernelMode::fast)
                ? KernelMode::fast
                : KernelMode::exact;
        // BF16 activations: BF16 weights, and 4-bit ones in the BF16 matrix-matrix kernels.
        const bool bf16_activations =
            f == WeightFormat::bf16 || (!int8 && kernels::use_bf16_matmul(t->w));
        for (int64_t k = 0; k < tokens; ++k) {
          linear_forward(t->w, x.data() + k * cols, 1, one.data(), &two, alone);
          for (int64_t r = 0; r < rows; ++r) {
            const float got = y[size_t(k * rows + r)], want = one[size_t(r)];
            if (!int8)
              ASSERT_NEAR(got, want, (bf16_activations ? 1e-2f : 1e-5f) * (1.f + std::fabs(want)))
                  << weight_format_name(f) << " cols " << cols << " tokens " << tokens
                  << " token " << k << " row " << r;
            else
              ASSERT_EQ(got, want) << weight_format_name(f) << " cols " << cols << " tokens "
                                   << tokens << " token " << k << " row " << r;
          }
        }
      }
    }
  }
}

// GGUF tensors in ggml blocks (WeightFormat::ggml): products equal the scalar reference on the
// type's own dequantization (times an NVFP4 .scale), for decode and prefill, at any thread
// count; the fast mode rounds activations as llama.cpp's CPU products do.
TEST(KernelLinear, GgmlBlockWeightsMatchTheirDequantization) {
  ThreadPool one(1), two(2);
  for (GgmlType type : {GgmlType::Q4_0, GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q6_K,
                        GgmlType::MXFP4, GgmlType::NVFP4}) {
    const GgmlTypeInfo& info = ggml_type_info(type);
    const int64_t rows = 37, cols = 512;
    const auto f = random_vector(size_t(rows * cols), 5, 0.05f);
    std::vector<uint8_t> blocks(size_t(rows * cols / info.block_size * info.block_bytes));
    info.quantize(f.data(), blocks.data(), rows * cols);
    LinearWeight w;
    w.format = WeightFormat::ggml;
    w.rows = rows;
    w.cols = cols;
    w.data = blocks.data();
    w.ggml_type = uint32_t(type);
    w.group = info.block_size;
    if (type == GgmlType::NVFP4) w.global_scale = 0.75f;
    EXPECT_EQ(w.stored_bytes(), blocks.size());
    std::vector<float> deq(f.size());
    info.dequantize(blocks.data(), deq.data(), rows * cols);
    std::vector<float> row(static_cast<size_t>(cols));
    dequantize_weight_rows(w, 3, 1, row.data());
    for (int64_t c = 0; c < cols; ++c)
      ASSERT_EQ(row[size_t(c)], deq[size_t(3 * cols + c)] * w.global_scale) << info.name;
    for (int64_t tokens : {1, 5}) {
      const auto x = random_vector(size_t(tokens * cols), 9);
      std::vector<float> ref(size_t(tokens * rows)), y1(ref.size()), y2(ref.size());
      linear_reference(w, x.data(), tokens, ref.data());
      linear_forward(w, x.data(), tokens, y1.data(), &one, KernelMode::exact);
      linear_forward(w, x.data(), tokens, y2.data(), &two, KernelMode::exact);
      expect_close(w, x, tokens, y1, ref);
      ASSERT_EQ(y1, y2) << info.name << ": thread count changed the output";
      // Fast mode: llama.cpp's activation rounding, Q8_0 for Q4_0/Q8_0/MXFP4/NVFP4 (the
      // reference on x through ggml's Q8_0), Q8_K for the k-quants.
      std::vector<float> xr(x);
      const bool q8 = type != GgmlType::Q4_K && type != GgmlType::Q6_K;
      if (q8) {
        // ggml-cpu's x86 quantize_row_q8_0: d = fp16(amax / 127), q = round-half-even(x * 127 /
        // amax), then q * d.
        for (size_t b = 0; b < x.size(); b += 32) {
          float amax = 0.f;
          for (size_t i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[b + i]));
          const float d = f16_to_f32(f32_to_f16(amax / 127.f));
          for (size_t i = 0; i < 32; ++i)
            xr[b + i] = std::nearbyint(x[b + i] * (127.f / amax)) * d;
        }
      } else {
        std::vector<int8_t> q(x.size());
        std::vector<float> d(x.size() / 256);
        std::vector<int16_t> bsums(x.size() / 16);
        kernels::ggml_quantize_act_q8_k(x.data(), int64_t(x.size()), q.data(), d.data(),
                                        bsums.data());
        for (size_t i = 0; i < x.size(); ++i) xr[i] = float(q[i]) * d[i / 256];
      }
      ASSERT_NE(xr, x);
      std::vector<float> reff(ref.size()), yf(ref.size());
      linear_reference(w, xr.data(), tokens, reff.data());
      linear_forward(w, x.data(), tokens, yf.data(), &two, KernelMode::fast);
      expect_close(w, xr, tokens, yf, reff);
    }
  }
}

TEST(KernelLinear, Int8ActivationQuantizationRoundsPerBlock) {
  std::vector<float> x(32, 0.f);
  x[0] = 1.f, x[1] = -0.5f, x[2] = 0.3f;  // block 0: amax 1
  x[20] = -2.f;                           // block 1: amax 2
  std::vector<int8_t> q(32);
  std::vector<float> s(2);
  kernels::quantize_activation_int8(x.data(), 32, q.data(), s.data());
  EXPECT_EQ(q[0], 127);
  EXPECT_EQ(q[1], -64);  // -63.5 rounds to even
  EXPECT_EQ(q[2], 38);
  EXPECT_EQ(q[20], -127);
  EXPECT_FLOAT_EQ(s[0], 1.f / 127);
  EXPECT_FLOAT_EQ(s[1], 2.f / 127);
}

// The kernels' activation layouts (q4_int8_activation.h) hold quantize_activation_int8's codes
// and scales, with each lane's bias -offset * (sum of its bytes) and zero padding: nibble order
// (evens then odds per 128-element chunk, 8 elements a lane) and natural order (4 a lane).
TEST(KernelLinear, Int8ActivationLayoutsHoldTheScalarQuantization) {
  if (!kernels::cpu_has_avx2()) GTEST_SKIP() << "no AVX2";
  const int64_t n = 336;  // two chunks and a tail of 80; 5 natural chunks and a tail of 16
  const auto x = random_vector(size_t(n), 3);
  std::vector<int8_t> q(static_cast<size_t>(n));
  std::vector<float> s(static_cast<size_t>(n / 16));
  kernels::quantize_activation_int8(x.data(), n, q.data(), s.data());
  kernels::q4::QuantizedX nib, nat;
  kernels::q4::quantize_x(x.data(), n, 12, nib);
  kernels::q4::quantize_x_natural(x.data(), n, 8, nat);
  ASSERT_EQ(nib.chunks, 3);
  ASSERT_EQ(nat.chunks, 6);
  for (int64_t e = 0; e < nib.chunks * 128; ++e) {
    const int64_t c = e / 128, in = e % 128;
    const int64_t at = c * 128 + (in % 2) * 64 + in / 2;  // evens, then odds
    EXPECT_EQ(nib.q[size_t(at)], e < n ? q[size_t(e)] : 0) << e;
    EXPECT_EQ(nat.q[size_t(e)], e < n ? q[size_t(e)] : 0) << e;
  }
  for (int64_t lane = 0; lane < nib.chunks * 16; ++lane) {
    const int64_t e0 = lane / 16 * 128 + lane % 16 * 8;  // its 8 elements
    int32_t sum = 0;
    for (int64_t e = e0; e < std::min(n, e0 + 8); ++e) sum += q[size_t(e)];
    EXPECT_EQ(nib.lane_bias[size_t(lane)], -12 * sum) << lane;
    EXPECT_EQ(nib.lane_scale[size_t(lane)], e0 < n ? s[size_t(e0 / 16)] : 0.f) << lane;
  }
  for (int64_t lane = 0; lane < nat.chunks * 16; ++lane) {
    int32_t sum = 0;
    for (int64_t e = 4 * lane; e < std::min(n, 4 * lane + 4); ++e) sum += q[size_t(e)];
    EXPECT_EQ(nat.lane_bias[size_t(lane)], -8 * sum) << lane;
    EXPECT_EQ(nat.lane_scale[size_t(lane)], 4 * lane < n ? s[size_t(4 * lane / 16)] : 0.f) << lane;
  }
  for (int64_t c = 0; c < nib.chunks; ++c)
    for (int j = 0; j < 8; ++j) {
      const int64_t e0 = c * 128 + 16 * kernels::q4::kHaddBlock[j];
      EXPECT_EQ(nib.block_scale[size_t(c * 8 + j)], e0 < n ? s[size_t(e0 / 16)] : 0.f);
      int32_t sum = 0;
      for (int64_t e = e0; e < std::min(n, e0 + 16); ++e) sum += q[size_t(e)];
      EXPECT_EQ(nib.block_bias[size_t(c * 8 + j)], -12 * sum);
    }
  // The VNNI kernel's pairs of chunks: lane 4k + j holds block 2k + (j & 1) of chunk 2p + j / 2.
  ASSERT_EQ(nib.pair_scale.size(), size_t(nib.chunks / 2 * 16));
  for (int64_t p = 0; p < nib.chunks / 2; ++p)
    for (int k = 0; k < 4; ++k)
      for (int j = 0; j < 4; ++j) {
        const int64_t e0 = (2 * p + j / 2) * 128 + (2 * k + (j & 1)) * 16;
        EXPECT_EQ(nib.pair_scale[size_t(p * 16 + 4 * k + j)], e0 < n ? s[size_t(e0 / 16)] : 0.f);
      }
  // The few-token path's activations: pair p of token t at (p * T + t) * 256, q + 128, lane L of
  // quarter h holding elements kQuarter[h] of pair_scale's block L.
  if (!kernels::cpu_has_avx512vnni()) return;
  kernels::q4::QuantizedX other, both;
  const auto x2 = random_vector(size_t(n), 4);
  std::vector<int8_t> q2(static_cast<size_t>(n));
  kernels::quantize_activation_int8(x2.data(), n, q2.data(), s.data());
  kernels::q4::quantize_x(x2.data(), n, 12, other);
  kernels::q4::interleave_tokens({nib, other}, both);
  ASSERT_EQ(both.pair_q_unsigned.size(), size_t(2 * (nib.chunks / 2) * 256));
  constexpr int kQuarter[4][4] = {{0, 2, 4, 6}, {1, 3, 5, 7}, {8, 10, 12, 14}, {9, 11, 13, 15}};
  for (int64_t p = 0; p < nib.chunks / 2; ++p)
    for (int t = 0; t < 2; ++t)
      for (int k = 0; k < 4; ++k)
        for (int j = 0; j < 4; ++j) {
          const int64_t e0 = (2 * p + j / 2) * 128 + (2 * k + (j & 1)) * 16;
          for (int h = 0; h < 4; ++h)
            for (int b = 0; b < 4; ++b) {
              const int64_t e = e0 + kQuarter[h][b];
              const int8_t want = e < n ? (t == 0 ? q : q2)[size_t(e)] : int8_t(0);
              EXPECT_EQ(both.pair_q_unsigned[size_t((p * 2 + t) * 256 + 64 * h +
                                                    4 * (4 * k + j) + b)],
                        uint8_t(uint8_t(want) ^ 0x80))
                  << e;
            }
        }
}

// Every finite E4M3 scale code (subnormals, negatives, the largest) and every nibble through the
// int8-activation NVFP4 kernels (the stored layout, with a chunk tail, and the 16-row blocks),
// against their scalar model.
TEST(KernelLinear, Int8ActivationNvfp4AllScaleCodes) {
  const int64_t rows = 16, cols = 4096 + 48;
  std::vector<uint8_t> bytes(static_cast<size_t>(rows * cols / 2)),
      scales(static_cast<size_t>(rows * cols / 16));
  std::mt19937 rng(3);
  for (auto& b : bytes) b = uint8_t(rng());
  size_t k = 0;
  for (auto& s : scales) {
    do k = (k + 1) % 256;
    while ((k & 0x7F) == 0x7F);  // NaN codes
    s = uint8_t(k);
  }
  LinearWeight w;
  w.format = WeightFormat::nvfp4;
  w.rows = rows;
  w.cols = cols;
  w.data = bytes.data();
  w.block_scales = scales.data();
  w.global_scale = 0.75f;
  if (!matvec_uses_int8_activation(w)) GTEST_SKIP() << "no int8-activation kernel on this CPU";
  std::vector<uint8_t> repacked(bytes.size() + scales.size());
  kernels::q4_repack_rows16(w, repacked.data());
  const auto x = random_vector(size_t(cols), 11);
  std::vector<float> y(static_cast<size_t>(rows)), ref(y.size()), row(static_cast<size_t>(cols));
  ThreadPool two(2);
  linear_reference_int8_activation(w, x.data(), ref.data());
  for (const LinearWeight& v : {w, kernels::q4_rows16_weight(w, repacked.data())}) {
    if (!matvec_uses_int8_activation(v)) continue;  // no VBMI: no 16-row kernel
    linear_forward(v, x.data(), 1, y.data(), &two, KernelMode::fast);
    for (int64_t r = 0; r < rows; ++r) {
      dequantize_weight_rows(w, r, 1, row.data());
      double mag = 0;
      for (int64_t c = 0; c < cols; ++c) mag += std::fabs(double(row[size_t(c)]) * x[size_t(c)]);
      ASSERT_NEAR(y[size_t(r)], ref[size_t(r)], 4e-6 * mag)
          << weight_format_name(v.format) << " row " << r;
    }
  }
}

// 4-bit weights repacked 16 rows at a time read back as the stored weight: their rows, tiles,
// the exact products and the BF16 prefill (INT4 gathered to the stored layout, FP4 decoded from
// the repacked one) the same bits; the int8-activation products are checked in KernelFormats
// and FewTokensEqualEachTokenAlone.
TEST(KernelLinear, Q4Rows16ReadsAsStored) {
  ThreadPool two(2);
  for (auto [format, rows, cols, group] :
       {std::tuple<WeightFormat, int64_t, int64_t, int>{WeightFormat::nvfp4_rows16, 48, 272, 0},
        {WeightFormat::nvfp4_rows16, 16, 4096 + 48, 0},
        {WeightFormat::mxfp4_rows16, 32, 288, 0},
        {WeightFormat::mxfp4_rows16, 16, 4096 + 96, 0},
        {WeightFormat::int4_row_pairs_rows16, 48, 384, 128},
        {WeightFormat::int4_row_pairs_rows16, 16, 4096 + 64, 32},
        {WeightFormat::int4_packed32_rows16, 32, 256, 16},
        {WeightFormat::int4_packed32_rows16, 16, 4096 + 128, 128}}) {
    const auto stored = make_weight(kernels::q4_rows16_source(format), rows, cols, group);
    const auto packed = make_weight(format, rows, cols, group);
    const LinearWeight &s = stored->w, &p = packed->w;
    const bool int4 = group > 0;
    ASSERT_EQ(p.stored_bytes(), s.stored_bytes());
    ASSERT_EQ(p.data_bytes(), s.data_bytes() + (int4 ? stored->scales.size() * 4
                                                     : stored->block_scales.size()));
    // The view: FP4 as stored, INT4 as int32 words (compared as bytes where stored so).
    std::vector<uint8_t> scratch;
    const LinearWeight v = kernels::q4_rows16_view(p, 0, rows, scratch);
    const auto* vb = static_cast<const uint8_t*>(v.data);
    if (int4) {
      ASSERT_EQ(v.format, WeightFormat::int4_packed32);
      ASSERT_TRUE(std::equal(stored->scales.begin(), stored->scales.end(), v.scales));
      if (s.format == WeightFormat::int4_packed32) {
        ASSERT_TRUE(std::equal(vb, vb + s.data_bytes(), static_cast<const uint8_t*>(s.data)));
      }
    } else {
      ASSERT_TRUE(std::equal(stored->bytes.begin(), stored->bytes.end(), vb));
      ASSERT_TRUE(
          std::equal(stored->block_scales.begin(), stored->block_scales.end(), v.block_scales));
    }
    std::vector<float> a(size_t(rows * cols)), b(a.size());
    dequantize_weight_rows(s, 0, rows, a.data());
    dequantize_weight_rows(p, 0, rows, b.data());
    ASSERT_EQ(a, b);
    const int64_t c0 = std::max(32, group);  // tiles start at a multiple of the block
    kernels::decode_tile(s, 5, rows - 8, c0, cols - 2 * c0, a.data(), cols);
    kernels::decode_tile(p, 5, rows - 8, c0, cols - 2 * c0, b.data(), cols);
    ASSERT_EQ(a, b);
    for (int64_t tokens : {int64_t(1), int64_t(40), int64_t(100)})
      for (KernelMode mode : {KernelMode::exact, KernelMode::fast}) {
        if (mode == KernelMode::fast && kernels::takes_int8_activations(p, tokens, mode)) continue;
        const auto x = random_vector(size_t(tokens * cols), 9);
        std::vector<float> ys(size_t(tokens * rows)), yp(ys.size());
        linear_forward(s, x.data(), tokens, ys.data(), &two, mode);
        linear_forward(p, x.data(), tokens, yp.data(), &two, mode);
        ASSERT_EQ(ys, yp) << weight_format_name(format) << " " << cols << " tokens " << tokens << " "
                          << kernel_mode_name(mode);
      }
  }
}

// The AVX2 int8-activation kernels, called directly so that CPUs with AVX-512 VNNI (where
// linear_forward takes the VNNI ones) test them too: each token within float summation error of
// the int8 reference, a token's result the same bits alone or in a batch of any size (groups of
// 8, 4, 2, 1), whole chunks and tails, every INT4 group size the kernel takes, rows of up to
// 2 KB (one at a time alone) and longer (4 at a time).
TEST(KernelLinear, Int8ActivationAvx2MatchesReference) {
  if (!kernels::cpu_has_avx2()) GTEST_SKIP() << "no AVX2";
  ThreadPool two(2);
  for (const Case& c : {Case{WeightFormat::nvfp4, 70, 256, 0}, Case{WeightFormat::nvfp4, 9, 80, 0},
                        Case{WeightFormat::nvfp4, 13, 4096 + 48, 0},
                        Case{WeightFormat::mxfp4, 65, 256, 0}, Case{WeightFormat::mxfp4, 8, 96, 0},
                        Case{WeightFormat::mxfp4, 6, 32, 0},
                        Case{WeightFormat::mxfp4, 9, 4096 + 64, 0},
                        Case{WeightFormat::int4_packed32, 65, 256, 32},
                        Case{WeightFormat::int4_packed32, 9, 4096 + 64, 32},
                        Case{WeightFormat::int4_packed32, 5, 64, 8},
                        Case{WeightFormat::int4_packed32, 6, 208, 8},
                        Case{WeightFormat::int4_packed32, 7, 336, 16},
                        Case{WeightFormat::int4_packed32, 5, 320, 64},
                        Case{WeightFormat::int4_packed32, 7, 512, 128},
                        Case{WeightFormat::int4_packed32, 9, 768, 256},
                        Case{WeightFormat::int4_row_pairs, 66, 256, 32},
                        Case{WeightFormat::int4_row_pairs, 8, 384, 128},
                        Case{WeightFormat::int4_row_pairs, 10, 64, 64},
                        Case{WeightFormat::int4_row_pairs, 6, 208, 16},
                        Case{WeightFormat::int4_row_pairs, 4, 80, 4},
                        Case{WeightFormat::int4_row_pairs, 6, 240, 8}}) {
    auto t = make_weight(c.format, c.rows, c.cols, c.group);
    const auto product = c.format == WeightFormat::nvfp4   ? kernels::q4::matvec_nvfp4_avx2
                         : c.format == WeightFormat::mxfp4 ? kernels::q4::matvec_mxfp4_avx2
                         : c.format == WeightFormat::int4_packed32
                             ? kernels::q4::matvec_int4_packed32_avx2
                             : kernels::q4::matvec_int4_row_pairs_avx2;
    const int64_t tokens = 15;  // groups of 8, 4, 2 and 1
    const auto x = random_vector(size_t(tokens * c.cols), 9);
    std::vector<float> y(size_t(tokens * c.rows)), one(size_t(c.rows)), ref(size_t(c.rows));
    product(t->w, x.data(), tokens, y.data(), &two);
    for (int64_t k = 0; k < tokens; ++k) {
      const std::vector<float> xk(x.begin() + k * c.cols, x.begin() + (k + 1) * c.cols);
      product(t->w, xk.data(), 1, one.data(), nullptr);
      linear_reference(t->w, xk.data(), 1, ref.data());
      expect_int8_activation_close(t->w, xk, one, ref);
      for (int64_t r = 0; r < c.rows; ++r)
        ASSERT_EQ(y[size_t(k * c.rows + r)], one[size_t(r)])
            << weight_format_name(c.format) << " " << c.cols << " group " << c.group << " token "
            << k << " row " << r;
    }
  }
}

TEST(KernelLinear, DequantizeMatchesFormatsAndStoredBytes) {
  auto t = make_weight(WeightFormat::nvfp4, 4, 64);
  std::vector<float> a(4 * 64), b(4 * 64);
  dequantize_weight_rows(t->w, 0, 4, a.data());
  nvfp4_dequantize(t->bytes.data(), t->block_scales.data(), t->w.global_scale, 4, 64, b.data());
  EXPECT_EQ(a, b);
  EXPECT_EQ(t->w.stored_bytes(), 4u * 32 + 4 * 4 + 4);
}

// The fast mode's SiLU gating (vectorized exp) against the exact one: within 4 ulps (exp within
// 1, then the same division and product) over the range activations take and far beyond,
// vector tails included; the saturated ends: silu(-200) * u is 0 or vanishingly small, silu(g)
// = g for large g.
TEST(KernelOps, SiluMulFastMatchesSiluMul) {
  std::vector<float> g, u;
  for (float v = -120.f; v <= 120.f; v += 0.0371f) g.push_back(v);
  for (float v : {-200.f, -1e30f, 0.f, -0.f, 1e-30f, 95.f, 1e30f}) g.push_back(v);
  std::mt19937 rng(5);
  std::normal_distribution<float> d(0.f, 3.f);
  for (int i = 0; i < 20001; ++i) g.push_back(d(rng));
  for (size_t i = 0; i < g.size(); ++i) u.push_back(0.5f + float(i % 7) * 0.25f);
  std::vector<float> exact = g, fast = g;
  silu_mul(exact.data(), u.data(), int64_t(exact.size()));
  silu_mul_fast(fast.data(), u.data(), int64_t(fast.size()));
  for (size_t i = 0; i < g.size(); ++i) {
    if (std::fabs(exact[i]) < 1e-30f) {
      ASSERT_LT(std::fabs(fast[i]), 1e-30f) << "g " << g[i];
      continue;
    }
    ASSERT_NEAR(fast[i], exact[i], 4 * std::fabs(exact[i]) * 0x1p-23f) << "g " << g[i];
  }
}

// The fast mode's RMSNorm: the same scaling, the sum of squares in another order: within a few
// ulps of rmsnorm, for lengths with and without vector tails; out may alias x.
TEST(KernelOps, RmsNormFastMatchesRmsNorm) {
  for (int64_t n : {1, 15, 64, 2048, 2051}) {
    const auto x = random_vector(size_t(n), uint32_t(n), 2.f);
    const auto w = random_vector(size_t(n), 3);
    std::vector<float> exact(static_cast<size_t>(n)), fast(x);
    rmsnorm(x.data(), w.data(), n, 1e-5f, exact.data());
    rmsnorm_fast(fast.data(), w.data(), n, 1e-5f, fast.data());
    for (int64_t i = 0; i < n; ++i)
      ASSERT_NEAR(fast[size_t(i)], exact[size_t(i)], 8 * std::fabs(exact[size_t(i)]) * 0x1p-23f)
          << "n " << n << " i " << i;
  }
}

TEST(KernelOps, RmsNormRopeSoftmax) {
  const float x[4] = {1, 2, 3, 4}, w[4] = {1, 1, 2, 2};
  float y[4];
  rmsnorm(x, w, 4, 0.f, y);
  const float inv = 1.0f / std::sqrt(30.f / 4);
  EXPECT_FLOAT_EQ(y[0], 1 * inv);
  EXPECT_FLOAT_EQ(y[3], 8 * inv);

  RopeRows rope;
  rope.compute({1.0f, 0.01f}, 1.0f, 0, 8);  // head_dim 4, theta 10000
  float h[4] = {1, 0, 0, 0};  // pairs (0, 2) and (1, 3)
  rope.apply(h, 0);
  EXPECT_FLOAT_EQ(h[0], 1.f);
  rope.apply(h, 1);  // angle 1 rad for i = 0
  EXPECT_NEAR(h[0], std::cos(1.0), 1e-6);
  EXPECT_NEAR(h[2], std::sin(1.0), 1e-6);

  float s[3] = {0.f, std::log(3.f), 0.f};
  softmax(s, 3);
  EXPECT_NEAR(s[1], 0.6, 1e-6);
  EXPECT_NEAR(s[0] + s[1] + s[2], 1.0, 1e-6);
}

}  // namespace
}  // namespace qf

// Frozen-scale quantization against the formats' own quantizers, and the NVFP4 static-block
// export path (zero-block rule, agreement with the dynamic path).
#include "algo/round_to_nearest.h"
#include "algo_test_util.h"
#include "core/error.h"
#include "core/numeric.h"
#include "core/thread_pool.h"
#include "formats/fake_quant.h"
#include "formats/nvfp4.h"

#include <gtest/gtest.h>

#include <random>

namespace qf {
namespace {

TEST(FakeQuantTest, EncodingAgainstRtnScalesReproducesRtn) {
  ThreadPool pool(2);
  const int64_t rows = 10, cols = 128;
  std::vector<float> w = test::random_weights(rows, cols, 12);
  for (int k = 0; k < 32; ++k) w[size_t(3 * cols + k)] = k % 2 ? -0.f : 0.f;  // zero blocks
  for (Format f : {Format::nvfp4, Format::mxfp4, Format::int4, Format::fp8, Format::int8}) {
    RtnOptions o;
    o.format = f;
    if (f == Format::int4) o.block = 32;
    const QuantizedTensor r = quantize_rtn(test::f32_view(w, rows, cols), o, 0.2f, pool);
    QuantizedTensor q = r;
    q.codes.clear();
    encode_with_scales(q, w.data(), pool);
    EXPECT_EQ(q.codes, r.codes) << format_info(f).name;
    std::vector<float> fake(w.size()), deq(w.size());
    fake_quantize_with_scales(q, w.data(), fake.data(), pool);
    dequantize(r, deq.data());
    EXPECT_EQ(fake, deq) << format_info(f).name;
  }
}

TEST(FakeQuantTest, StaticBlockZeroRule) {
  // Zero blocks get e4m3(min(2688 / global_amax, 448)), not 1.0.
  EXPECT_EQ(nvfp4_static_block_scale(0.f, 2688.f), 0x38);  // 1.0
  EXPECT_EQ(nvfp4_static_block_scale(0.f, 1.f), 0x7E);     // 448
  EXPECT_EQ(e4m3_to_f32(nvfp4_static_block_scale(0.f, 21.f)), 128.f);  // 2688/21 = 128
  EXPECT_EQ(nvfp4_dynamic_block_scale(0.f, 1.f), 0x38);
}

TEST(FakeQuantTest, StaticBlockScaleNormalisedTo256) {
  // Four Over Six (specs moe-hybrid §1.3): codes relative to 256, weight_scale_2 = amax / 1536.
  EXPECT_EQ(nvfp4_static_block_scale(1536.f, 1536.f, 256.f), 0x78);  // 256
  EXPECT_EQ(nvfp4_static_block_scale(2304.f, 1536.f, 256.f), 0x7C);  // 1.5 * 256 = 384
  EXPECT_EQ(nvfp4_static_block_scale(0.f, 1536.f, 256.f), 0x38);     // 256 * 6 / 1536 = 1.0
  EXPECT_EQ(nvfp4_static_block_scale(0.f, 1.f, 256.f), 0x7E);        // clamped to 448
  EXPECT_EQ(nvfp4_static_block_scale(2688.f, 2688.f), nvfp4_static_block_scale(2688.f, 2688.f, 448.f));
  EXPECT_EQ(nvfp4_global_scale(1536.f, 256.f), 1.0f);
  EXPECT_EQ(nvfp4_global_scale(3.f, 256.f), div_by_constant(3.f, 1536.f));
  EXPECT_EQ(nvfp4_global_scale(0.f, 256.f), 1.0f);
  // nvfp4_static_scales with 448 is the format row's scales_from_amax.
  std::vector<float> bamax = {0.f, 1.f, 2.5f, 3.f, 0.125f, 3.f, 1e-6f, 2.f};
  const QuantizedTensor a = nvfp4_static_scales(2, 64, bamax.data(), 3.f);
  const QuantizedTensor b = scales_from_amax(Format::nvfp4, 2, 64, 0, bamax.data(), 3.f);
  EXPECT_EQ(a.block_scales, b.block_scales);
  EXPECT_EQ(a.global_scale, b.global_scale);
  EXPECT_EQ(a.block, b.block);
  EXPECT_EQ(a.scale_dtype, b.scale_dtype);
  EXPECT_THROW(nvfp4_static_scales(2, 64, bamax.data(), 0.f, 256.f), Error);
  EXPECT_THROW(nvfp4_static_scales(2, 40, bamax.data(), 1.f, 256.f), Error);
}

TEST(FakeQuantTest, StaticExportEqualsDynamicWhenScalesAreExact) {
  // Global amax 2688 (g = 1) and block amaxes 6 * v with v an E4M3 value: both paths give s8 = v
  // and the same nibbles.
  ThreadPool pool(1);
  const int64_t rows = 4, cols = 64;
  std::mt19937 rng(2);
  std::uniform_int_distribution<int> code(1, 126);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<float> w(size_t(rows * cols)), bamax(size_t(rows * cols / 16));
  for (size_t b = 0; b < bamax.size(); ++b) {
    const float v = b == 0 ? 448.f : e4m3_to_f32(uint8_t(code(rng)));
    for (int k = 0; k < 16; ++k) w[b * 16 + k] = u(rng) * 6.f * v;
    w[b * 16 + 5] = -6.f * v;
    bamax[b] = 6.f * v;
  }
  const QuantizedTensor s = nvfp4_static_quantize(w.data(), rows, cols, bamax.data(), 2688.f, pool);
  const QuantizedTensor d = quantize_rtn(test::f32_view(w, rows, cols), RtnOptions{}, 2688.f, pool);
  EXPECT_EQ(s.block_scales, d.block_scales);
  EXPECT_EQ(s.codes, d.codes);
  EXPECT_EQ(s.global_scale, d.global_scale);
}

TEST(FakeQuantTest, StaticExportNearDynamicOnRandomWeights) {
  // In general the two paths round s differently ((bamax/6*448)/(A/6) vs bamax/(6*A/2688)), so
  // they agree on almost every block and differ by one E4M3 step at most elsewhere.
  ThreadPool pool(2);
  const int64_t rows = 64, cols = 256;
  const std::vector<float> w = test::random_weights(rows, cols, 13);
  float amax = 0.f;
  std::vector<float> bamax(size_t(rows * cols / 16), 0.f);
  for (size_t i = 0; i < w.size(); ++i) {
    bamax[i / 16] = std::max(bamax[i / 16], std::fabs(w[i]));
    amax = std::max(amax, std::fabs(w[i]));
  }
  const QuantizedTensor s = nvfp4_static_quantize(w.data(), rows, cols, bamax.data(), amax, pool);
  const QuantizedTensor d = quantize_rtn(test::f32_view(w, rows, cols), RtnOptions{}, amax, pool);
  int64_t differ = 0;
  for (size_t b = 0; b < bamax.size(); ++b) {
    EXPECT_LE(std::abs(int(s.block_scales[b]) - int(d.block_scales[b])), 1);
    differ += s.block_scales[b] != d.block_scales[b];
  }
  EXPECT_LT(differ, int64_t(bamax.size()) / 100);
}

TEST(FakeQuantTest, ScalesFromAmaxMatchTheQuantizers) {
  ThreadPool pool(1);
  const int64_t rows = 6, cols = 64;
  const std::vector<float> w = test::random_weights(rows, cols, 14);
  for (Format f : {Format::mxfp4, Format::int4, Format::fp8, Format::int8}) {
    RtnOptions o;
    o.format = f;
    o.block = f == Format::int4 ? 32 : 0;
    o.scale_dtype = DType::BF16;
    const QuantizedTensor r = quantize_rtn(test::f32_view(w, rows, cols), o, 0.f, pool);
    const int64_t span = f == Format::fp8 || f == Format::int8 ? cols : r.block;
    std::vector<float> amax(size_t(rows * cols / span), 0.f);
    for (size_t i = 0; i < w.size(); ++i) amax[i / size_t(span)] = std::max(amax[i / size_t(span)], std::fabs(w[i]));
    QuantizedTensor q = scales_from_amax(f, rows, cols, o.block, amax.data(), 0.f, DType::BF16);
    encode_with_scales(q, w.data(), pool);
    EXPECT_EQ(q.codes, r.codes) << format_info(f).name;
    EXPECT_EQ(q.scales, r.scales);
    EXPECT_EQ(q.block_scales, r.block_scales);
  }
}

}  // namespace
}  // namespace qf

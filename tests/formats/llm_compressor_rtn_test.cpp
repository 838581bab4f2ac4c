// llm-compressor's NVFP4 rounding (the compressed-tensors target's): bytes checked against
// golden values that compressed-tensors 0.19 itself produced (generate_gparam, calculate_qparams,
// quantize, pack_fp4_to_uint8 on the CPU) for the matrix below, in F32 and BF16.
#include "core/error.h"
#include "core/thread_pool.h"
#include "formats/llm_compressor_rtn.h"
#include "formats/nvfp4.h"
#include "formats/quantized_tensor.h"
#include "formats_test_util.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <cstring>
#include <vector>

namespace qf {
namespace {

// 4 x 32: blocks of growing magnitude, block 1 all zero, block 3 tiny (scale far below 448).
const std::vector<float> kWeights = {
    0x1.2e9cccp-2f, 0x1.d18f6p-1f, -0x1.0f46aap-1f, -0x1.8ba7bap-1f, 0x1.753b6cp-1f, 0x1.2b7a3ep-1f,
    -0x1.c26784p-1f, -0x1.6ed396p-2f, 0x1.f1ab08p-1f, 0x1.b95c42p-4f, -0x1.ffe26p-1f, 0x1.32f2b6p-3f,
    0x1.ec1c3ep-1f, -0x1.9718ecp-2f, -0x1.b7a872p-1f, 0x1.3cd7fp-1f, 0x0p+0f, 0x0p+0f,
    0x0p+0f, 0x0p+0f, 0x0p+0f, 0x0p+0f, 0x0p+0f, 0x0p+0f,
    0x0p+0f, 0x0p+0f, 0x0p+0f, 0x0p+0f, 0x0p+0f, 0x0p+0f,
    0x0p+0f, 0x0p+0f, -0x1.44388ap+2f, -0x1.8f8402p-1f, 0x1.5116f4p+2f, -0x1.27662p-1f,
    -0x1.479314p+2f, 0x1.e5595p+0f, 0x1.284ea8p+2f, -0x1.8b627cp+1f, -0x1.eaba74p+1f, 0x1.04eb86p+2f,
    0x1.64418p+1f, -0x1.32d252p+2f, -0x1.8c40e2p+0f, 0x1.4c596p+2f, 0x1.ad7626p-3f, -0x1.4fceb8p+2f,
    0x1.b1e3a2p-6f, 0x1.d64248p-4f, -0x1.cb4e3ep-5f, -0x1.9b1474p-4f, 0x1.4f9566p-4f, 0x1.449a8cp-4f,
    -0x1.a33afcp-4f, -0x1.b1252cp-5f, 0x1.db09eep-4f, 0x1.78a434p-6f, -0x1.f34d8ap-4f, 0x1.140932p-7f,
    0x1.ea6956p-4f, -0x1.41c19ap-5f, -0x1.c0f476p-4f, 0x1.1491ap-4f, 0x1.708a6cp+3f, -0x1.6cd73ap+3f,
    -0x1.128676p+3f, 0x1.b39538p+3f, 0x1.448f86p+2f, -0x1.dd6696p+3f, -0x1.3a134cp+0f, 0x1.e7847ap+3f,
    -0x1.59794ap+1f, -0x1.d142e2p+3f, 0x1.9c85b6p+2f, 0x1.9c1c2ap+3f, -0x1.387516p+3f, -0x1.4b97dep+3f,
    0x1.8de7c2p+3f, 0x1.ca1d6p+2f, -0x1.5abca4p+4f, -0x1.51de94p+2f, 0x1.7080dp+4f, -0x1.4fbd48p-1f,
    -0x1.6dccbp+4f, 0x1.a3047ap+2f, 0x1.52ce36p+4f, -0x1.801f24p+3f, -0x1.215044p+4f, 0x1.0a9d1ep+4f,
    0x1.b93862p+3f, -0x1.437668p+4f, -0x1.1283c8p+3f, 0x1.66d50ep+4f, 0x1.66527ap+1f, -0x1.725fccp+4f,
    0x1.243376p+2f, 0x1.01ab5cp+5f, -0x1.9bb1dcp+3f, -0x1.ce4b4ap+4f, 0x1.44f9b8p+4f, 0x1.7a8d3p+4f,
    -0x1.a68626p+4f, -0x1.0dabf6p+4f, 0x1.ec03f6p+4f, 0x1.1dc4fep+3f, -0x1.086aeap+5f, -0x1.a705c8p-2f,
    0x1.0944fp+5f, -0x1.04355cp+3f, -0x1.f1031ap+4f, 0x1.022dc4p+4f, 0x1.2a4aa6p+5f, -0x1.ff8792p+4f,
    -0x1.d0c486p+4f, 0x1.3ba5c4p+5f, 0x1.2e1702p+4f, -0x1.6291f6p+5f, -0x1.dd68b2p+2f, 0x1.71f2b2p+5f,
    -0x1.1d3e4ap+2f, -0x1.68c29p+5f, 0x1.013d16p+4f, 0x1.479dc2p+5f, -0x1.aa15b6p+4f, -0x1.10b7b2p+5f,
    0x1.1b5198p+5f, 0x1.8f6b3ep+4f};

const std::vector<uint8_t> kPacked = {
    0x73, 0xed, 0x56, 0xcf, 0x17, 0x2f, 0xc7, 0x6e, 0x0, 0x0, 0x0, 0x0,
    0x0, 0x0, 0x0, 0x0, 0xaf, 0x97, 0x4f, 0xd7, 0x6e, 0xf5, 0x7b, 0xf0,
    0x73, 0xfd, 0x66, 0xdf, 0x27, 0x1f, 0xc7, 0x5f, 0xe6, 0x7d, 0xf4, 0x79,
    0xfa, 0x75, 0xee, 0x57, 0xbf, 0x87, 0x3f, 0xd7, 0x6e, 0xf6, 0x7c, 0xf1,
    0x72, 0xfc, 0x66, 0xde, 0x37, 0x8f, 0xb7, 0x5f, 0xe6, 0x7e, 0xf4, 0x7a,
    0xf9, 0x74, 0xed, 0x56};
// Block 1 (all zero) gets compressed-tensors' eps 0.125 (0x20), where ModelOpt's rule gives 1.0.
const std::vector<uint8_t> kScales = {0x52, 0x20, 0x65, 0x39, 0x71, 0x76, 0x7a, 0x7e};

QuantizedTensor quantize(DType dtype) {
  test::Matrix m{dtype, 4, 32, {}};
  m.bytes.resize(kWeights.size() * dtype_size(dtype));
  convert_from_f32(dtype, kWeights.data(), m.bytes.data(), kWeights.size());
  float amax = 0.f;
  std::vector<float> back(kWeights.size());
  convert_to_f32(dtype, m.bytes.data(), back.data(), back.size());
  for (float v : back) amax = std::max(amax, std::fabs(v));
  QuantizedTensor q;
  q.rows = 4;
  q.cols = 32;
  q.block = kNvfp4Block;
  ThreadPool pool(2);
  nvfp4_quantize_llm_compressor(m.view(), amax, q, pool);
  return q;
}

TEST(LlmCompressorNvfp4, MatchesCompressedTensorsF32) {
  const QuantizedTensor q = quantize(DType::F32);
  EXPECT_EQ(std::bit_cast<uint32_t>(q.global_scale_reciprocal), 1114145314u);  // 58.127083
  EXPECT_EQ(q.global_scale, 1.0f / q.global_scale_reciprocal);
  EXPECT_EQ(q.block_scales, kScales);
  EXPECT_EQ(q.codes, kPacked);
}

TEST(LlmCompressorNvfp4, MatchesCompressedTensorsBf16) {
  // The global scale is computed in BF16 (58.0, not 58.127), the codes in float32.
  const QuantizedTensor q = quantize(DType::BF16);
  EXPECT_EQ(q.global_scale_reciprocal, 58.0f);
  EXPECT_EQ(q.block_scales, kScales);
  EXPECT_EQ(q.codes, kPacked);
}

TEST(LlmCompressorNvfp4, GlobalScaleEdgeCases) {
  EXPECT_EQ(nvfp4_llm_compressor_global(0.f, DType::F32), 1.0f);   // nan_to_num of 2688 / tiny
  EXPECT_EQ(nvfp4_llm_compressor_global(0.f, DType::BF16), 1.0f);
  EXPECT_EQ(nvfp4_llm_compressor_global(2688.f, DType::F32), 1.0f);
  EXPECT_THROW(nvfp4_llm_compressor_global(-1.f, DType::F32), Error);
  EXPECT_THROW(nvfp4_llm_compressor_global(std::numeric_limits<float>::infinity(), DType::F32), Error);
}

}  // namespace
}  // namespace qf

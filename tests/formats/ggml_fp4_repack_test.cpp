// Repacking qforge's NVFP4 / MXFP4 tensors into ggml blocks: lossless both ways, and ggml's
// decoder gives qforge's values exactly (times weight_scale_2 for NVFP4, the `.scale` sidecar).
#include "formats/ggml_fp4_repack.h"

#include "core/error.h"
#include "core/numeric.h"
#include "formats/ggml_quants.h"
#include "formats/mxfp4.h"
#include "formats/nvfp4.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

namespace qf {
namespace {

std::vector<float> random_matrix(int64_t rows, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.f, 0.02f);
  std::vector<float> w(size_t(rows * cols));
  for (float& x : w) x = dist(rng);
  for (int64_t c = 0; c < cols; ++c) w[size_t(c)] = 0.f;  // an all-zero row
  return w;
}

TEST(GgmlNvfp4Repack, RoundTripAndGgmlDecodeEqualsQforgeDecode) {
  const int64_t rows = 5, cols = 192;
  const auto w = random_matrix(rows, cols, 1);
  const float g = nvfp4_global_scale(0.1f);
  std::vector<uint8_t> packed(size_t(rows * cols / 2)), scales(size_t(rows * cols / 16));
  nvfp4_quantize_reference({w.data(), DType::F32, rows, cols, nullptr}, g, packed.data(),
                           scales.data());
  std::vector<uint8_t> blocks(size_t(rows * cols / 64 * 36));
  nvfp4_to_ggml(packed.data(), scales.data(), rows, cols, blocks.data());

  std::vector<uint8_t> packed2(packed.size(), 0xAA), scales2(scales.size(), 0xAA);
  ggml_to_nvfp4(blocks.data(), rows, cols, packed2.data(), scales2.data());
  EXPECT_EQ(packed2, packed);
  EXPECT_EQ(scales2, scales);

  std::vector<float> ours(w.size()), theirs(w.size());
  nvfp4_dequantize(packed.data(), scales.data(), g, rows, cols, ours.data());
  ggml_dequantize_nvfp4(blocks.data(), theirs.data(), int64_t(w.size()));
  for (size_t i = 0; i < w.size(); ++i)
    ASSERT_EQ(f32_bits(theirs[i] * g) & 0x7FFFFFFFu, f32_bits(ours[i]) & 0x7FFFFFFFu) << i;
}

TEST(GgmlNvfp4Repack, NibbleOrderIsSplitHalvesPerSixteen) {
  // Element k of the row has code k % 16 (pairs packed), scale 0x38 (1.0) everywhere.
  std::vector<uint8_t> packed(32), scales(4, 0x38), blocks(36);
  for (int k = 0; k < 64; k += 2) packed[size_t(k / 2)] = uint8_t((k % 16) | (((k + 1) % 16) << 4));
  nvfp4_to_ggml(packed.data(), scales.data(), 1, 64, blocks.data());
  for (int s = 0; s < 4; ++s) {
    EXPECT_EQ(blocks[size_t(s)], 0x38);
    for (int j = 0; j < 8; ++j) EXPECT_EQ(blocks[size_t(4 + 8 * s + j)], j | ((j + 8) << 4));
  }
}

TEST(GgmlNvfp4Repack, RefusesScalesGgmlCannotHoldAndBadShapes) {
  std::vector<uint8_t> packed(32), scales(4, 0x38), blocks(36);
  scales[2] = 0xB8;  // -1.0
  EXPECT_THROW(nvfp4_to_ggml(packed.data(), scales.data(), 1, 64, blocks.data()), Error);
  scales[2] = 0x7F;  // NaN
  EXPECT_THROW(nvfp4_to_ggml(packed.data(), scales.data(), 1, 64, blocks.data()), Error);
  EXPECT_THROW(nvfp4_to_ggml(packed.data(), scales.data(), 1, 48, blocks.data()), Error);
}

TEST(GgmlMxfp4Repack, RoundTripAndGgmlDecodeEqualsQforgeDecode) {
  const int64_t rows = 3, cols = 96;
  const auto w = random_matrix(rows, cols, 2);
  std::vector<uint8_t> packed(size_t(rows * cols / 2)), scales(size_t(rows * cols / 32));
  mxfp4_quantize_reference({w.data(), DType::F32, rows, cols, nullptr}, packed.data(),
                           scales.data());
  std::vector<uint8_t> blocks(size_t(rows * cols / 32 * 17));
  mxfp4_to_ggml(packed.data(), scales.data(), rows, cols, blocks.data());
  std::vector<uint8_t> packed2(packed.size()), scales2(scales.size());
  ggml_to_mxfp4(blocks.data(), rows, cols, packed2.data(), scales2.data());
  EXPECT_EQ(packed2, packed);
  EXPECT_EQ(scales2, scales);
  std::vector<float> theirs(w.size());
  ggml_dequantize_mxfp4(blocks.data(), theirs.data(), int64_t(w.size()));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const uint8_t code = uint8_t((packed[size_t(r * cols / 2 + c / 2)] >> (4 * (c % 2))) & 0xF);
      const float want = e2m1_to_f32(code) * e8m0_to_f32(scales[size_t(r * cols / 32 + c / 32)]);
      ASSERT_EQ(theirs[size_t(r * cols + c)], want) << r << "," << c;
    }
  scales[1] = 0xFF;
  EXPECT_THROW(mxfp4_to_ggml(packed.data(), scales.data(), rows, cols, blocks.data()), Error);
}

}  // namespace
}  // namespace qf

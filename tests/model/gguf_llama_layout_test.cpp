// The q/k row reorder for llama.cpp: it is a permutation (undone exactly), and a permuted q_proj
// rotated with llama.cpp's interleaved-pair RoPE gives Hugging Face's rotate-half result, in
// llama.cpp's row order.
#include "model/gguf_llama_layout.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

namespace qf {
namespace {

std::vector<float> random_rows(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d;
  std::vector<float> x(static_cast<size_t>(n));
  for (float& v : x) v = d(rng);
  return x;
}

TEST(GgufLlamaLayout, PermuteThenUnpermuteIsIdentity) {
  const int64_t heads = 3, head_dim = 8, cols = 5;
  const std::vector<float> w = random_rows(heads * head_dim * cols, 1);
  std::vector<float> p = w;
  gguf_permute_qk_rows(p.data(), heads, head_dim, cols);
  EXPECT_NE(p, w);
  gguf_unpermute_qk_rows(p.data(), heads, head_dim, cols);
  EXPECT_EQ(p, w);
}

// q = W x per head, rotated at `pos`: rotate-half pairs (i, i + d/2) (transformers), or
// adjacent pairs (2i, 2i + 1) (llama.cpp's LLAMA_ROPE_TYPE_NORM); both use theta^(-2i/d).
std::vector<double> rotated(const std::vector<float>& w, const std::vector<float>& x,
                            int64_t heads, int64_t d, int64_t pos, bool interleaved) {
  const int64_t cols = int64_t(x.size());
  std::vector<double> q(size_t(heads * d));
  for (int64_t r = 0; r < heads * d; ++r)
    for (int64_t c = 0; c < cols; ++c) q[size_t(r)] += double(w[size_t(r * cols + c)]) * x[size_t(c)];
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t i = 0; i < d / 2; ++i) {
      const double a = double(pos) * std::pow(10000.0, -2.0 * double(i) / double(d));
      const size_t i0 = size_t(h * d + (interleaved ? 2 * i : i));
      const size_t i1 = size_t(h * d + (interleaved ? 2 * i + 1 : i + d / 2));
      const double x0 = q[i0], x1 = q[i1];
      q[i0] = x0 * std::cos(a) - x1 * std::sin(a);
      q[i1] = x0 * std::sin(a) + x1 * std::cos(a);
    }
  return q;
}

TEST(GgufLlamaLayout, PermutedWeightsWithInterleavedRopeMatchRotateHalf) {
  const int64_t heads = 2, d = 8, cols = 6;
  const std::vector<float> w = random_rows(heads * d * cols, 2), x = random_rows(cols, 3);
  std::vector<float> wp = w;
  gguf_permute_qk_rows(wp.data(), heads, d, cols);
  for (int64_t pos : {0, 1, 7, 100}) {
    const std::vector<double> hf = rotated(w, x, heads, d, pos, /*interleaved=*/false);
    const std::vector<double> ll = rotated(wp, x, heads, d, pos, /*interleaved=*/true);
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t i = 0; i < d / 2; ++i)
        for (int64_t j = 0; j < 2; ++j)
          EXPECT_NEAR(ll[size_t(h * d + 2 * i + j)], hf[size_t(h * d + j * d / 2 + i)], 1e-9)
              << "pos " << pos << " head " << h << " pair " << i;
    // Scores q.k are what attention sees: the same under one permutation of q and k.
  }
}

}  // namespace
}  // namespace qf

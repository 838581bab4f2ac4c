// FakeQuantSte: the forward against the formats' own quantize + dequantize (bit for bit), the
// straight-through and LSQ gradients against finite differences of the STE surrogate, and a
// small rounding-offset tuning run on a Linear of the llama_v5 conformance model.
#include "algo/round_to_nearest.h"
#include "core/numeric.h"
#include "core/thread_pool.h"
#include "formats/fake_quant.h"
#include "io/safetensors.h"
#include "train/fake_quant_ste.h"
#include "train/quant_test_weights.h"
#include "train/linear_grad.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>

namespace qf {
namespace {

using test::random_weights;
using test::rtn;

// The code range the test expects, written out rather than read from the code under test.
std::pair<float, float> code_range(Format f) {
  switch (f) {
    case Format::nvfp4: return {-6.f, 6.f};
    case Format::fp8: return {-448.f, 448.f};
    case Format::int4: return {-8.f, 7.f};
    default: return {0.f, 0.f};
  }
}

TEST(FakeQuantSte, ForwardIsTheFormatsQuantizeDequantizeBitForBit) {
  std::mt19937 rng(1);
  const int64_t rows = 24, cols = 128;
  const std::vector<float> w = random_weights(rng, rows, cols);
  ThreadPool pool(1);
  struct Case {
    Format f;
    int block;
  };
  for (const Case c : {Case{Format::nvfp4, 0}, Case{Format::fp8, 0}, Case{Format::int4, 32},
                       Case{Format::int4, 0}, Case{Format::mxfp4, 0}}) {
    SCOPED_TRACE(std::string(format_info(c.f).name));
    const QuantizedTensor q = rtn(w, rows, cols, c.f, c.block);
    std::vector<float> ref(w.size()), got(w.size()), got_v(w.size());
    dequantize(q, ref.data());  // the reference: quantize_rtn's codes, the format's dequantizer
    const FakeQuantSte ste(q);
    ste.forward(w.data(), nullptr, got.data());
    const std::vector<float> zero(w.size(), 0.f);
    ste.forward(w.data(), zero.data(), got_v.data());
    EXPECT_EQ(0, std::memcmp(ref.data(), got.data(), w.size() * 4));
    EXPECT_EQ(0, std::memcmp(ref.data(), got_v.data(), w.size() * 4));
  }
  // FP8 with one scale for the whole tensor (per-tensor FP8): the rows' scales all equal,
  // against the frozen-scale fake quantizer of formats/.
  QuantizedTensor q = rtn(w, rows, cols, Format::fp8);
  const float amax = *std::max_element(w.begin(), w.end(), [](float a, float b) {
    return std::fabs(a) < std::fabs(b);
  });
  std::fill(q.scales.begin(), q.scales.end(), fp8_scale_from_amax(std::fabs(amax), DType::F32));
  std::vector<float> ref(w.size()), got(w.size());
  fake_quantize_with_scales(q, w.data(), ref.data(), pool);
  FakeQuantSte(q).forward(w.data(), nullptr, got.data());
  EXPECT_EQ(0, std::memcmp(ref.data(), got.data(), w.size() * 4));
}

// Shrinks the scales so that a good share of the elements clips.
void shrink_scales(QuantizedTensor& q, float factor) {
  for (uint8_t& s : q.block_scales) s = f32_to_e4m3(e4m3_to_f32(s) * factor);
  for (float& s : q.scales) s *= factor;
}

TEST(FakeQuantSte, WeightAndOffsetGradientsPassInRangeAndStopAtTheClip) {
  std::mt19937 rng(2);
  const int64_t rows = 16, cols = 64;
  const std::vector<float> w = random_weights(rng, rows, cols);
  std::normal_distribution<float> n(0.f, 1.f);
  std::uniform_real_distribution<float> u(-0.5f, 0.5f);
  std::vector<float> g(w.size()), v(w.size());
  for (float& x : g) x = n(rng);
  for (float& x : v) x = u(rng);
  for (const Format f : {Format::nvfp4, Format::fp8, Format::int4}) {
    SCOPED_TRACE(std::string(format_info(f).name));
    QuantizedTensor q = rtn(w, rows, cols, f, f == Format::int4 ? 32 : 0);
    shrink_scales(q, 0.6f);
    const FakeQuantSte ste(q);
    const auto [lo, hi] = code_range(f);
    EXPECT_EQ(lo, ste.code_lo());
    EXPECT_EQ(hi, ste.code_hi());
    FakeQuantGrads gr;
    ste.backward(w.data(), v.data(), g.data(), gr);
    FakeQuantGrads gr0;
    ste.backward(w.data(), nullptr, g.data(), gr0);
    EXPECT_TRUE(gr0.v.empty());
    const int64_t span = cols / (ste.scale_count() / rows);
    int64_t clipped = 0, clipped0 = 0;
    for (size_t i = 0; i < w.size(); ++i) {
      const float d = ste.divisors()[i / size_t(span)];
      const float y = (w[i] + v[i] * d) / d;
      const bool in = y >= lo && y <= hi;
      clipped += !in;
      EXPECT_EQ(gr.w[i], in ? g[i] : 0.f) << i;
      EXPECT_EQ(gr.v[i], in ? g[i] * d : 0.f) << i;
      const bool in0 = w[i] / d >= lo && w[i] / d <= hi;
      clipped0 += !in0;
      EXPECT_EQ(gr0.w[i], in0 ? g[i] : 0.f) << i;
    }
    // Both cases occur (otherwise the mask would go untested).
    EXPECT_GT(clipped, int64_t(w.size()) / 50);
    EXPECT_LT(clipped, int64_t(w.size()) / 2);
    EXPECT_GT(clipped0, 0);
  }
}

// The STE surrogate of Ŵ as a function of the scales, in double: rounding passed straight
// through (the offset r_i = q_i − y_i frozen at the original scales) and the clamp kept, so
//   Ŵ_i(d) = d · (clamp(W_i/d + V_i, lo, hi) + r_i).
// Its derivative in d is LSQ's (q_i − x_i in range, q_i at the clip), and differs from the
// derivative with the codes held fixed (q_i everywhere) by Σ g_i x_i over the in-range elements,
// which the test also requires to be large, so the check cannot pass by accident.
TEST(FakeQuantSte, ScaleGradientMatchesFiniteDifferenceOfTheSteSurrogate) {
  std::mt19937 rng(3);
  const int64_t rows = 8, cols = 64;
  const std::vector<float> w = random_weights(rng, rows, cols);
  std::normal_distribution<float> n(0.f, 0.02f);
  std::uniform_real_distribution<float> u(-0.5f, 0.5f);
  std::vector<float> target(w.size()), v(w.size());
  for (float& x : target) x = n(rng);
  for (float& x : v) x = u(rng);
  for (const Format f : {Format::nvfp4, Format::fp8, Format::int4}) {
    SCOPED_TRACE(std::string(format_info(f).name));
    QuantizedTensor q = rtn(w, rows, cols, f, f == Format::int4 ? 32 : 0);
    shrink_scales(q, 0.7f);
    const FakeQuantSte ste(q);
    const auto [lo, hi] = code_range(f);
    const int64_t span = cols / (ste.scale_count() / rows);
    std::vector<float> w_hat(w.size());
    ste.forward(w.data(), v.data(), w_hat.data());
    // L = ½ Σ (Ŵ − t)², g = Ŵ − t.
    std::vector<float> g(w.size());
    for (size_t i = 0; i < w.size(); ++i) g[i] = w_hat[i] - target[i];
    FakeQuantGrads gr;
    ste.backward(w.data(), v.data(), g.data(), gr);

    const std::vector<float>& d0 = ste.divisors();
    std::vector<double> r(w.size());
    for (size_t i = 0; i < w.size(); ++i) {
      const double d = d0[i / size_t(span)];
      const double y = (double(w[i]) + double(v[i]) * d) / d;
      r[i] = double(w_hat[i]) / d - std::clamp(y, double(lo), double(hi));
    }
    auto loss = [&](size_t j, double d) {
      double l = 0;
      for (size_t i = j * size_t(span); i < (j + 1) * size_t(span); ++i) {
        const double y = std::clamp(double(w[i]) / d + double(v[i]), double(lo), double(hi));
        const double e = d * (y + r[i]) - double(target[i]);
        l += 0.5 * e * e;
      }
      return l;
    };
    double worst = 0, largest = 0, naive_gap = 0;
    for (size_t j = 0; j < d0.size(); ++j) {
      const double d = d0[j], h = 1e-4 * d;
      const double fd = (loss(j, d + h) - loss(j, d - h)) / (2 * h);
      worst = std::max(worst, std::fabs(fd - double(gr.scale[j])));
      largest = std::max(largest, std::fabs(fd));
      double naive = 0;  // d/dd of Σ ½(d·q − t)² with the codes held fixed
      for (size_t i = j * size_t(span); i < (j + 1) * size_t(span); ++i)
        naive += double(g[i]) * double(w_hat[i]) / d;
      naive_gap = std::max(naive_gap, std::fabs(naive - fd));
    }
    EXPECT_LT(worst, 1e-3 * largest);
    EXPECT_GT(naive_gap, 0.1 * largest);

    if (f == Format::nvfp4) {
      // weight_scale_2: every d_j = e4m3_j · g moves together.
      auto total = [&](double gs) {
        double l = 0;
        for (size_t j = 0; j < d0.size(); ++j) l += loss(j, e4m3_to_f32(q.block_scales[j]) * gs);
        return l;
      };
      const double g0 = q.global_scale, h = 1e-4 * g0;
      const double fd = (total(g0 + h) - total(g0 - h)) / (2 * h);
      EXPECT_NEAR(gr.tensor_scale, fd, 1e-3 * std::fabs(fd));
    }
  }
}

// One Linear of llama_v5 in NVFP4: signed gradient descent on the rounding offsets V (SignRound)
// lowers ||X Ŵᵀ − X Wᵀ||² below round-to-nearest's, on the calibration X and on held-out X.
TEST(FakeQuantSte, RoundingOffsetsBeatRoundToNearestOnALlamaLinear) {
  const auto path = std::filesystem::path(QFORGE_SOURCE_DIR) /
                    "tests/data/conformance/llama_v5/model.safetensors";
  const SafetensorsFile file = SafetensorsFile::open(path);
  const SafetensorsEntry* e = file.find("model.layers.0.mlp.down_proj.weight");
  ASSERT_NE(e, nullptr);
  const TensorView view = file.view(*e);
  const int64_t out = view.shape[0], in = view.shape[1];
  std::vector<float> w(size_t(out * in));
  for (size_t i = 0; i < w.size(); ++i) {
    uint16_t h;
    std::memcpy(&h, view.data + 2 * i, 2);
    w[i] = bf16_to_f32(h);
  }
  const QuantizedTensor q = rtn(w, out, in, Format::nvfp4);
  const FakeQuantSte ste(q);

  std::mt19937 rng(4);
  std::normal_distribution<float> n(0.f, 1.f);
  const int64_t rows_x = 4 * in;
  std::vector<float> x(size_t(rows_x * in)), x_test(x.size());
  // Correlated inputs, X = Z·M with M = I + a random [in, in] mix: with white X the loss is
  // the elementwise error, which round-to-nearest already minimises; real activations are not
  // white, and there the choice of rounding direction lets errors cancel across a row.
  std::vector<float> mix(size_t(in * in));
  for (int64_t i = 0; i < in; ++i)
    for (int64_t k = 0; k < in; ++k)
      mix[size_t(i * in + k)] = (i == k ? 1.f : 0.f) + 0.3f * n(rng);
  for (std::vector<float>* xs : {&x, &x_test}) {
    std::vector<float> z(xs->size());
    for (float& a : z) a = n(rng);
    for (int64_t r = 0; r < rows_x; ++r)
      for (int64_t k = 0; k < in; ++k) {
        float s = 0;
        for (int64_t i = 0; i < in; ++i) s += z[size_t(r * in + i)] * mix[size_t(i * in + k)];
        (*xs)[size_t(r * in + k)] = s;
      }
  }
  std::vector<float> y(size_t(rows_x * out)), y_test(y.size()), y_hat(y.size());
  linear_forward<float>(x.data(), w.data(), nullptr, rows_x, in, out, y.data());
  linear_forward<float>(x_test.data(), w.data(), nullptr, rows_x, in, out, y_test.data());

  std::vector<float> w_hat(w.size());
  auto error = [&](const std::vector<float>& xs, const std::vector<float>& ys,
                   const std::vector<float>* v) {
    ste.forward(w.data(), v ? v->data() : nullptr, w_hat.data());
    linear_forward<float>(xs.data(), w_hat.data(), nullptr, rows_x, in, out, y_hat.data());
    double s = 0;
    for (size_t i = 0; i < ys.size(); ++i) s += double(y_hat[i] - ys[i]) * (y_hat[i] - ys[i]);
    return s;
  };
  const double rtn_err = error(x, y, nullptr), rtn_test = error(x_test, y_test, nullptr);

  std::vector<float> v(w.size(), 0.f), best = v, dy(y.size()), dw(w.size());
  double best_err = rtn_err;
  const int steps = 200;
  for (int step = 0; step < steps; ++step) {
    error(x, y, &v);  // leaves Ŵ and X Ŵᵀ of the current V
    for (size_t i = 0; i < dy.size(); ++i) dy[i] = 2.f * (y_hat[i] - y[i]);
    std::fill(dw.begin(), dw.end(), 0.f);
    linear_backward<float>(x.data(), w_hat.data(), dy.data(), rows_x, in, out, nullptr,
                           dw.data(), nullptr);
    FakeQuantGrads gr;
    ste.backward(w.data(), v.data(), dw.data(), gr);
    const float lr = 0.005f * (1.f - float(step) / steps);  // SignRound's decaying signed step
    for (size_t i = 0; i < v.size(); ++i)
      v[i] = std::clamp(v[i] - lr * float((gr.v[i] > 0) - (gr.v[i] < 0)), -0.5f, 0.5f);
    const double err = error(x, y, &v);
    if (err < best_err) best_err = err, best = v;
  }
  const double tuned_test = error(x_test, y_test, &best);
  std::printf("llama_v5 down_proj NVFP4 ||X(Ŵ−W)ᵀ||²: calibration RTN %.6g tuned %.6g (%.1f%%), "
              "held-out RTN %.6g tuned %.6g (%.1f%%)\n",
              rtn_err, best_err, 100 * best_err / rtn_err, rtn_test, tuned_test,
              100 * tuned_test / rtn_test);
  EXPECT_LT(best_err, 0.95 * rtn_err);
  EXPECT_LT(tuned_test, rtn_test);
}

}  // namespace
}  // namespace qf

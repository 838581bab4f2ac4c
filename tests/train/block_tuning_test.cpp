// Block-wise tuning: TunableLinear's export is bit for bit its forward for every weight format
// (with RTN and non-RTN inits), the block's threaded fast path gives the same bytes whatever the
// pool's size and agrees with the plain loops, activation fake quantization inside the block
// is the engine's, and tuning lowers one real block's output error (W4A16 and W4A4).
#include "algo/round_to_nearest.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "engine/activation_quant.h"
#include "engine/model.h"
#include "formats/fake_quant.h"
#include "train/block_tuning.h"
#include "test_util.h"

#include "train/quant_test_weights.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

namespace qf {
namespace {

namespace fs = std::filesystem;

using test::random_weights;
using test::rtn;

TEST(TunableLinear, ExportIsTheForwardBitForBitEveryFormat) {
  std::mt19937 rng(7);
  const int64_t rows = 16, cols = 128;
  const std::vector<float> w = random_weights(rng, rows, cols);
  struct Case {
    Format f;
    int block;
  };
  for (const Case c : {Case{Format::nvfp4, 0}, Case{Format::mxfp4, 0}, Case{Format::fp8, 0},
                       Case{Format::int4, 32}, Case{Format::int4, 128}}) {
    SCOPED_TRACE(std::string(format_info(c.f).name) + ":" + std::to_string(c.block));
    const QuantizedTensor init = rtn(w, rows, cols, c.f, c.block);
    for (TuneParams params : {TuneParams::rounding, TuneParams::weights}) {
    TunableLinear t(w, init, params);
    std::vector<float> fwd(w.size()), deq(w.size()), ref(w.size());
    // V = 0: the init itself.
    t.forward(fwd.data());
    dequantize(init, ref.data());
    EXPECT_EQ(0, std::memcmp(fwd.data(), ref.data(), w.size() * 4));
    // A few steps of random gradients move offsets; export still equals the forward.
    std::vector<float> g(w.size());
    std::normal_distribution<float> n(0.f, 1.f);
    for (int s = 0; s < 5; ++s) {
      for (float& x : g) x = n(rng);
      t.step(g.data(), s % 2 ? TuneOptimizer::adam : TuneOptimizer::sign, 0.2f);
    }
    float vmax = 0.f;
    for (float v : t.offsets()) vmax = std::max(vmax, std::fabs(v));
    if (params == TuneParams::rounding) EXPECT_LE(vmax, 0.5f);
    else EXPECT_GT(vmax, 0.5f);  // 5 steps of 0.2: unbounded offsets pass half a step
    t.forward(fwd.data());
    const QuantizedTensor q = t.export_tensor();
    EXPECT_EQ(q.block_scales, init.block_scales);  // the scales stay the init's
    EXPECT_EQ(q.scales, init.scales);
    EXPECT_EQ(q.global_scale, init.global_scale);
    dequantize(q, deq.data());
    EXPECT_EQ(0, std::memcmp(fwd.data(), deq.data(), w.size() * 4));
    EXPECT_NE(0, std::memcmp(fwd.data(), ref.data(), w.size() * 4));  // the codes moved
    }
  }
}

TEST(TunableLinear, NonRoundToNearestInitIsReproducedAtZeroOffsets) {
  // An init whose codes are not RTN under its scales (as GPTQ's): V = 0 gives it back.
  std::mt19937 rng(3);
  const int64_t rows = 8, cols = 64;
  const std::vector<float> w = random_weights(rng, rows, cols);
  for (Format f : {Format::nvfp4, Format::int4}) {
    std::vector<float> shifted = w;
    for (size_t i = 0; i < shifted.size(); i += 3) shifted[i] *= 1.6f;
    QuantizedTensor init = rtn(w, rows, cols, f, f == Format::int4 ? 32 : 0);
    const QuantizedTensor other = FakeQuantSte(init).quantize(shifted.data(), nullptr);
    init.codes = other.codes;  // same scales, other codes
    TunableLinear t(w, init);
    std::vector<float> fwd(w.size()), ref(w.size());
    t.forward(fwd.data());
    dequantize(init, ref.data());
    EXPECT_EQ(0, std::memcmp(fwd.data(), ref.data(), w.size() * 4));
    EXPECT_EQ(t.export_tensor().codes, init.codes);
  }
}

// A real block: llama_v5's layer 0 (F32 copy), inputs from embedded random tokens.
struct RealBlock {
  test::ScratchDir scratch;
  std::unique_ptr<Model> model;
  BlockShape shape;
  BlockWeights<float> weights;
  RopeTable<float> rope;
  int64_t windows = 6, seq = 16;
  std::vector<float> x, target;

  RealBlock() {
    const fs::path src = fs::path(QFORGE_SOURCE_DIR) / "tests/data/conformance/llama_v5";
    test::write_f32_copy(src, scratch.path());
    ModelOptions mo;
    mo.threads = 2;
    mo.kernels = KernelMode::exact;
    model = Model::load(scratch.path(), mo);
    const Architecture& a = model->arch();
    shape = block_shape(a, 0);
    weights = block_weights<float>(model->weights(), 0);
    rope = rope_table<float>(a.ropes[size_t(a.layers[0].rope)], seq);
    std::mt19937 rng(5);
    const int64_t per = seq * a.hidden_size;
    x.resize(size_t(windows * per));
    for (int64_t w = 0; w < windows; ++w) {
      std::vector<int32_t> tokens(static_cast<size_t>(seq));
      for (int32_t& t : tokens) t = int32_t(rng() % uint32_t(a.vocab_size));
      model->embed(tokens, x.data() + w * per);
    }
    target = x;
    for (int64_t w = 0; w < windows; ++w) model->forward_layer(0, target.data() + w * per, seq);
  }
};

TEST(BlockTuning, ThreadedBlockIsTheSameBytesForAnyPoolAndNearThePlainLoops) {
  RealBlock b;
  const int64_t per = b.seq * b.shape.hidden;
  BlockActQuant act{ActQuant::nvfp4, 0.01f, 0.01f, 0.01f, 0.01f};
  for (const BlockActQuant* a : {static_cast<const BlockActQuant*>(nullptr),
                                 static_cast<const BlockActQuant*>(&act)}) {
    std::vector<std::vector<float>> ys, dxs;
    std::vector<BlockWeights<float>> gs;
    for (int threads : {0, 1, 2, 3}) {
      ThreadPool pool(std::max(threads, 1));
      std::vector<float> y(static_cast<size_t>(per)), dx(static_cast<size_t>(per));
      BlockSaved<float> sv;
      BlockWeights<float> g = BlockWeights<float>::zeros(b.shape);
      ThreadPool* p = threads ? &pool : nullptr;
      block_forward<float>(b.shape, b.weights, b.rope, b.x.data(), b.seq, y.data(), sv, a, p);
      std::vector<float> dy(y.size());
      for (size_t i = 0; i < y.size(); ++i) dy[i] = float(int64_t(i * 2654435761u % 1001) - 500) / 500.f;
      block_backward<float>(b.shape, b.weights, b.rope, sv, dy.data(), dx.data(), g, a, p);
      ys.push_back(y);
      dxs.push_back(dx);
      gs.push_back(std::move(g));
    }
    for (size_t k = 2; k < ys.size(); ++k) {
      EXPECT_EQ(0, std::memcmp(ys[1].data(), ys[k].data(), size_t(per) * 4));
      EXPECT_EQ(0, std::memcmp(dxs[1].data(), dxs[k].data(), size_t(per) * 4));
      for (int r = 0; r < kBlockLinears; ++r)
        EXPECT_EQ(block_matrix(gs[1], r), block_matrix(gs[k], r));
    }
    // The kernels' sums run in another order than the plain loops: close, not equal.
    for (int r = 0; r < kBlockLinears; ++r) {
      const auto& ref = block_matrix(gs[0], r);
      const auto& got = block_matrix(gs[1], r);
      double worst = 0, scale = 0;
      for (size_t i = 0; i < ref.size(); ++i) {
        worst = std::max(worst, std::fabs(double(ref[i]) - double(got[i])));
        scale = std::max(scale, std::fabs(double(ref[i])));
      }
      // With quantized activations a last-ulp difference can flip one rounding.
      EXPECT_LT(worst, (a ? 2e-2 : 1e-4) * scale) << r;
    }
  }
}

TEST(BlockTuning, QuantizedInputsAreTheEnginesActivationQuantization) {
  // The block's n1 with NVFP4 activations is the engine's fake_quantize_activations of its
  // rmsnorm output, and the gradient is masked beyond the calibrated range only.
  RealBlock b;
  BlockSaved<float> plain, quant;
  const int64_t per = b.seq * b.shape.hidden;
  std::vector<float> y(static_cast<size_t>(per));
  block_forward<float>(b.shape, b.weights, b.rope, b.x.data(), b.seq, y.data(), plain);
  float amax = 0.f;
  for (float v : plain.n1) amax = std::max(amax, std::fabs(v));
  const float scale = amax / 2688.f * 0.5f;  // half the range: some inputs clip
  const BlockActQuant act{ActQuant::nvfp4, scale, 1.f, 1.f, 1.f};
  block_forward<float>(b.shape, b.weights, b.rope, b.x.data(), b.seq, y.data(), quant, &act);
  std::vector<float> expect = plain.n1;
  fake_quantize_activations(ActQuant::nvfp4, scale, expect.data(), int64_t(expect.size()));
  EXPECT_EQ(expect, quant.n1);
  int64_t clipped = 0;
  for (size_t i = 0; i < plain.n1.size(); ++i) {
    EXPECT_EQ(quant.pass_n1[i], std::fabs(plain.n1[i]) <= scale * 2688.f ? 1 : 0);
    clipped += quant.pass_n1[i] ? 0 : 1;
  }
  EXPECT_GT(clipped, 0);
}

TEST(BlockTuning, LowersTheBlockOutputErrorWeightOnlyAndW4A4) {
  RealBlock b;
  ThreadPool pool(2);
  std::array<QuantizedTensor, kBlockLinears> inits;
  std::array<const QuantizedTensor*, kBlockLinears> init{};
  for (int r = 0; r < kBlockLinears; ++r) {
    const auto& w = block_matrix(b.weights, r);
    const int64_t rows = r == 3 || r == 6 ? b.shape.hidden : int64_t(w.size()) / b.shape.hidden;
    inits[size_t(r)] = rtn(w, rows, int64_t(w.size()) / rows, Format::nvfp4);
    init[size_t(r)] = &inits[size_t(r)];
  }
  BlockTuneOptions o;
  o.iters = 40;
  o.batch = 3;
  BlockActQuant act{ActQuant::nvfp4, 0.f, 0.f, 0.f, 0.f};
  {
    // Static input scales from the inputs' amaxes (the calibration's rule).
    BlockSaved<float> sv;
    std::vector<float> y(size_t(b.seq * b.shape.hidden));
    float a1 = 0, ao = 0, a2 = 0, ad = 0;
    for (int64_t w = 0; w < b.windows; ++w) {
      block_forward<float>(b.shape, b.weights, b.rope, b.x.data() + w * b.seq * b.shape.hidden,
                           b.seq, y.data(), sv);
      for (float v : sv.n1) a1 = std::max(a1, std::fabs(v));
      for (float v : sv.att) ao = std::max(ao, std::fabs(v));
      for (float v : sv.n2) a2 = std::max(a2, std::fabs(v));
      for (float v : sv.mlp.act) ad = std::max(ad, std::fabs(v));
    }
    act = {ActQuant::nvfp4, a1 / 2688.f, ao / 2688.f, a2 / 2688.f, ad / 2688.f};
  }
  for (const BlockActQuant* a : {static_cast<const BlockActQuant*>(nullptr),
                                 static_cast<const BlockActQuant*>(&act)}) {
    const BlockTuneResult r = tune_block(b.shape, b.weights, b.rope, init, a, b.x.data(),
                                         b.target.data(), b.windows, b.seq, o, &pool);
    EXPECT_FALSE(r.kept_init);
    EXPECT_LT(r.mse_tuned, 0.8 * r.mse_init) << (a ? "W4A4" : "W4A16");
    // The exported tensors are what the tuned forward used: the scales stay the init's.
    for (int k = 0; k < kBlockLinears; ++k)
      EXPECT_EQ(r.tensors[size_t(k)].block_scales, inits[size_t(k)].block_scales);
  }
  // Deterministic: the same result with another pool size.
  ThreadPool one(1);
  const BlockTuneResult r1 = tune_block(b.shape, b.weights, b.rope, init, nullptr, b.x.data(),
                                        b.target.data(), b.windows, b.seq, o, &one);
  const BlockTuneResult r2 = tune_block(b.shape, b.weights, b.rope, init, nullptr, b.x.data(),
                                        b.target.data(), b.windows, b.seq, o, &pool);
  for (int k = 0; k < kBlockLinears; ++k) EXPECT_EQ(r1.tensors[size_t(k)].codes, r2.tensors[size_t(k)].codes);
  EXPECT_EQ(r1.mse_tuned, r2.mse_tuned);
  // A batch larger than the windows is refused.
  o.batch = b.windows + 1;
  EXPECT_THROW(tune_block(b.shape, b.weights, b.rope, init, nullptr, b.x.data(), b.target.data(),
                          b.windows, b.seq, o, &pool),
               Error);
}

}  // namespace
}  // namespace qf

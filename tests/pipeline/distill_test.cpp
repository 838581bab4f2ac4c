// End-to-end distillation (pipeline/distill.h): the exported codes are what the tuned forward
// used, an interrupted and resumed run writes the same bytes as an uninterrupted one, and bad
// input is refused before any work starts.
#include "algo/round_to_nearest.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "formats/fake_quant.h"
#include "pipeline/distill.h"
#include "train/fake_quant_ste.h"
#include "test_util.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>

namespace qf {
namespace {

namespace fs = std::filesystem;

TEST(Distill, ExportedCodesAreTheTunedForwardBitForBit) {
  std::mt19937 rng(4);
  const int64_t rows = 16, cols = 128;
  std::normal_distribution<float> nd(0.f, 0.02f);
  std::vector<float> w(size_t(rows * cols)), tuned(w.size());
  for (float& x : w) x = nd(rng) * ((rng() % 13 == 0) ? 5.f : 1.f);
  // A "trained" W: moved off the original by up to a few scale steps, some beyond the clip.
  for (size_t i = 0; i < w.size(); ++i) tuned[i] = w[i] * 1.3f + nd(rng) * 0.5f;
  ThreadPool pool(2);
  for (const auto& [f, block] : std::vector<std::pair<Format, int>>{
           {Format::nvfp4, 0}, {Format::mxfp4, 0}, {Format::int4, 0}, {Format::int4, 32},
           {Format::int8, 0}, {Format::fp8, 0}}) {
    SCOPED_TRACE(std::string(format_info(f).name) + " block " + std::to_string(block));
    const WeightRows wr{w.data(), DType::F32, rows, cols, nullptr};
    RtnOptions o;
    o.format = f;
    o.block = block;
    QuantizedTensor q = quantize_rtn(wr, o, weight_amax(wr, pool).amax, pool);
    q.codes.clear();
    const FakeQuantSte ste(q);
    std::vector<float> forward(w.size()), exported(w.size());
    ste.forward(tuned.data(), nullptr, forward.data());
    encode_with_scales(q, tuned.data(), pool);
    dequantize(q, exported.data());
    EXPECT_EQ(std::memcmp(forward.data(), exported.data(), forward.size() * sizeof(float)), 0);
  }
}

DistillOptions small_options(const fs::path& state) {
  DistillOptions o;
  o.quantize.format = Format::nvfp4;
  o.quantize.threads = 2;
  o.quantize.progress = false;
  o.quantize.calib.files = {test::fixtures_dir() / "corpora" / "tinyshakespeare.txt"};
  o.quantize.calib.samples = 8;
  o.quantize.calib.seq_len = 32;
  o.steps = 4;
  o.batch = 2;
  o.eval_samples = 2;
  o.eval_every = 2;
  o.lr = 0.01f;
  o.checkpoint = state;
  o.config_key = "test";
  return o;
}

TEST(Distill, ResumedRunWritesTheSameBytes) {
  QF_REQUIRE_FIXTURES();
  test::ScratchDir tmp;
  const SourceModel src = SourceModel::open(test::model_dir("stories260K-hf"));
  DistillOptions o = small_options(tmp / "a.state");
  const DistillReport full = distill_checkpoint(src, tmp / "full", o);
  EXPECT_EQ(full.steps, 4);
  EXPECT_LT(full.eval_kl_after, full.eval_kl_before);

  o.checkpoint = tmp / "b.state";
  o.checkpoint_every = 2;
  o.stop_after = 2;
  EXPECT_THROW(distill_checkpoint(src, tmp / "resumed", o), Error);
  ASSERT_TRUE(fs::exists(o.checkpoint));
  EXPECT_EQ(read_distill_state(o.checkpoint).step, 2);
  EXPECT_FALSE(fs::exists(tmp / "resumed"));
  o.stop_after = 0;
  o.resume = true;
  const DistillReport resumed = distill_checkpoint(src, tmp / "resumed", o);
  EXPECT_EQ(resumed.resumed_from, 2);
  EXPECT_EQ(test::read_file(tmp / "full" / "model.safetensors"),
            test::read_file(tmp / "resumed" / "model.safetensors"));
  ASSERT_EQ(full.curve.size(), resumed.curve.size());
  for (size_t i = 0; i < full.curve.size(); ++i) {
    EXPECT_EQ(full.curve[i].loss, resumed.curve[i].loss);
    EXPECT_EQ(full.curve[i].eval_kl, resumed.curve[i].eval_kl);
  }
  EXPECT_FALSE(fs::exists(o.checkpoint));  // removed once the output is complete
}

std::string error_of(const SourceModel& src, const DistillOptions& o) {
  try {
    check_distill(src, o);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Distill, BadInputIsRefusedUpFront) {
  QF_REQUIRE_FIXTURES();
  test::ScratchDir tmp;
  const SourceModel src = SourceModel::open(test::model_dir("stories260K-hf"));
  DistillOptions o = small_options(tmp / "s.state");
  EXPECT_EQ(error_of(src, o), "");
  {
    DistillOptions b = o;
    b.lr = 2.f;
    EXPECT_NE(error_of(src, b).find("--lr"), std::string::npos);
    b = o;
    b.steps = 0;
    EXPECT_NE(error_of(src, b).find("--steps"), std::string::npos);
    b = o;
    b.batch = 7;  // 8 windows: 7 + 2 held out do not fit
    EXPECT_NE(error_of(src, b).find("too small"), std::string::npos);
    b = o;
    b.quantize.algo = WeightAlgo::awq;
    EXPECT_NE(error_of(src, b).find("--algo awq"), std::string::npos);
    b = o;
    b.resume = true;
    EXPECT_NE(error_of(src, b).find("s.state"), std::string::npos);
    DistillState st;
    st.key_hash = distill_key_hash("other flags");
    write_distill_state(b.checkpoint, st);
    EXPECT_NE(error_of(src, b).find("other flags"), std::string::npos);
  }
  // A family whose backward is not implemented: refused before the text is read.
  const SourceModel gemma =
      SourceModel::open(fs::path(QFORGE_SOURCE_DIR) / "tests/data/conformance/gemma3");
  EXPECT_NE(error_of(gemma, o).find("not differentiated"), std::string::npos);
}

}  // namespace
}  // namespace qf

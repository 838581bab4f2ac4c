// End-to-end distillation (pipeline/distill.h): the exported codes are what the tuned forward
// used, an interrupted and resumed run writes the same bytes as an uninterrupted one, and bad
// input is refused before any work starts.
#include "algo/round_to_nearest.h"
#include "core/error.h"
#include "core/numeric.h"
#include "core/thread_pool.h"
#include "engine/model.h"
#include "eval/perplexity.h"
#include "eval/text.h"
#include "formats/fake_quant.h"
#include "io/checkpoint.h"
#include "model/architecture.h"
#include "pipeline/distill.h"
#include "train/fake_quant_ste.h"
#include "test_util.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
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

// Also with the (tied) embedding trained: its values and Adam moments are in the checkpoint.
class DistillResume : public testing::TestWithParam<float> {};

TEST_P(DistillResume, ResumedRunWritesTheSameBytes) {
  QF_REQUIRE_FIXTURES();
  test::ScratchDir tmp;
  const SourceModel src = SourceModel::open(test::model_dir("stories260K-hf"));
  DistillOptions o = small_options(tmp / "a.state");
  o.embedding_lr = GetParam();
  const DistillReport full = distill_checkpoint(src, tmp / "full", o);
  EXPECT_EQ(full.embedding_parameters, o.embedding_lr > 0 ? 512 * 64 : 0);
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

INSTANTIATE_TEST_SUITE_P(EmbeddingRate, DistillResume, testing::Values(0.f, 0.01f));

// The bytes of a stored tensor of `ck`.
std::vector<uint8_t> tensor_bytes(const Checkpoint& ck, const std::string& name) {
  const CheckpointTensor* t = ck.find(name);
  if (!t) return {};
  const TensorView v = t->file->view(*t->entry);
  return std::vector<uint8_t>(reinterpret_cast<const uint8_t*>(v.data),
                              reinterpret_cast<const uint8_t*>(v.data) + v.nbytes);
}

// --train both: the NVFP4 block scales are trained (LSQ, on the E4M3 grid) with the weights;
// every exported Linear dequantizes bit for bit to the weights the student's last forward used,
// and the exported block scales differ from the initial quantization's (a high scale rate so
// that 4 steps cross E4M3 steps).
TEST(Distill, LsqScalesExportIsTheStudentsForwardBitForBit) {
  QF_REQUIRE_FIXTURES();
  test::ScratchDir tmp;
  const SourceModel src = SourceModel::open(test::model_dir("stories260K-hf"));
  DistillOptions o = small_options(tmp / "s.state");
  o.train = DistillTrain::both;
  o.scale_lr = 0.05f;
  std::map<size_t, std::vector<float>> student;
  o.on_student_weights = [&](size_t li, const float* w) {
    const LinearModule& m = src.arch.linears[li];
    student[li].assign(w, w + m.in_features * m.out_features);
  };
  const DistillReport r = distill_checkpoint(src, tmp / "lsq", o);
  EXPECT_GT(r.scale_parameters, 0);
  EXPECT_TRUE(std::isfinite(r.eval_kl_after));  // a rate this high is for moving scales, not KL
  quantize_checkpoint(src, tmp / "init", o.quantize);  // the same initial quantization (max)
  const Checkpoint out = Checkpoint::open(tmp / "lsq");
  const Checkpoint init = Checkpoint::open(tmp / "init");
  ASSERT_FALSE(student.empty());
  int64_t moved = 0;
  for (const auto& [li, w] : student) {
    const LinearModule& m = src.arch.linears[li];
    SCOPED_TRACE(m.name);
    QuantizedTensor q;
    q.format = Format::nvfp4;
    q.rows = m.out_features;
    q.cols = m.in_features;
    q.block = 16;
    q.codes = tensor_bytes(out, m.name + ".weight");
    q.block_scales = tensor_bytes(out, m.name + ".weight_scale");
    const std::vector<uint8_t> g = tensor_bytes(out, m.name + ".weight_scale_2");
    ASSERT_EQ(g.size(), 4u);
    std::memcpy(&q.global_scale, g.data(), 4);
    ASSERT_EQ(q.codes.size(), w.size() / 2);
    ASSERT_EQ(q.block_scales.size(), w.size() / 16);
    std::vector<float> exported(w.size());
    dequantize(q, exported.data());
    EXPECT_EQ(std::memcmp(exported.data(), w.data(), w.size() * sizeof(float)), 0);
    const std::vector<uint8_t> s0 = tensor_bytes(init, m.name + ".weight_scale");
    ASSERT_EQ(s0.size(), q.block_scales.size());
    for (size_t j = 0; j < s0.size(); ++j) {
      moved += s0[j] != q.block_scales[j];
      EXPECT_TRUE(std::isfinite(e4m3_to_f32(q.block_scales[j])));
      EXPECT_GE(e4m3_to_f32(q.block_scales[j]), 0.f);
    }
  }
  EXPECT_GT(moved, 0);
}

// --embedding-lr on an untied BF16 model (llama3_v4 with a byte-level tokenizer): the head and
// the embedding are two trained matrices, exported in BF16. Every head row moves (each token's
// logit has a gradient), but only the embedding rows of tokens that appear in the training
// windows: a token never read has no gradient, so Adam leaves its row bit for bit (and a token
// mapped to the wrong row would show as a moved unseen row).
TEST(Distill, UntiedEmbeddingAndHeadAreTrainedAndExported) {
  QF_REQUIRE_FIXTURES();
  test::ScratchDir tmp;
  test::copy_conformance_case(fs::path(QFORGE_SOURCE_DIR) / "tests/data/conformance/llama3_v4",
                              tmp / "model");
  const SourceModel src = SourceModel::open(tmp / "model");
  ASSERT_FALSE(src.arch.tie_word_embeddings);
  DistillOptions o = small_options(tmp / "s.state");
  o.embedding_lr = 0.05f;
  const CalibrationData data = check_distill(src, o).calib;
  const DistillReport r = distill_checkpoint(src, tmp / "out", o);
  EXPECT_EQ(r.embedding_parameters, 2 * 256 * 64);
  EXPECT_FALSE(r.embedding_tied);
  EXPECT_TRUE(std::isfinite(r.eval_kl_after));

  std::vector<bool> trained(256, false), anywhere(256, false);
  const size_t n_train = data.windows.size() - size_t(o.eval_samples);
  for (size_t w = 0; w < data.windows.size(); ++w)
    for (int32_t t : data.windows[w]) {
      anywhere[size_t(t)] = true;
      if (w < n_train) trained[size_t(t)] = true;
    }
  const Checkpoint in = Checkpoint::open(tmp / "model");
  const Checkpoint out = Checkpoint::open(tmp / "out");
  for (const char* name : {"model.embed_tokens.weight", "lm_head.weight"}) {
    SCOPED_TRACE(name);
    EXPECT_EQ(out.find(name)->entry->dtype, DType::BF16);
    const std::vector<uint8_t> a = tensor_bytes(in, name), b = tensor_bytes(out, name);
    ASSERT_EQ(a.size(), size_t(256 * 64 * 2));
    ASSERT_EQ(b.size(), a.size());
    const size_t row = 64 * 2;
    int64_t moved = 0, moved_unread = 0, read = 0;
    for (size_t v = 0; v < 256; ++v) {
      const bool same = std::memcmp(a.data() + v * row, b.data() + v * row, row) == 0;
      moved += !same;
      read += trained[v];
      if (!anywhere[v]) moved_unread += !same;
    }
    if (std::string(name) == "lm_head.weight") {
      EXPECT_EQ(moved, 256);
    } else {
      EXPECT_EQ(moved_unread, 0);
      EXPECT_GT(read, 20);
      EXPECT_GE(moved, read * 9 / 10);
      EXPECT_LE(moved, int64_t(std::count(anywhere.begin(), anywhere.end(), true)));
    }
  }
}

// --calib-generate: the teacher's sampled windows are a function of the seed (two runs write
// the same bytes) and the distillation on them lowers the held-out KL.
TEST(Distill, TeacherGeneratedWindowsAreReproducible) {
  QF_REQUIRE_FIXTURES();
  test::ScratchDir tmp;
  const SourceModel src = SourceModel::open(test::model_dir("stories260K-hf"));
  DistillOptions o = small_options(tmp / "s.state");
  o.generate_prompt = 4;
  const DistillReport a = distill_checkpoint(src, tmp / "a", o);
  const DistillReport b = distill_checkpoint(src, tmp / "b", o);
  EXPECT_EQ(a.generated_windows, 8);
  EXPECT_LT(a.eval_kl_after, a.eval_kl_before);
  EXPECT_EQ(a.eval_kl_after, b.eval_kl_after);
  EXPECT_EQ(test::read_file(tmp / "a" / "model.safetensors"),
            test::read_file(tmp / "b" / "model.safetensors"));
  o.generate_prompt = 0;
  const DistillReport c = distill_checkpoint(src, tmp / "c", o);
  EXPECT_NE(a.eval_kl_before, c.eval_kl_before);  // other windows held out
}

// --eval-text: the evaluation windows are the text's first eval_samples x seq tokens, so the
// curve's last KL is what `eval kl --ctx seq` gives the export on those tokens (the student's
// float forward against the engine's exact kernels: other summation orders, so not bit for
// bit, but within 1e-4), and every calibration window trains.
TEST(Distill, EvaluationTextIsMeasuredAsEvalKlReadsIt) {
  QF_REQUIRE_FIXTURES();
  test::ScratchDir tmp;
  const fs::path model = test::model_dir("stories260K-hf");
  const SourceModel src = SourceModel::open(model);
  DistillOptions o = small_options(tmp / "s.state");
  o.eval_text = test::fixtures_dir() / "corpora" / "tinystories_valid_subset.txt";
  o.eval_samples = 3;
  const DistillData data = check_distill(src, o);
  ASSERT_EQ(data.eval_text.size(), 3u);
  const DistillReport r = distill_checkpoint(src, tmp / "out", o);
  EXPECT_TRUE(r.eval_on_text);
  EXPECT_EQ(r.eval_windows, 3);
  EXPECT_EQ(r.train_windows, int64_t(data.calib.windows.size()));

  const int64_t seq = o.quantize.calib.seq_len;
  std::vector<int32_t> ids = eval_text_ids(o.eval_text, 0, src.tokenizer());
  ids.resize(size_t(3 * seq + 1));
  for (int64_t w = 0; w < 3; ++w)
    EXPECT_TRUE(std::equal(data.eval_text[size_t(w)].begin(), data.eval_text[size_t(w)].end(),
                           ids.begin() + w * seq));
  ModelOptions mo;
  mo.kernels = KernelMode::exact;
  mo.threads = 2;
  const auto base = Model::load(model, mo);
  const auto quant = Model::load(tmp / "out", mo);
  const KlResult kl = kl_divergence(*base, *quant, ids, seq);
  EXPECT_EQ(kl.tokens, 3 * seq);
  EXPECT_NEAR(r.eval_kl_after, kl.kl_mean, 1e-4 * kl.kl_mean);  // 1.6e-6 measured
  EXPECT_GT(r.eval_kl_after, 0);
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
    b.eval_text = test::fixtures_dir() / "corpora" / "tinystories_valid_subset.txt";
    EXPECT_EQ(error_of(src, b), "");  // no window held out: 8 >= 7
    test::write_file(tmp / "short.txt", "Once upon a time.");
    b.eval_text = tmp / "short.txt";  // a few tokens for 2 windows of 32
    EXPECT_NE(error_of(src, b).find("need 64"), std::string::npos);
    b.eval_text = tmp / "missing.txt";
    EXPECT_NE(error_of(src, b).find("missing.txt"), std::string::npos);
    b = o;
    b.scale_lr = 2.f;
    EXPECT_NE(error_of(src, b).find("--scale-lr"), std::string::npos);
    b = o;
    b.scale_lr = 0.001f;  // weights only: no scales to set a rate for
    EXPECT_NE(error_of(src, b).find("--train scales or both"), std::string::npos);
    b = o;
    b.train = DistillTrain::scales;
    b.quantize.format = Format::int4;
    EXPECT_NE(error_of(src, b).find("nvfp4 only"), std::string::npos);
    b = o;
    b.embedding_lr = 2.f;
    EXPECT_NE(error_of(src, b).find("--embedding-lr"), std::string::npos);
    b = o;
    b.generate_prompt = 32;  // the whole window: nothing left to generate
    EXPECT_NE(error_of(src, b).find("--calib-generate"), std::string::npos);
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

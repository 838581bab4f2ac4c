// End to end: INT8 SmoothQuant W8A8 (`--format int8 --activations int8 --algo smoothquant`) on
// both fixture models and both exports. ModelOpt (W8A8_SQ_PER_CHANNEL): per Linear an I8 weight,
// F32 weight_scale [out], F32 input_scale [] = max_c(a_c s_c)/127 and pre_quant_scale [in] with
// s = 1/a (alpha 1), so that dequantized weight * pre_quant_scale reproduces the original
// weight within half a quantization step. compressed-tensors (int-quantized): s folded into the
// RMSNorms for q/k/v and gate/up, o_proj/down_proj unsmoothed. Then `qforge eval kl`.
#include "calib/calibration_data.h"
#include "calib/layer_calibration.h"
#include "core/convert.h"
#include "engine/model.h"
#include "engine/weights.h"
#include "io/checkpoint.h"
#include "io/json_file.h"
#include "io/tokenizer.h"
#include "e2e/calibration_capture.h"
#include "test_util.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <map>

namespace fs = std::filesystem;

namespace qf {
namespace {

using test::model_dir;
using test::eval_kl;
using test::quote;

using test::calib_file;
const char* kCalib = test::kCalibFlags;

// A tensor as float32 (I8 as its integer values), with its dtype and shape.
struct Loaded {
  DType dtype = DType::F32;
  Shape shape;
  std::vector<float> v;
};
Loaded load(const Checkpoint& c, const std::string& name) {
  Loaded out;
  const CheckpointTensor* t = c.find(name);
  EXPECT_NE(t, nullptr) << name;
  if (!t) return out;
  const TensorView view = t->file->view(*t->entry);
  out.dtype = view.dtype;
  out.shape = view.shape;
  out.v.resize(size_t(view.numel()));
  if (view.dtype == DType::I8) {
    for (size_t i = 0; i < out.v.size(); ++i) out.v[i] = float(int8_t(view.data[i]));
  } else {
    convert_to_f32(view.dtype, view.data, out.v.data(), out.v.size());
  }
  return out;
}

// Per layer, per LayerInput: the captured per-channel amax, computed in-process exactly as
// `quantize` does.
using ChannelAmax = std::vector<std::array<std::vector<float>, kLayerInputs>>;
ChannelAmax capture(const std::string& m) {
  ChannelAmax c;
  test::capture_calibration(m, [&](int64_t, LayerCapture& cap) {
    std::array<std::vector<float>, kLayerInputs> a;
    for (int i = 0; i < kLayerInputs; ++i) a[size_t(i)] = cap.inputs[size_t(i)].channel_amax;
    c.push_back(a);
  });
  return c;
}

// ModelOpt's SmoothQuant scale with alpha = 1: 1/a, dead channels 1, clamped to [1e-4, 1e4].
float sq_scale(float a) {
  return a <= 0x1p-31f ? 1.f : std::clamp(std::pow(1.f, 0.f) / std::pow(a, 1.f), 1e-4f, 1e4f);
}

const std::map<std::string, LayerInput> kModules = {
    {"self_attn.q_proj", LayerInput::attn_norm}, {"self_attn.k_proj", LayerInput::attn_norm},
    {"self_attn.v_proj", LayerInput::attn_norm}, {"self_attn.o_proj", LayerInput::attn_out},
    {"mlp.gate_proj", LayerInput::ffn_norm},     {"mlp.up_proj", LayerInput::ffn_norm},
    {"mlp.down_proj", LayerInput::mlp_act}};

// |dequantized * s_c - W| <= step/2 * s_c (with float slack) for every element, where
// step = weight_scale[r]; returns the relative Frobenius error.
double check_reconstruction(const Loaded& w0, const Loaded& codes, const Loaded& scale,
                            const std::vector<float>& s, const std::string& what) {
  const int64_t rows = codes.shape[0], cols = codes.shape[1];
  double err = 0, ref = 0;
  int bad = 0;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const float w = w0.v[size_t(r * cols + c)];
      const float d = codes.v[size_t(r * cols + c)] * scale.v[size_t(r)] * s[size_t(c)];
      // 1e-3 slack: compressed-tensors' scale amax/127.5 leaves the row's largest element half a
      // step beyond the clamp at 127, plus the rounding of the scale itself.
      const double bound = 0.5 * double(scale.v[size_t(r)]) * s[size_t(c)] * (1 + 1e-3) + 1e-12;
      if (std::fabs(double(d) - w) > bound && ++bad <= 3)
        ADD_FAILURE() << what << " [" << r << ", " << c << "]: " << d << " vs " << w;
      err += (double(d) - w) * (double(d) - w);
      ref += double(w) * w;
    }
  return std::sqrt(err / ref);
}

class SmoothQuantE2E : public ::testing::TestWithParam<std::string> {};

TEST_P(SmoothQuantE2E, ModelOptW8A8SqPerChannel) {
  QF_REQUIRE_FIXTURES();
  const std::string m = GetParam();
  test::ScratchDir tmp;
  const ChannelAmax cap = capture(m);
  const fs::path out = tmp / "modelopt";
  const auto r = test::run_qforge("quantize " + quote(model_dir(m)) + " -o " + quote(out) +
                                  " --format int8 --activations int8 --algo smoothquant --calib " +
                                  quote(calib_file()) + kCalib + " --json -q");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto rep = nlohmann::json::parse(r.out);
  EXPECT_EQ(rep["algo"], "smoothquant");
  EXPECT_EQ(rep["activations"], "int8");
  EXPECT_EQ(rep["modules_excluded"], 0);  // block 1: every Linear, stories260K's down_proj too
  const auto cfg = read_json_file(out / "config.json")["quantization_config"];
  EXPECT_EQ(cfg["quant_algo"], "W8A8_SQ_PER_CHANNEL");
  EXPECT_EQ(cfg["quant_method"], "modelopt");
  EXPECT_FALSE(cfg.contains("config_groups"));
  const auto hf = read_json_file(out / "hf_quant_config.json")["quantization"];
  EXPECT_EQ(hf["quant_algo"], "W8A8_SQ_PER_CHANNEL");
  EXPECT_TRUE(hf["kv_cache_quant_algo"].is_null());
  EXPECT_EQ(hf["exclude_modules"], nlohmann::json::array({"lm_head", "model.embed_tokens"}));

  const Checkpoint base = Checkpoint::open(model_dir(m));
  const Checkpoint c = Checkpoint::open(out);
  double worst = 0;
  for (size_t l = 0; l < cap.size(); ++l) {
    const std::string p = fmt::format("model.layers.{}.", l);
    for (const auto& [mod, in] : kModules) {
      SCOPED_TRACE(p + mod);
      const std::vector<float>& a = cap[l][size_t(in)];
      const Loaded w0 = load(base, p + mod + ".weight");
      const Loaded codes = load(c, p + mod + ".weight");
      const Loaded scale = load(c, p + mod + ".weight_scale");
      const Loaded is = load(c, p + mod + ".input_scale");
      const Loaded pqs = load(c, p + mod + ".pre_quant_scale");
      ASSERT_EQ(codes.dtype, DType::I8);
      ASSERT_EQ(codes.shape, w0.shape);
      EXPECT_EQ(scale.dtype, DType::F32);
      EXPECT_EQ(scale.shape, (Shape{w0.shape[0]}));
      EXPECT_EQ(is.dtype, DType::F32);
      EXPECT_EQ(is.shape, Shape{});
      EXPECT_EQ(pqs.dtype, DType::F32);  // the fixtures' dtype
      ASSERT_EQ(pqs.shape, (Shape{w0.shape[1]}));
      float amax = 0.f;
      for (size_t k = 0; k < a.size(); ++k) {
        EXPECT_EQ(pqs.v[k], sq_scale(a[k])) << k;
        amax = std::max(amax, a[k] * pqs.v[k]);
      }
      EXPECT_EQ(is.v[0], amax * (1.0f / 127.0f));
      worst = std::max(worst, check_reconstruction(w0, codes, scale, pqs.v, p + mod));
    }
  }
  EXPECT_LT(worst, 0.05);
  const auto kl = eval_kl(m, out);
  EXPECT_TRUE(std::isfinite(kl["kl_mean"].get<double>()));
  EXPECT_GT(kl["kl_mean"].get<double>(), 0.0);
  // Measured (4000 chars, 16 x 128 calibration): kl 0.016 / 0.033, top-1 0.957 / 0.870
  // (stories260K / tinystories-656K).
  EXPECT_LT(kl["kl_mean"].get<double>(), 0.08);
  EXPECT_GT(kl["top1"].get<double>(), 0.8);
}

TEST_P(SmoothQuantE2E, CompressedTensorsFoldsIntoNorms) {
  QF_REQUIRE_FIXTURES();
  const std::string m = GetParam();
  test::ScratchDir tmp;
  const ChannelAmax cap = capture(m);
  const fs::path out = tmp / "ct";
  const auto r = test::run_qforge("quantize " + quote(model_dir(m)) + " -o " + quote(out) +
                                  " --format int8 --activations int8 --algo smoothquant "
                                  "--export compressed-tensors --calib " +
                                  quote(calib_file()) + kCalib + " -q");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto cfg = read_json_file(out / "config.json")["quantization_config"];
  EXPECT_EQ(cfg["format"], "int-quantized");
  const auto& g = cfg["config_groups"]["group_0"];
  EXPECT_EQ(g["weights"]["strategy"], "channel");
  EXPECT_EQ(g["weights"]["type"], "int");
  EXPECT_EQ(g["input_activations"]["strategy"], "tensor");
  EXPECT_EQ(g["input_activations"]["dynamic"], false);
  EXPECT_FALSE(fs::exists(out / "hf_quant_config.json"));

  const Checkpoint base = Checkpoint::open(model_dir(m));
  const Checkpoint c = Checkpoint::open(out);
  for (size_t l = 0; l < cap.size(); ++l) {
    const std::string p = fmt::format("model.layers.{}.", l);
    // The norms absorbed s = 1/a: norm' = norm * s.
    std::map<LayerInput, std::vector<float>> s;
    for (const auto& [norm, in] : {std::pair{"input_layernorm", LayerInput::attn_norm},
                                   std::pair{"post_attention_layernorm", LayerInput::ffn_norm}}) {
      const Loaded n0 = load(base, p + norm + ".weight");
      const Loaded n1 = load(c, p + norm + ".weight");
      EXPECT_EQ(n1.dtype, n0.dtype);
      std::vector<float>& sv = s[in];
      for (size_t k = 0; k < n0.v.size(); ++k) {
        sv.push_back(sq_scale(cap[l][size_t(in)][k]));
        EXPECT_EQ(n1.v[k], n0.v[k] * sv.back()) << norm << " " << k;
      }
    }
    for (const auto& [mod, in] : kModules) {
      SCOPED_TRACE(p + mod);
      EXPECT_EQ(c.find(p + mod + ".pre_quant_scale"), nullptr);
      const Loaded w0 = load(base, p + mod + ".weight");
      const Loaded codes = load(c, p + mod + ".weight");
      const Loaded scale = load(c, p + mod + ".weight_scale");
      const Loaded is = load(c, p + mod + ".input_scale");
      ASSERT_EQ(codes.dtype, DType::I8);
      EXPECT_EQ(scale.shape, (Shape{w0.shape[0], 1}));
      EXPECT_EQ(is.shape, Shape{1});
      const std::vector<float>& a = cap[l][size_t(in)];
      const bool smoothed = s.count(in) > 0;  // o_proj / down_proj are not
      const std::vector<float> ones(a.size(), 1.f);
      const std::vector<float>& sv = smoothed ? s[in] : ones;
      float amax = 0.f;
      for (size_t k = 0; k < a.size(); ++k) amax = std::max(amax, a[k] * sv[k]);
      EXPECT_EQ(is.v[0], amax * (1.0f / 127.0f));
      EXPECT_LT(check_reconstruction(w0, codes, scale, sv, p + mod), 0.05);
    }
  }
  const auto kl = eval_kl(m, out);
  EXPECT_TRUE(std::isfinite(kl["kl_mean"].get<double>()));
  EXPECT_GT(kl["kl_mean"].get<double>(), 0.0);
  // Measured: kl 0.0077 / 0.0196, top-1 0.953 / 0.881.
  EXPECT_LT(kl["kl_mean"].get<double>(), 0.05);
  EXPECT_GT(kl["top1"].get<double>(), 0.8);
}

TEST_P(SmoothQuantE2E, Int8MaxHasNoPreQuantScale) {
  QF_REQUIRE_FIXTURES();
  const std::string m = GetParam();
  test::ScratchDir tmp;
  const fs::path out = tmp / "max";
  const auto r = test::run_qforge("quantize " + quote(model_dir(m)) + " -o " + quote(out) +
                                  " --format int8 --activations int8 --algo max --calib " +
                                  quote(calib_file()) + kCalib + " -q");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const Checkpoint c = Checkpoint::open(out);
  EXPECT_EQ(c.find("model.layers.0.self_attn.q_proj.pre_quant_scale"), nullptr);
  EXPECT_NE(c.find("model.layers.0.self_attn.q_proj.input_scale"), nullptr);
  EXPECT_EQ(read_json_file(out / "config.json")["quantization_config"]["quant_algo"],
            "W8A8_SQ_PER_CHANNEL");
  const auto kl = eval_kl(m, out);
  EXPECT_TRUE(std::isfinite(kl["kl_mean"].get<double>()));
  EXPECT_LT(kl["kl_mean"].get<double>(), 0.05);  // measured 0.0077 / 0.0185
}

TEST_P(SmoothQuantE2E, AlphaSetsTheMigrationStrength) {
  QF_REQUIRE_FIXTURES();
  const std::string m = GetParam();
  test::ScratchDir tmp;
  const std::string name = "model.layers.0.self_attn.q_proj.pre_quant_scale";
  std::map<std::string, std::vector<float>> pqs;
  for (const std::string alpha : {"1", "0"}) {
    const fs::path out = tmp / alpha;
    const auto r = test::run_qforge("quantize " + quote(model_dir(m)) + " -o " + quote(out) +
                                    " --format int8 --activations int8 --algo smoothquant "
                                    "--smoothquant-alpha " + alpha + " --calib " +
                                    quote(calib_file()) + kCalib + " -q");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    pqs[alpha] = load(Checkpoint::open(out), name).v;
  }
  ASSERT_EQ(pqs["1"].size(), pqs["0"].size());
  // alpha 0: s = w_max (clamped), from the weights alone; alpha 1: s = 1 / a_max.
  EXPECT_NE(pqs["1"], pqs["0"]);
  const Checkpoint src = Checkpoint::open(model_dir(m));
  std::vector<float> w_max(pqs["0"].size(), 0.f);
  for (const char* proj : {"q_proj", "k_proj", "v_proj"}) {
    const auto w = load(src, std::string("model.layers.0.self_attn.") + proj + ".weight");
    const size_t in = w_max.size();
    for (size_t i = 0; i < w.v.size(); ++i) w_max[i % in] = std::max(w_max[i % in], std::fabs(w.v[i]));
  }
  for (size_t c = 0; c < w_max.size(); ++c)
    EXPECT_FLOAT_EQ(pqs["0"][c], std::clamp(w_max[c], 1e-4f, 1e4f)) << c;
}

TEST_P(SmoothQuantE2E, EngineLoadsBothExportsAsW8A8) {
  // What the engine simulates: x * pre_quant_scale (ModelOpt only), then static INT8
  // quantize-dequantize with input_scale, times the dequantized INT8 weight.
  QF_REQUIRE_FIXTURES();
  const std::string m = GetParam();
  test::ScratchDir tmp;
  for (const char* exp : {"modelopt", "compressed-tensors"}) {
    SCOPED_TRACE(exp);
    const fs::path out = tmp / exp;
    const auto r = test::run_qforge("quantize " + quote(model_dir(m)) + " -o " + quote(out) +
                                    " --format int8 --activations int8 --algo smoothquant "
                                    "--export " + exp + " --calib " + quote(calib_file()) + kCalib +
                                    " -q");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const bool ct = std::string(exp) == "compressed-tensors";
    const ModelWeights w = ModelWeights::load(out);
    EXPECT_EQ(w.quantization, ct ? "compressed-tensors int-quantized"
                                 : "modelopt W8A8_SQ_PER_CHANNEL");
    const Checkpoint c = Checkpoint::open(out);
    for (const LayerWeights& l : w.layers)
      for (const EngineLinear* L = l.linears.data(); L != l.linears.data() + l.linears.size(); ++L) {
        SCOPED_TRACE(L->name);
        EXPECT_EQ(L->act, ActQuant::int8);
        EXPECT_EQ(L->input_scale, load(c, L->name + ".input_scale").v.at(0));
        if (ct) EXPECT_TRUE(L->pre_scale.empty());
        else EXPECT_EQ(L->pre_scale, load(c, L->name + ".pre_quant_scale").v);
        const Loaded codes = load(c, L->name + ".weight"), scale = load(c, L->name + ".weight_scale");
        // The codes are used as stored (never expanded to float), with float row scales.
        ASSERT_EQ(L->w.format, WeightFormat::int8);
        std::vector<float> row(static_cast<size_t>(L->w.cols));
        for (int64_t i = 0; i < L->w.rows; i += 3) {
          dequantize_weight_rows(L->w, i, 1, row.data());
          for (int64_t k = 0; k < L->w.cols; ++k)
            ASSERT_EQ(row[size_t(k)], codes.v[size_t(i * L->w.cols + k)] * scale.v[size_t(i)]) << i;
        }
      }
  }
  // The activation rule: round half to even of x / scale, clamped to [-128, 127].
  float x[] = {0.5f, 1.5f, -2.5f, 200.f, -300.f, 0.26f};
  fake_quantize_activations(ActQuant::int8, 0.5f, x, 6);
  EXPECT_EQ(x[0], 0.5f);
  EXPECT_EQ(x[1], 1.5f);
  EXPECT_EQ(x[2], -2.5f);
  EXPECT_EQ(x[3], 63.5f);
  EXPECT_EQ(x[4], -64.f);
  EXPECT_EQ(x[5], 0.5f);
  float t[] = {0.25f, 0.75f};
  fake_quantize_activations(ActQuant::int8, 0.5f, t, 2);  // 0.5 and 1.5 steps: to even
  EXPECT_EQ(t[0], 0.f);
  EXPECT_EQ(t[1], 1.f);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, SmoothQuantE2E,
                         ::testing::Values("stories260K-hf", "tinystories-656K-hf"),
                         [](const auto& p) {
                           std::string s = p.param;
                           for (char& ch : s)
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return s;
                         });

TEST(SmoothQuantE2EErrors, RefusedCombinationsAreOneLineErrors) {
  QF_REQUIRE_FIXTURES();
  test::ScratchDir tmp;
  const std::string base = "quantize " + quote(model_dir("stories260K-hf")) + " -o " + quote(tmp / "o");
  const std::string calib = " --calib " + quote(calib_file());
  const std::pair<std::string, std::string> cases[] = {
      {" --format int8 --activations int8 --algo smoothquant",
       "--activations int8 needs calibration data: pass --calib FILE"},
      {" --format int8" + calib, "--format int8 is W8A8: pass --activations int8"},
      {" --format fp8 --activations int8" + calib, "--activations int8 (W8A8) needs --format int8"},
      {" --format nvfp4 --algo smoothquant" + calib, "--algo smoothquant needs --format int8"},
      {" --format int8 --activations int8 --algo gptq" + calib,
       "--format int8 supports --algo smoothquant or max, not gptq"},
      {" --format int8 --activations int8 --algo max --smoothquant-alpha 0.5" + calib,
       "--smoothquant-alpha applies to --algo smoothquant only"},
  };
  for (const auto& [flags, message] : cases) {
    const auto r = test::run_qforge(base + flags);
    EXPECT_EQ(r.exit_code, 1) << flags;
    EXPECT_NE(r.err.find(message), std::string::npos) << flags << ": " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
  EXPECT_FALSE(fs::exists(tmp / "o"));
}

}  // namespace
}  // namespace qf

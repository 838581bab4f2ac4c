// End to end: calibrated exports (NVFP4 W4A4, FP8 W8A8 per-tensor, FP8 KV cache, AWQ, GPTQ) on
// both fixture models and both exports: tensor names, dtypes, shapes and config fields per the
// specs, input scales equal to the captured activation amax / maxbound and shared by fused
// groups, and `qforge eval kl` of the engine's simulation against the original.
#include "calib/calibration_data.h"
#include "calib/layer_calibration.h"
#include "engine/model.h"
#include "io/checkpoint.h"
#include "io/json_file.h"
#include "io/tokenizer.h"
#include "e2e/calibration_capture.h"
#include "test_util.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstring>
#include <map>

namespace fs = std::filesystem;

namespace qf {
namespace {

using test::model_dir;
using test::eval_kl;
using test::quote;

using test::calib_file;
const char* kCalib = test::kCalibFlags;

float f32_of(const Checkpoint& c, const std::string& name, DType* dtype = nullptr,
             Shape* shape = nullptr) {
  const CheckpointTensor* t = c.find(name);
  EXPECT_NE(t, nullptr) << name;
  if (!t) return NAN;
  if (dtype) *dtype = t->entry->dtype;
  if (shape) *shape = t->entry->shape;
  const TensorView v = t->file->view(*t->entry);
  float f = NAN;
  if (v.dtype == DType::F32) std::memcpy(&f, v.data, 4);
  return f;
}

// The per-layer captured amaxes, computed in-process exactly as `quantize` does.
struct Captured {
  std::vector<std::array<float, kLayerInputs>> in;
  std::vector<std::pair<float, float>> kv;
};
Captured capture(const std::string& m) {
  Captured c;
  test::capture_calibration(m, [&](int64_t, LayerCapture& cap) {
    std::array<float, kLayerInputs> a{};
    for (int i = 0; i < kLayerInputs; ++i) a[size_t(i)] = cap.inputs[size_t(i)].input_amax;
    c.in.push_back(a);
    c.kv.push_back({cap.k_amax, cap.v_amax});
  });
  return c;
}

class CalibratedE2E : public ::testing::TestWithParam<std::string> {};

TEST_P(CalibratedE2E, Nvfp4W4A4WithFp8KvBothExports) {
  QF_REQUIRE_FIXTURES();
  const std::string m = GetParam();
  test::ScratchDir tmp;
  const Captured cap = capture(m);
  for (const char* exp : {"modelopt", "compressed-tensors"}) {
    SCOPED_TRACE(std::string(m) + " " + exp);
    const fs::path out = tmp / exp;
    const auto r = test::run_qforge("quantize " + quote(model_dir(m)) + " -o " + quote(out) +
                                    " --format nvfp4 --activations nvfp4 --kv-cache fp8 --export " +
                                    exp + " --calib " + quote(calib_file()) + kCalib + " --json -q");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const auto rep = nlohmann::json::parse(r.out);
    EXPECT_EQ(rep["calib_tokens"].get<int64_t>(), 16 * 128);
    EXPECT_GT(rep["activation_bytes"].get<uint64_t>(), 0u);
    const bool ct = std::string(exp) == "compressed-tensors";
    const Checkpoint c = Checkpoint::open(out);
    const auto cfg = read_json_file(out / "config.json")["quantization_config"];
    if (!ct) {
      EXPECT_EQ(cfg["quant_algo"], "NVFP4");
      EXPECT_EQ(cfg["config_groups"]["group_0"]["input_activations"]["num_bits"], 4);
      EXPECT_EQ(cfg["config_groups"]["group_0"]["input_activations"]["group_size"], 16);
      EXPECT_EQ(cfg["kv_cache_scheme"]["num_bits"], 8);
      const auto hf = read_json_file(out / "hf_quant_config.json")["quantization"];
      EXPECT_EQ(hf["quant_algo"], "NVFP4");
      EXPECT_EQ(hf["kv_cache_quant_algo"], "FP8");
    } else {
      const auto& ia = cfg["config_groups"]["group_0"]["input_activations"];
      EXPECT_EQ(ia["dynamic"], "local");
      EXPECT_EQ(ia["strategy"], "tensor_group");
      EXPECT_EQ(ia["group_size"], 16);
      EXPECT_EQ(ia["num_bits"], 4);
      EXPECT_EQ(cfg["kv_cache_scheme"]["strategy"], "tensor");
      EXPECT_EQ(cfg["kv_cache_scheme"]["dynamic"], false);
      EXPECT_EQ(cfg["kv_cache_scheme"]["symmetric"], true);
    }
    const int64_t layers = int64_t(cap.in.size());
    for (int64_t l = 0; l < layers; ++l) {
      const std::string p = "model.layers." + std::to_string(l) + ".";
      const auto& a = cap.in[size_t(l)];
      // Expected ModelOpt input_scale per module (q/k/v and gate/up share their input).
      const std::map<std::string, float> expect = {
          {"self_attn.q_proj", a[0]}, {"self_attn.k_proj", a[0]}, {"self_attn.v_proj", a[0]},
          {"self_attn.o_proj", a[1]}, {"mlp.gate_proj", a[2]},    {"mlp.up_proj", a[2]},
          {"mlp.down_proj", a[3]}};
      for (const auto& [mod, amax] : expect) {
        // stories260K's down_proj (172 inputs) is left unquantized: no input scale.
        if (!c.find(p + mod + ".weight_scale")) {
          EXPECT_EQ(c.find(p + mod + ".input_scale"), nullptr);
          EXPECT_EQ(m, "stories260K-hf");
          continue;
        }
        DType dt = DType::U8;
        Shape sh = {-1};
        const float want = amax * (1.0f / 2688.0f);
        if (!ct) {
          EXPECT_EQ(f32_of(c, p + mod + ".input_scale", &dt, &sh), want) << mod;
          EXPECT_EQ(sh, Shape{});
        } else {
          EXPECT_EQ(f32_of(c, p + mod + ".input_global_scale", &dt, &sh), 1.0f / want) << mod;
          EXPECT_EQ(sh, Shape{1});
        }
        EXPECT_EQ(dt, DType::F32);
      }
      // Fused groups: bit-equal weight global scales.
      const std::string g = ct ? ".weight_global_scale" : ".weight_scale_2";
      EXPECT_EQ(f32_of(c, p + "self_attn.q_proj" + g), f32_of(c, p + "self_attn.k_proj" + g));
      EXPECT_EQ(f32_of(c, p + "self_attn.q_proj" + g), f32_of(c, p + "self_attn.v_proj" + g));
      EXPECT_EQ(f32_of(c, p + "mlp.gate_proj" + g), f32_of(c, p + "mlp.up_proj" + g));
      // KV scales.
      const float ks = cap.kv[size_t(l)].first * (1.0f / 448.0f);
      const float vs = cap.kv[size_t(l)].second * (1.0f / 448.0f);
      if (!ct) {
        Shape sh;
        EXPECT_EQ(f32_of(c, p + "self_attn.k_proj.k_scale", nullptr, &sh), ks);
        EXPECT_EQ(sh, Shape{});
        EXPECT_EQ(f32_of(c, p + "self_attn.v_proj.v_scale"), vs);
      } else {
        const CheckpointTensor* k = c.find(p + "self_attn.k_scale");
        ASSERT_NE(k, nullptr);
        EXPECT_EQ(k->entry->shape, Shape{1});
        EXPECT_NE(c.find(p + "self_attn.v_scale"), nullptr);
      }
    }
    const auto kl = eval_kl(m, out);
    EXPECT_TRUE(std::isfinite(kl["kl_mean"].get<double>()));
    EXPECT_GT(kl["kl_mean"].get<double>(), 0.0);
    EXPECT_LT(kl["kl_mean"].get<double>(), 0.5);
    EXPECT_GT(kl["top1"].get<double>(), 0.55);
  }
}

TEST_P(CalibratedE2E, Fp8W8A8PerTensorBothExports) {
  QF_REQUIRE_FIXTURES();
  const std::string m = GetParam();
  test::ScratchDir tmp;
  for (const char* exp : {"modelopt", "compressed-tensors"}) {
    SCOPED_TRACE(std::string(m) + " " + exp);
    const fs::path out = tmp / exp;
    const auto r = test::run_qforge("quantize " + quote(model_dir(m)) + " -o " + quote(out) +
                                    " --format fp8 --activations fp8 --export " + exp +
                                    " --calib " + quote(calib_file()) + kCalib + " -q");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const bool ct = std::string(exp) == "compressed-tensors";
    const Checkpoint c = Checkpoint::open(out);
    const std::string mod = "model.layers.0.self_attn.o_proj";
    const CheckpointTensor* ws = c.find(mod + ".weight_scale");
    const CheckpointTensor* is = c.find(mod + ".input_scale");
    ASSERT_NE(ws, nullptr);
    ASSERT_NE(is, nullptr);
    EXPECT_EQ(ws->entry->shape, ct ? Shape{1} : Shape{});
    EXPECT_EQ(is->entry->shape, ct ? Shape{1} : Shape{});
    EXPECT_EQ(c.find(mod + ".weight")->entry->dtype, DType::F8_E4M3);
    const auto cfg = read_json_file(out / "config.json")["quantization_config"];
    if (!ct) {
      EXPECT_EQ(cfg["quant_algo"], "FP8");
      EXPECT_EQ(cfg["config_groups"]["group_0"]["input_activations"]["num_bits"], 8);
    } else {
      EXPECT_EQ(cfg["config_groups"]["group_0"]["weights"]["strategy"], "tensor");
      EXPECT_EQ(cfg["config_groups"]["group_0"]["input_activations"]["strategy"], "tensor");
      EXPECT_EQ(cfg["config_groups"]["group_0"]["input_activations"]["dynamic"], false);
    }
    const auto kl = eval_kl(m, out);
    EXPECT_TRUE(std::isfinite(kl["kl_mean"].get<double>()));
    EXPECT_LT(kl["kl_mean"].get<double>(), 0.05);
  }
}

TEST_P(CalibratedE2E, AwqAndGptqWeights) {
  QF_REQUIRE_FIXTURES();
  const std::string m = GetParam();
  test::ScratchDir tmp;
  for (const char* algo : {"awq", "gptq"}) {
    for (const char* exp : {"modelopt", "compressed-tensors"}) {
      SCOPED_TRACE(std::string(m) + " " + algo + " " + exp);
      const fs::path out = tmp / (std::string(algo) + exp);
      const auto r = test::run_qforge("quantize " + quote(model_dir(m)) + " -o " + quote(out) +
                                      " --format nvfp4 --algo " + algo + " --export " + exp +
                                      " --calib " + quote(calib_file()) + kCalib + " -q");
      ASSERT_EQ(r.exit_code, 0) << r.err;
      const Checkpoint c = Checkpoint::open(out);
      const bool awq_modelopt = std::string(algo) == "awq" && std::string(exp) == "modelopt";
      EXPECT_EQ(c.find("model.layers.0.self_attn.o_proj.pre_quant_scale") != nullptr, awq_modelopt);
      if (awq_modelopt) {
        const auto hf = read_json_file(out / "hf_quant_config.json")["quantization"];
        EXPECT_EQ(hf["quant_algo"], "NVFP4_AWQ");
      }
      const auto kl = eval_kl(m, out);
      EXPECT_TRUE(std::isfinite(kl["kl_mean"].get<double>()));
      EXPECT_LT(kl["kl_mean"].get<double>(), 0.25);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CalibratedE2E,
                         ::testing::Values("stories260K-hf", "tinystories-656K-hf"),
                         [](const auto& p) {
                           std::string s = p.param;
                           for (char& ch : s)
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return s;
                         });

TEST(CalibratedE2EErrors, ActivationsWithoutCalibIsAClearError) {
  QF_REQUIRE_FIXTURES();
  test::ScratchDir tmp;
  const auto r = test::run_qforge("quantize " + quote(model_dir("stories260K-hf")) + " -o " +
                                  quote(tmp / "o") + " --activations nvfp4");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("--activations nvfp4 needs calibration data: pass --calib FILE"),
            std::string::npos)
      << r.err;
  const auto f = test::run_qforge("quantize " + quote(model_dir("stories260K-hf")) + " -o " +
                                  quote(tmp / "o") + " --format int4 --activations nvfp4 --calib " +
                                  quote(calib_file()));
  EXPECT_EQ(f.exit_code, 1);
  EXPECT_NE(f.err.find("needs --format nvfp4"), std::string::npos) << f.err;
}

}  // namespace
}  // namespace qf

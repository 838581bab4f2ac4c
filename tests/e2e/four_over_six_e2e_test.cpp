// End to end: --algo four_over_six (and four_over_six+gptq, W4A4, --auto's nvfp4:4o6 candidate,
// recipes) on the fixture models through the CLI. The export is an ordinary NVFP4 checkpoint
// whose only fingerprints are Four Over Six's (specs moe-hybrid §1.4): FP8 block scales at most
// 384 (256 x 1.5) and weight_scale_2 = the fused group's amax / 1536.
#include "core/numeric.h"
#include "io/checkpoint.h"
#include "io/json_file.h"
#include "test_util.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>

namespace fs = std::filesystem;

namespace qf {
namespace {

using test::model_dir;
using test::quote;

const std::string kCalib = test::shakespeare_calib(16, 128, 3);

float max_abs_of(const Checkpoint& c, const std::string& name) {
  const CheckpointTensor* t = c.find(name);
  EXPECT_NE(t, nullptr) << name;
  if (!t) return NAN;
  const TensorView v = t->file->view(*t->entry);
  EXPECT_EQ(v.dtype, DType::F32) << name;  // the fixtures are F32
  float a = 0.f;
  for (size_t i = 0; i < v.nbytes / 4; ++i) {
    float x;
    std::memcpy(&x, v.data + 4 * i, 4);
    a = std::max(a, std::fabs(x));
  }
  return a;
}

float scalar_of(const Checkpoint& c, const std::string& name) {
  const CheckpointTensor* t = c.find(name);
  EXPECT_NE(t, nullptr) << name;
  if (!t) return NAN;
  const TensorView v = t->file->view(*t->entry);
  EXPECT_EQ(v.dtype, DType::F32) << name;
  float f = NAN;
  std::memcpy(&f, v.data, 4);
  return f;
}

// Checks every quantized Linear of `out` (made from fixture `m` with --algo four_over_six):
// block scales <= 384, some above 256 (M=4 where the group amax lies), weight_scale_2 = group
// amax * fl32(1/1536) (GPU division, the default), compressed-tensors storing its reciprocal.
void check_fingerprints(const std::string& m, const fs::path& out, bool ct) {
  const Checkpoint in = Checkpoint::open(model_dir(m));
  const Checkpoint q = Checkpoint::open(out);
  const std::vector<std::vector<std::string>> groups = {
      {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"},
      {"self_attn.o_proj"},
      {"mlp.gate_proj", "mlp.up_proj"},
      {"mlp.down_proj"}};
  int checked = 0;
  float top = 0.f;
  for (int l = 0;; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    if (!in.find(p + "self_attn.q_proj.weight")) break;
    for (const auto& g : groups) {
      if (!q.find(p + g[0] + ".weight_scale")) continue;  // left unquantized (172 inputs)
      float amax = 0.f;
      for (const auto& mod : g) amax = std::max(amax, max_abs_of(in, p + mod + ".weight"));
      const float ws2 = amax * (1.0f / 1536.0f);
      for (const auto& mod : g) {
        SCOPED_TRACE(p + mod);
        if (ct)
          EXPECT_EQ(scalar_of(q, p + mod + ".weight_global_scale"), 1.0f / ws2);
        else
          EXPECT_EQ(scalar_of(q, p + mod + ".weight_scale_2"), ws2);
        const CheckpointTensor* s = q.find(p + mod + ".weight_scale");
        ASSERT_NE(s, nullptr);
        ASSERT_EQ(s->entry->dtype, DType::F8_E4M3);
        const TensorView v = s->file->view(*s->entry);
        float mx = 0.f;
        for (size_t i = 0; i < v.nbytes; ++i)
          mx = std::max(mx, e4m3_to_f32(static_cast<uint8_t>(v.data[i])));
        EXPECT_LE(mx, 384.f);
        top = std::max(top, mx);
        ++checked;
      }
    }
  }
  EXPECT_GT(checked, 0);
  EXPECT_EQ(top, 384.f);  // some group-amax block maps its max to 4
}

class FourOverSixE2E : public ::testing::TestWithParam<std::string> {};

TEST_P(FourOverSixE2E, ExportsCarryTheFingerprintsAndBeatRoundToNearest) {
  QF_REQUIRE_FIXTURES();
  const std::string m = GetParam();
  test::ScratchDir tmp;
  const auto base = test::run_qforge("quantize " + quote(model_dir(m)) + " -o " +
                                     quote(tmp / "max") + " --format nvfp4 -q");
  ASSERT_EQ(base.exit_code, 0) << base.err;
  const double kl_max = test::eval_kl_mean(m, tmp / "max");
  for (const char* exp : {"modelopt", "compressed-tensors"}) {
    SCOPED_TRACE(m + " " + exp);
    const fs::path out = tmp / (std::string("46") + exp);
    const auto r = test::run_qforge("quantize " + quote(model_dir(m)) + " -o " + quote(out) +
                                    " --algo four_over_six --export " + exp + " --json");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const auto j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["algo"], "four_over_six");
    ASSERT_TRUE(j.contains("four_over_six"));
    const int64_t blocks = j["four_over_six"]["blocks"].get<int64_t>();
    const int64_t m4 = j["four_over_six"]["m4_blocks"].get<int64_t>();
    EXPECT_EQ(blocks * 16, j["quantized_weights"].get<int64_t>());
    EXPECT_GT(m4, blocks / 5);  // measured: 45% on both fixtures
    EXPECT_LT(m4, blocks - blocks / 5);
    const bool ct = std::string(exp) == "compressed-tensors";
    check_fingerprints(m, out, ct);
    // Nothing marks 4/6: an ordinary NVFP4 weight-only checkpoint.
    if (!ct) {
      const auto hf = read_json_file(out / "hf_quant_config.json");
      EXPECT_EQ(hf["quantization"]["quant_algo"], "W4A16_NVFP4");
      EXPECT_EQ(hf.dump().find("four"), std::string::npos);
    } else {
      const auto cfg = read_json_file(out / "config.json");
      EXPECT_EQ(cfg["quantization_config"]["format"], "nvfp4-pack-quantized");
    }
    EXPECT_LT(test::eval_kl_mean(m, out), kl_max);
  }
}

TEST_P(FourOverSixE2E, WithGptqAndNvfp4Activations) {
  QF_REQUIRE_FIXTURES();
  const std::string m = GetParam();
  test::ScratchDir tmp;
  const auto a = test::run_qforge("quantize " + quote(model_dir(m)) + " -o " + quote(tmp / "46") +
                                  " --algo four_over_six -q");
  ASSERT_EQ(a.exit_code, 0) << a.err;
  const auto g = test::run_qforge("quantize " + quote(model_dir(m)) + " -o " +
                                  quote(tmp / "46gptq") + " --algo four_over_six+gptq -q" + kCalib);
  ASSERT_EQ(g.exit_code, 0) << g.err;
  check_fingerprints(m, tmp / "46gptq", false);  // GPTQ keeps the 4/6 scales
  // The scales are the same tensors as without GPTQ; the codes move.
  const Checkpoint c46 = Checkpoint::open(tmp / "46"), cg = Checkpoint::open(tmp / "46gptq");
  const std::string w = "model.layers.0.self_attn.q_proj.weight";
  auto bytes = [](const Checkpoint& c, const std::string& n) {
    const CheckpointTensor* t = c.find(n);
    EXPECT_NE(t, nullptr) << n;
    const TensorView v = t->file->view(*t->entry);
    return std::string(reinterpret_cast<const char*>(v.data), v.nbytes);
  };
  EXPECT_EQ(bytes(c46, w + "_scale"), bytes(cg, w + "_scale"));
  EXPECT_EQ(bytes(c46, w + "_scale_2"), bytes(cg, w + "_scale_2"));
  EXPECT_NE(bytes(c46, w), bytes(cg, w));
  EXPECT_LT(test::eval_kl_mean(m, tmp / "46gptq"), test::eval_kl_mean(m, tmp / "46"));
  // W4A4 (the ModelOpt preset's activations): input scales, same weights as weight-only.
  const auto w4a4 = test::run_qforge("quantize " + quote(model_dir(m)) + " -o " +
                                     quote(tmp / "w4a4") + " --algo four_over_six --activations "
                                     "nvfp4 -q" + kCalib);
  ASSERT_EQ(w4a4.exit_code, 0) << w4a4.err;
  const Checkpoint c4 = Checkpoint::open(tmp / "w4a4");
  EXPECT_NE(c4.find("model.layers.0.self_attn.q_proj.input_scale"), nullptr);
  EXPECT_EQ(bytes(c46, w), bytes(c4, w));
  EXPECT_EQ(bytes(c46, w + "_scale"), bytes(c4, w + "_scale"));
  EXPECT_EQ(read_json_file(tmp / "w4a4" / "hf_quant_config.json")["quantization"]["quant_algo"],
            "NVFP4");
  EXPECT_TRUE(std::isfinite(test::eval_kl_mean(m, tmp / "w4a4")));
}

INSTANTIATE_TEST_SUITE_P(Fixtures, FourOverSixE2E,
                         ::testing::Values("stories260K-hf", "tinystories-656K-hf"),
                         [](const auto& p) {
                           std::string s = p.param;
                           return s.substr(0, s.find('-'));
                         });

// --auto with nvfp4:4o6 among the candidates, its saved recipe replayed: the same bytes.
TEST(FourOverSixE2EPlans, AutoCandidateAndRecipeReplay) {
  QF_REQUIRE_FIXTURES();
  const std::string m = "tinystories-656K-hf";
  test::ScratchDir tmp;
  const auto a = test::run_qforge(
      "quantize " + quote(model_dir(m)) + " -o " + quote(tmp / "auto") +
      " --auto --target-bits 5 --formats nvfp4,nvfp4:4o6,fp8 --save-recipe " +
      quote(tmp / "r.json") + " --json -q" + kCalib);
  ASSERT_EQ(a.exit_code, 0) << a.err;
  const auto j = nlohmann::json::parse(a.out);
  ASSERT_TRUE(j.contains("four_over_six")) << a.out;
  bool chose_46 = false;
  for (const auto& u : j["auto"]["units"]) chose_46 = chose_46 || u["format"] == "nvfp4:4o6";
  EXPECT_TRUE(chose_46) << a.out;
  const auto recipe = read_json_file(tmp / "r.json");
  bool rule_46 = false;
  for (const auto& r : recipe["rules"])
    rule_46 = rule_46 || (r["format"] == "nvfp4" && r.value("algo", "") == "four_over_six");
  EXPECT_TRUE(rule_46);
  const auto b = test::run_qforge("quantize " + quote(model_dir(m)) + " -o " + quote(tmp / "replay") +
                                  " --recipe " + quote(tmp / "r.json") + " -q");
  ASSERT_EQ(b.exit_code, 0) << b.err;
  EXPECT_EQ(test::read_file(tmp / "auto" / "model.safetensors"),
            test::read_file(tmp / "replay" / "model.safetensors"));
  // The same recipe with "nvfp4:4o6" spelled as the format.
  test::write_file(tmp / "all46.json", R"({"rules": [{"match": "*", "format": "nvfp4:4o6"}]})");
  const auto c = test::run_qforge("quantize " + quote(model_dir(m)) + " -o " + quote(tmp / "all") +
                                  " --recipe " + quote(tmp / "all46.json") + " -q");
  ASSERT_EQ(c.exit_code, 0) << c.err;
  const auto d = test::run_qforge("quantize " + quote(model_dir(m)) + " -o " + quote(tmp / "flag") +
                                  " --algo four_over_six -q");
  ASSERT_EQ(d.exit_code, 0) << d.err;
  EXPECT_EQ(test::read_file(tmp / "all" / "model.safetensors"),
            test::read_file(tmp / "flag" / "model.safetensors"));
}

TEST(FourOverSixE2EErrors, RefusalsAreOneLine) {
  QF_REQUIRE_FIXTURES();
  test::ScratchDir tmp;
  const std::string q = "quantize " + quote(model_dir("stories260K-hf")) + " -o " + quote(tmp / "o");
  const std::map<std::string, std::string> cases = {
      {" --format int4 --algo four_over_six",
       "--algo four_over_six needs --format nvfp4 (it chooses each NVFP4 block's scale), not int4"},
      {" --algo four_over_six+gptq", "--algo four_over_six+gptq needs calibration data"},
      {" --algo four_over_six --export gguf --format q4_0",
       "--algo four_over_six: GGUF takes max, imatrix or gptq"},
  };
  for (const auto& [flags, msg] : cases) {
    const auto r = test::run_qforge(q + flags);
    EXPECT_EQ(r.exit_code, 1) << flags;
    EXPECT_NE(r.err.find(msg), std::string::npos) << flags << ": " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
  test::write_file(tmp / "bad.json", R"({"rules": [{"match": "*", "format": "mxfp4", "algo": "four_over_six"}]})");
  const auto r = test::run_qforge(q + " --recipe " + quote(tmp / "bad.json"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("algo four_over_six chooses NVFP4 block scales or an FP8 W8A8 tensor's "
                       "amax; it needs format nvfp4, or fp8 with activations fp8, not mxfp4"),
            std::string::npos) << r.err;
}

}  // namespace
}  // namespace qf

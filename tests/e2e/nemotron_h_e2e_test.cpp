// Nemotron-H end to end through the CLI on both conformance cases (tiny random hybrid models:
// Mamba2, attention, MLP and MoE layers; the second with a latent MoE and Mamba biases): every
// Linear kind quantized in both exports and by the calibrated algorithms (the Mamba in/out
// projections with their own input statistics), the Mamba tensors, routers and norms copied
// unchanged, the engine loading each export, and `eval kl` against the original.
#include "core/convert.h"
#include "core/numeric.h"
#include "io/safetensors.h"
#include "test_util.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>

namespace qf {
namespace {

namespace fs = std::filesystem;
using test::quote;
using test::run_qforge;

class NemotronHE2E : public ::testing::TestWithParam<std::string> {};

// The squared error of `w` (BF16) stored as E4M3 codes of w / s, as ModelOpt rounds it.
double fp8_error(const std::vector<float>& w, float s) {
  double e = 0;
  for (float v : w) {
    const float r = e4m3_to_f32(f32_to_e4m3(std::clamp(round_through(DType::BF16, v / s), -448.f, 448.f))) * s;
    e += double(v - r) * double(v - r);
  }
  return e;
}

// A ModelOpt FP8 per-tensor weight of the export: its scale is amax / 448 with amax 1.0x or
// 1.5x the original weight's max, the one with the lower error (ties: 1.0x).
void expect_fp8_amax_choice(const SafetensorsFile& orig, const SafetensorsFile& written,
                            const std::string& module) {
  SCOPED_TRACE(module);
  const SafetensorsEntry* w = orig.find(module + ".weight");
  const SafetensorsEntry* sc = written.find(module + ".weight_scale");
  ASSERT_TRUE(w && sc);
  const TensorView v = orig.view(*w);
  std::vector<float> f(size_t(v.numel()));
  float max = 0;
  for (size_t i = 0; i < f.size(); ++i) {
    uint16_t h;
    std::memcpy(&h, v.data + 2 * i, 2);
    f[i] = bf16_to_f32(h);
    max = std::max(max, std::fabs(f[i]));
  }
  float s;
  std::memcpy(&s, written.view(*sc).data, 4);
  const float s1 = max / 448.f, s15 = 1.5f * max / 448.f;
  const double e1 = fp8_error(f, s1), e15 = fp8_error(f, s15);
  EXPECT_FLOAT_EQ(s, e15 < e1 ? s15 : s1) << "errors " << e1 << " (1.0x) " << e15 << " (1.5x)";
}

fs::path case_dir(const std::string& name) {
  return fs::path(QFORGE_SOURCE_DIR) / "tests/data/conformance" / name;
}
std::string text_flags() {
  return " --text " + quote(test::fixtures_dir() / "corpora" / "tinystories_valid_subset.txt") +
         " --max-chars 3000 --ctx 128 --json";
}
std::string calib_flags() {
  return " --calib " + quote(test::fixtures_dir() / "corpora" / "tinyshakespeare.txt") +
         " --calib-samples 4 --calib-seq 64";
}

TEST_P(NemotronHE2E, QuantizeEveryLinearKindAndEval) {
  QF_REQUIRE_FIXTURES();
  const fs::path src = case_dir(GetParam());
  if (!fs::exists(src)) GTEST_SKIP() << "conformance data missing";
  test::ScratchDir dir;
  test::copy_conformance_case(src, dir / "model");
  const std::string text = text_flags(), calib = calib_flags();
  const SafetensorsFile orig = SafetensorsFile::open(src / "model.safetensors");
  const std::string mamba = "backbone.layers.0.mixer.";
  struct Run {
    std::string name, flags;
  };
  std::map<std::string, double> kl_of;
  for (const Run& run :
       {Run{"nvfp4-modelopt", ""}, Run{"nvfp4-ct", "--export compressed-tensors"},
        Run{"four-over-six", "--algo four_over_six"},
        Run{"awq", "--algo awq" + calib}, Run{"gptq-ct", "--algo gptq --export compressed-tensors" + calib},
        Run{"w4a4", "--qformat nvfp4" + calib},
        Run{"fp8-w8a8", "--format fp8 --activations fp8" + calib}}) {
    SCOPED_TRACE(run.name);
    const fs::path out = dir / run.name;
    const auto q = run_qforge("quantize " + quote(dir / "model") + " -o " + quote(out) + " " +
                              run.flags + " --json -q");
    ASSERT_EQ(q.exit_code, 0) << q.err;
    const auto summary = nlohmann::json::parse(q.out);
    EXPECT_EQ(summary["modules_excluded"], 0) << q.out;
    // The Mamba projections are quantized; conv1d, A_log, D, dt_bias and the gated norm are
    // copied bit for bit (never quantized).
    const SafetensorsFile written = SafetensorsFile::open(out / "model.safetensors");
    const SafetensorsEntry* in_proj = written.find(mamba + "in_proj.weight");
    if (!in_proj) in_proj = written.find(mamba + "in_proj.weight_packed");  // compressed-tensors
    ASSERT_NE(in_proj, nullptr);
    EXPECT_NE(in_proj->dtype, DType::BF16);
    for (const std::string t : {"conv1d.weight", "conv1d.bias", "A_log", "D", "dt_bias",
                                "norm.weight"}) {
      const SafetensorsEntry* a = orig.find(mamba + t);
      const SafetensorsEntry* b = written.find(mamba + t);
      ASSERT_TRUE(a && b) << t;
      ASSERT_EQ(orig.view(*a).nbytes, written.view(*b).nbytes) << t;
      EXPECT_EQ(std::memcmp(orig.view(*a).data, written.view(*b).data, orig.view(*a).nbytes), 0)
          << t;
    }
    const auto kl = run_qforge("eval kl " + quote(dir / "model") + " " + quote(out) + text);
    ASSERT_EQ(kl.exit_code, 0) << kl.err;
    const auto j = nlohmann::json::parse(kl.out);
    const double mean = j["kl_mean"].get<double>();
    // Random weights give flat next-token distributions (perplexity ~440 of 256), so top-1
    // agreement is low even for small errors; the order of the formats is what must hold.
    EXPECT_TRUE(std::isfinite(mean) && mean > 0 && mean < 0.3) << kl.out;
    EXPECT_GT(j["top1"].get<double>(), 0.3) << kl.out;
    kl_of[run.name] = mean;
    std::printf("[nemotron_h e2e] %-18s %-14s kl %.4f top1 %.3f\n", GetParam().c_str(),
                run.name.c_str(), mean, j["top1"].get<double>());
  }
  // Calibrated GPTQ and the Four Over Six block scales beat round-to-nearest; FP8 beats 4 bits;
  // W4A4 loses more than W4A16.
  EXPECT_LT(kl_of["gptq-ct"], kl_of["nvfp4-ct"]);
  EXPECT_LT(kl_of["four-over-six"], kl_of["nvfp4-modelopt"]);
  EXPECT_LT(kl_of["fp8-w8a8"], kl_of["nvfp4-modelopt"]);
  EXPECT_GT(kl_of["w4a4"], kl_of["nvfp4-modelopt"]);
}


// NVIDIA's published recipes as presets: each module lands in the recipe's scheme (inspect reads
// it back from the export's config), the FP8 KV scales ride on the BF16 k_proj / v_proj, the
// engine runs each export, and Four Over Six W4A16 stays closer to the original than W4A4.
TEST_P(NemotronHE2E, PresetsPutEachModuleInTheRecipesScheme) {
  QF_REQUIRE_FIXTURES();
  const fs::path src = case_dir(GetParam());
  if (!fs::exists(src)) GTEST_SKIP() << "conformance data missing";
  test::ScratchDir dir;
  test::copy_conformance_case(src, dir / "model");
  const std::string text = text_flags(), calib = calib_flags();
  // The scheme inspect reports for a module of each kind, per preset ("" = kept in BF16).
  struct Expect {
    std::string preset, exported, expert, shared, mamba, attention, head;
  };
  std::map<std::string, double> kl_of;
  const SafetensorsFile orig = SafetensorsFile::open(src / "model.safetensors");
  const int mamba_layers = GetParam() == "nemotron_h" ? 3 : 2;
  const int moe_layers = GetParam() == "nemotron_h" ? 1 : 2;
  for (const Expect& e :
       {Expect{"nemotron-3.5-lightning-w4a16-nvfp4-4o6", "", "nvfp4", "nvfp4", "fp8 W8A8", "",
               "nvfp4"},
        Expect{"nemotron-3.5-lightning-w4a16-nvfp4-4o6", "--export compressed-tensors", "nvfp4",
               "nvfp4", "fp8 W8A8", "", "nvfp4"},
        Expect{"nemotron-3-super-nvfp4", "", "nvfp4 W4A4", "fp8 W8A8", "fp8 W8A8", "", ""},
        Expect{"nemotron-3-ultra-nvfp4-4o6", "--export compressed-tensors", "nvfp4 W4A4",
               "fp8 W8A8", "fp8 W8A8", "", ""}}) {
    const std::string name = e.preset + (e.exported.empty() ? "" : "-ct");
    SCOPED_TRACE(name);
    const fs::path out = dir / name;
    const auto q = run_qforge("quantize " + quote(dir / "model") + " -o " + quote(out) +
                              " --preset " + e.preset + " " + e.exported + calib + " --json -q");
    ASSERT_EQ(q.exit_code, 0) << q.err;
    const auto summary = nlohmann::json::parse(q.out);
    EXPECT_EQ(summary["kv_cache"], "fp8") << q.out;
    const auto info = test::inspect_json(out);
    const auto& schemes = info["module_schemes"];
    auto scheme_of = [&](const std::string& module) {
      return schemes.contains(module) ? schemes[module].get<std::string>() : std::string();
    };
    const std::string moe = GetParam() == "nemotron_h" ? "backbone.layers.5.mixer."
                                                        : "backbone.layers.1.mixer.";
    const std::string attn = GetParam() == "nemotron_h" ? "backbone.layers.1.mixer."
                                                         : "backbone.layers.2.mixer.";
    EXPECT_EQ(scheme_of(moe + "experts.3.up_proj"), e.expert);
    EXPECT_EQ(scheme_of(moe + "experts.3.down_proj"), e.expert);
    EXPECT_EQ(scheme_of(moe + "shared_experts.up_proj"), e.shared);
    EXPECT_EQ(scheme_of("backbone.layers.0.mixer.in_proj"), e.mamba);
    EXPECT_EQ(scheme_of("backbone.layers.0.mixer.out_proj"), e.mamba);
    EXPECT_EQ(scheme_of(attn + "q_proj"), e.attention);
    EXPECT_EQ(scheme_of("lm_head"), e.head);
    if (GetParam() == "nemotron_h_latent") {
      EXPECT_EQ(scheme_of(moe + "fc1_latent_proj"), "");  // latent projections stay BF16
    }
    // The FP8 KV-cache scales of the BF16 attention.
    const SafetensorsFile written = SafetensorsFile::open(out / "model.safetensors");
    const bool ct = !e.exported.empty();
    EXPECT_NE(written.find(ct ? attn + "k_scale" : attn + "k_proj.k_scale"), nullptr);
    EXPECT_NE(written.find(ct ? attn + "v_scale" : attn + "v_proj.v_scale"), nullptr);
    // Four Over Six on the FP8 W8A8 Mamba projections (Lightning, Ultra): each amax is 1.0x or
    // 1.5x the weight's max, whichever reconstructs the weight with the lower squared error.
    if (e.preset != "nemotron-3-super-nvfp4") {
      // Ultra's FP8 shared experts (up and down per MoE layer) take it too.
      const int shared = e.preset == "nemotron-3-ultra-nvfp4-4o6" ? 2 * moe_layers : 0;
      EXPECT_EQ(summary["fp8_four_over_six_tensors"], 2 * mamba_layers + shared) << q.out;
      if (!ct)
        for (const std::string proj : {"in_proj", "out_proj"})
          expect_fp8_amax_choice(orig, written, "backbone.layers.0.mixer." + proj);
    }
    const auto kl = run_qforge("eval kl " + quote(dir / "model") + " " + quote(out) + text);
    ASSERT_EQ(kl.exit_code, 0) << kl.err;
    const auto j = nlohmann::json::parse(kl.out);
    kl_of[name] = j["kl_mean"].get<double>();
    std::printf("[nemotron_h preset] %-18s %-44s kl %.4f top1 %.3f\n", GetParam().c_str(),
                name.c_str(), kl_of[name], j["top1"].get<double>());
    EXPECT_TRUE(std::isfinite(kl_of[name]) && kl_of[name] > 0 && kl_of[name] < 0.3) << kl.out;
  }
  // Keeping attention in BF16 and the Mamba projections in FP8 beats uniform NVFP4.
  const fs::path uniform = dir / "uniform-nvfp4";
  ASSERT_EQ(run_qforge("quantize " + quote(dir / "model") + " -o " + quote(uniform) + " -q").exit_code,
            0);
  const auto kl = run_qforge("eval kl " + quote(dir / "model") + " " + quote(uniform) + text);
  ASSERT_EQ(kl.exit_code, 0) << kl.err;
  const double uniform_kl = nlohmann::json::parse(kl.out)["kl_mean"].get<double>();
  std::printf("[nemotron_h preset] %-18s %-44s kl %.4f top1 %.3f\n", GetParam().c_str(),
              "uniform nvfp4 (W4A16, max)", uniform_kl,
              nlohmann::json::parse(kl.out)["top1"].get<double>());
  EXPECT_LT(kl_of["nemotron-3.5-lightning-w4a16-nvfp4-4o6"], uniform_kl);
}

INSTANTIATE_TEST_SUITE_P(Conformance, NemotronHE2E,
                         ::testing::Values("nemotron_h", "nemotron_h_latent"),
                         [](const auto& param_info) { return param_info.param; });

}  // namespace
}  // namespace qf

// End to end: a per-module assignment (q/k/v FP8, the rest NVFP4, the first layer's MLP kept)
// through the pipeline, exported as ModelOpt MIXED_PRECISION and compressed-tensors groups per
// format, loaded by the engine, and `qforge eval kl` against the original.
#include "engine/model.h"
#include "formats/int4.h"
#include "io/checkpoint.h"
#include "io/json_file.h"
#include "model/architecture.h"
#include "pipeline/quantize_checkpoint.h"
#include "test_util.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>

namespace fs = std::filesystem;

namespace qf {
namespace {

using test::model_dir;
using test::eval_kl;
using test::quote;

Assignment mixed_assignment(const Architecture& a) {
  Assignment as;
  for (const auto& m : a.linears) {
    ModuleChoice c;
    const bool qkv = m.role == LinearRole::q_proj || m.role == LinearRole::k_proj ||
                     m.role == LinearRole::v_proj;
    const bool mlp0 = m.layer == 0 && (m.role == LinearRole::gate_proj ||
                                       m.role == LinearRole::up_proj ||
                                       m.role == LinearRole::down_proj);
    if (mlp0) continue;  // kept
    c.format = FormatChoice::of(qkv ? Format::fp8 : Format::nvfp4);
    as.modules[m.name] = c;
  }
  return as;
}

class MixedExport : public ::testing::TestWithParam<std::tuple<std::string, ExportFormat>> {};

TEST_P(MixedExport, LoadsAndStaysClose) {
  QF_REQUIRE_FIXTURES();
  const auto [name, exp] = GetParam();
  test::ScratchDir dir;
  const Checkpoint ck = Checkpoint::open(model_dir(name));
  const Architecture a = Architecture::from_config(ck.config(), "config.json");
  QuantizeOptions o;
  o.export_format = exp;
  o.progress = false;
  o.threads = 2;
  o.assignment = mixed_assignment(a);
  const QuantizeReport r = quantize_checkpoint(SourceModel::open(model_dir(name)), dir / "out", o);
  EXPECT_EQ(r.format, "mixed");
  EXPECT_GE(r.modules_excluded, 3);  // plus any whose in_features do not fit NVFP4's block
  const auto config = read_json_file(dir / "out" / "config.json");
  const auto& qc = config["quantization_config"];
  const std::string q0 = a.linears[0].name;  // layer 0 q_proj
  const std::string o1 = "model.layers.1.self_attn.o_proj";
  if (exp == ExportFormat::modelopt) {
    EXPECT_EQ(qc["quant_algo"], "MIXED_PRECISION");
    EXPECT_EQ(qc["ignore"], nlohmann::json::array());
    EXPECT_EQ(qc["config_groups"].size(), 2u);
    EXPECT_EQ(qc["quantized_layers"][q0], nlohmann::json({{"quant_algo", "FP8_PER_CHANNEL_PER_TOKEN"}}));
    EXPECT_EQ(qc["quantized_layers"][o1],
              nlohmann::json({{"quant_algo", "W4A16_NVFP4"}, {"group_size", 16}}));
    EXPECT_FALSE(qc["quantized_layers"].contains("model.layers.0.mlp.down_proj"));
    const auto hf = read_json_file(dir / "out" / "hf_quant_config.json")["quantization"];
    EXPECT_EQ(hf["quant_algo"], "MIXED_PRECISION");
    EXPECT_FALSE(hf.contains("exclude_modules"));
    EXPECT_EQ(hf["quantized_layers"], qc["quantized_layers"]);
    const auto& targets = qc["config_groups"]["group_0"]["targets"];
    EXPECT_TRUE(std::is_sorted(targets.begin(), targets.end()));
  } else {
    EXPECT_EQ(qc["format"], "mixed-precision");
    EXPECT_EQ(qc["config_groups"].size(), 2u);
    EXPECT_EQ(qc["config_groups"]["group_0"]["format"], "float-quantized");
    EXPECT_EQ(qc["config_groups"]["group_1"]["format"], "nvfp4-pack-quantized");
  }
  ModelOptions mo;
  mo.threads = 2;
  const auto model = Model::load(dir / "out", mo);
  const auto& spec = model->arch().layers;
  const auto& layers = model->weights().layers;
  EXPECT_EQ(layers[1].linear(spec[1], LinearRole::q_proj).w.format, WeightFormat::fp8);
  EXPECT_EQ(layers[1].linear(spec[1], LinearRole::o_proj).w.format, WeightFormat::nvfp4);
  EXPECT_NE(layers[0].linear(spec[0], LinearRole::down_proj).w.format, WeightFormat::nvfp4);
  const auto kl = eval_kl(name, dir / "out");
  ASSERT_TRUE(kl.contains("kl_mean"));
  EXPECT_TRUE(std::isfinite(kl["kl_mean"].get<double>()));
  EXPECT_LT(kl["kl_mean"].get<double>(), 0.3);
}

INSTANTIATE_TEST_SUITE_P(
    Models, MixedExport,
    ::testing::Combine(::testing::Values("stories260K-hf", "tinystories-656K-hf"),
                       ::testing::Values(ExportFormat::modelopt, ExportFormat::compressed_tensors)),
    [](const auto& p) {
      return std::string(std::get<0>(p.param) == "stories260K-hf" ? "stories260K" : "ts656K") +
             (std::get<1>(p.param) == ExportFormat::modelopt ? "_modelopt" : "_ct");
    });

// Four formats, INT4 per channel among them (what --auto picks below 4.5 bits).
TEST_P(MixedExport, Int4PerChannelAndMxfp4InTheMix) {
  QF_REQUIRE_FIXTURES();
  const auto [name, exp] = GetParam();
  test::ScratchDir dir;
  const Checkpoint ck = Checkpoint::open(model_dir(name));
  const Architecture a = Architecture::from_config(ck.config(), "config.json");
  QuantizeOptions o;
  o.export_format = exp;
  o.progress = false;
  o.threads = 2;
  o.assignment = Assignment{};
  for (const auto& m : a.linears) {
    ModuleChoice c;
    switch (m.role) {
      case LinearRole::down_proj: c.format = FormatChoice::of(Format::int4, kInt4ChannelGroup); break;
      case LinearRole::gate_proj:
      case LinearRole::up_proj: c.format = FormatChoice::of(Format::mxfp4); break;
      case LinearRole::o_proj: c.format = FormatChoice::of(Format::nvfp4); break;
      default: c.format = FormatChoice::of(Format::fp8); break;
    }
    o.assignment->modules[m.name] = c;
  }
  const QuantizeReport r = quantize_checkpoint(SourceModel::open(model_dir(name)), dir / "out", o);
  EXPECT_EQ(r.format, "mixed");
  const auto qc = read_json_file(dir / "out" / "config.json")["quantization_config"];
  const std::string down = "model.layers.1.mlp.down_proj";
  const int64_t inter = a.linears.back().in_features;
  const bool down_fits = exp == ExportFormat::modelopt || inter % 8 == 0;
  if (exp == ExportFormat::modelopt) {
    EXPECT_EQ(qc["quantized_layers"][down],
              nlohmann::json({{"quant_algo", "W4A16_AWQ"}, {"group_size", inter},
                              {"has_zero_point", false}, {"pre_quant_scale", true}}));
    EXPECT_EQ(qc["quantized_layers"]["model.layers.1.mlp.up_proj"],
              nlohmann::json({{"quant_algo", "mxfp4"}}));
  } else {
    EXPECT_EQ(qc["format"], "mixed-precision");
    bool channel = false;
    for (const auto& [g, group] : qc["config_groups"].items())
      if (group["format"] == "pack-quantized") {
        channel = true;
        EXPECT_EQ(group["weights"]["strategy"], "channel");
        EXPECT_TRUE(group["weights"]["group_size"].is_null());
        EXPECT_NE(std::find(group["targets"].begin(), group["targets"].end(), down),
                  group["targets"].end());
      }
    EXPECT_EQ(channel, down_fits);
  }
  ModelOptions mo;
  mo.threads = 2;
  const auto model = Model::load(dir / "out", mo);
  const auto& spec = model->arch().layers[1];
  const auto& layer = model->weights().layers[1];
  EXPECT_EQ(layer.linear(spec, LinearRole::up_proj).w.format, WeightFormat::mxfp4);
  if (down_fits) {
    EXPECT_EQ(layer.linear(spec, LinearRole::down_proj).w.group, int(inter));
  }
  const auto kl = eval_kl(name, dir / "out");
  ASSERT_TRUE(kl.contains("kl_mean"));
  EXPECT_LT(kl["kl_mean"].get<double>(), 0.4);
}

TEST(MixedExport, OneFormatWritesTheSingleFormatConfig) {
  QF_REQUIRE_FIXTURES();
  test::ScratchDir dir;
  const Checkpoint ck = Checkpoint::open(model_dir("stories260K-hf"));
  const Architecture a = Architecture::from_config(ck.config(), "config.json");
  QuantizeOptions o;
  o.progress = false;
  o.assignment = Assignment{};
  for (const auto& m : a.linears)
    if (m.layer > 0) o.assignment->modules[m.name].format = FormatChoice::of(Format::nvfp4);
  const QuantizeReport r = quantize_checkpoint(SourceModel::open(model_dir("stories260K-hf")), dir / "out", o);
  EXPECT_EQ(r.format, "nvfp4");
  const auto qc = read_json_file(dir / "out" / "config.json")["quantization_config"];
  EXPECT_EQ(qc["quant_algo"], "W4A16_NVFP4");
  EXPECT_NE(std::find(qc["ignore"].begin(), qc["ignore"].end(), "model.layers.0.mlp.down_proj"),
            qc["ignore"].end());
}

}  // namespace
}  // namespace qf

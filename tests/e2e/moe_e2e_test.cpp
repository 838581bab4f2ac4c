// Mixture-of-experts checkpoints through the CLI, on the conformance models (tiny random
// Mixtral / Qwen2-MoE / Qwen3-MoE, per-expert and fused on disk, gpt-oss, given a byte-level
// tokenizer):
// what engines need of an MoE export (routers excluded and unquantized, one NVFP4 tensor scale
// per expert's gate/up, one input scale per layer and input across the experts), the tokens
// calibration routed to each expert, per-expert GPTQ, and one-line errors for broken layouts.
#include "io/checkpoint.h"
#include "test_util.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>

namespace qf {
namespace {

namespace fs = std::filesystem;
using test::quote;
using test::run_qforge;

// The conformance case `name` with a tokenizer, in `dir`/model.
fs::path prepare(const test::ScratchDir& dir, const std::string& name) {
  const fs::path src = fs::path(QFORGE_SOURCE_DIR) / "tests/data/conformance" / name;
  fs::copy(src, dir / "model");
  test::write_file(dir / "model" / "tokenizer.json", test::byte_level_tokenizer());
  return dir / "model";
}

// The repository's README as calibration and evaluation text (real English, always present).
std::string readme() { return quote(fs::path(QFORGE_SOURCE_DIR) / "README.md"); }

float scalar(const Checkpoint& c, const std::string& name) {
  const CheckpointTensor* t = c.find(name);
  EXPECT_NE(t, nullptr) << name;
  if (!t || t->entry->dtype != DType::F32) return NAN;
  float f;
  std::memcpy(&f, t->file->view(*t->entry).data, 4);
  return f;
}

// The stored dtype of `name`, or a test failure naming it.
DType dtype_of(const Checkpoint& c, const std::string& name) {
  const CheckpointTensor* t = c.find(name);
  EXPECT_NE(t, nullptr) << name;
  return t ? t->entry->dtype : DType::F32;
}

TEST(MoeE2E, Nvfp4W4A4ExportHasWhatFusedMoeKernelsNeed) {
  test::ScratchDir dir;
  const fs::path model = prepare(dir, "qwen2_moe");
  for (const std::string exp : {"modelopt", "compressed-tensors"}) {
    SCOPED_TRACE(exp);
    const fs::path out = dir / exp;
    const auto q = run_qforge("quantize " + quote(model) + " -o " + quote(out) +
                              " --format nvfp4 --activations nvfp4 --export " + exp + " --calib " +
                              readme() + " --calib-samples 8 --calib-seq 64 --json -q");
    ASSERT_EQ(q.exit_code, 0) << q.err;
    const auto summary = nlohmann::json::parse(q.out);
    // Layers 0 and 2 are MoE (mlp_only_layers [1]); every token goes to top_k = 2 experts.
    ASSERT_EQ(summary["expert_tokens"].size(), 2u) << q.out;
    for (const auto& layer : summary["expert_tokens"]) {
      int64_t sum = 0;
      for (const auto& t : layer["tokens"]) sum += t.get<int64_t>();
      EXPECT_EQ(sum, 2 * 8 * 64) << layer.dump();
      EXPECT_EQ(layer["tokens"].size(), 8u);
    }
    const Checkpoint c = Checkpoint::open(out);
    // Routers and the shared-expert gate stay float and are listed as excluded.
    const std::string cfg = test::read_file(out / "config.json");
    for (const std::string l : {"0", "2"}) {
      const std::string gate = "model.layers." + l + ".mlp.gate";
      EXPECT_EQ(dtype_of(c, gate + ".weight"), DType::BF16);
      EXPECT_EQ(c.find(gate + ".weight_scale"), nullptr);
      EXPECT_NE(cfg.find(fmt::format("\"{}\"", gate)), std::string::npos) << gate;
      EXPECT_NE(cfg.find(fmt::format("\"model.layers.{}.mlp.shared_expert_gate\"", l)),
                std::string::npos);
    }
    // NVFP4 tensor scale shared by each expert's gate and up; one input scale per layer and
    // input over all experts (vLLM takes one; an expert without tokens still gets it).
    const std::string scale2 = exp == "modelopt" ? ".weight_scale_2" : ".weight_global_scale";
    const std::string in = exp == "modelopt" ? ".input_scale" : ".input_global_scale";
    for (const std::string l : {"0", "2"}) {
      std::set<float> gate_up_in, down_in;
      for (int e = 0; e < 8; ++e) {
        const std::string p = "model.layers." + l + ".mlp.experts." + std::to_string(e) + ".";
        EXPECT_EQ(scalar(c, p + "gate_proj" + scale2), scalar(c, p + "up_proj" + scale2)) << p;
        EXPECT_EQ(dtype_of(c, p + (exp == "modelopt" ? "down_proj.weight" : "down_proj.weight_packed")),
                  DType::U8) << p;
        gate_up_in.insert(scalar(c, p + "gate_proj" + in));
        gate_up_in.insert(scalar(c, p + "up_proj" + in));
        down_in.insert(scalar(c, p + "down_proj" + in));
      }
      EXPECT_EQ(gate_up_in.size(), 1u) << "layer " << l;
      EXPECT_EQ(down_in.size(), 1u) << "layer " << l;
    }
    const auto kl = run_qforge("eval kl " + quote(model) + " " + quote(out) + " --text " +
                               readme() + " --max-chars 3000 --ctx 128 --json");
    ASSERT_EQ(kl.exit_code, 0) << kl.err;
    const auto j = nlohmann::json::parse(kl.out);
    EXPECT_LT(j["kl_mean"].get<double>(), 0.5) << kl.out;
  }
}

// --calib-moe all: every expert is calibrated on every token of its layer (ModelOpt's way), and
// the export still loads and stays close to the original.
TEST(MoeE2E, CalibMoeAllGivesEveryExpertEveryToken) {
  test::ScratchDir dir;
  const fs::path model = prepare(dir, "mixtral");
  const auto q = run_qforge("quantize " + quote(model) + " -o " + quote(dir / "q") +
                            " --format nvfp4 --activations nvfp4 --calib " + readme() +
                            " --calib-samples 4 --calib-seq 64 --calib-moe all --json -q");
  ASSERT_EQ(q.exit_code, 0) << q.err;
  const auto summary = nlohmann::json::parse(q.out);
  ASSERT_EQ(summary["expert_tokens"].size(), 2u) << q.out;
  for (const auto& layer : summary["expert_tokens"])
    for (const auto& t : layer["tokens"]) EXPECT_EQ(t.get<int64_t>(), 4 * 64) << layer.dump();
  const auto kl = run_qforge("eval kl " + quote(model) + " " + quote(dir / "q") + " --text " +
                             readme() + " --max-chars 3000 --ctx 128 --json");
  ASSERT_EQ(kl.exit_code, 0) << kl.err;
  EXPECT_LT(nlohmann::json::parse(kl.out)["kl_mean"].get<double>(), 0.5) << kl.out;
  const auto bad = run_qforge("quantize " + quote(model) + " -o " + quote(dir / "q2") +
                              " --calib-moe some");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.err.find("routed"), std::string::npos) << bad.err;
}

// --auto decides all routed experts of a layer together by default (vLLM's fused-MoE layers
// take one format), or each expert alone with --auto-experts expert.
TEST(MoeE2E, AutoDecidesExpertsPerLayerOrPerExpert) {
  test::ScratchDir dir;
  const fs::path model = prepare(dir, "qwen2_moe");
  for (const std::string mode : {"layer", "expert"}) {
    SCOPED_TRACE(mode);
    const auto r = run_qforge("quantize " + quote(model) + " -o " + quote(dir / mode) +
                              " --auto --target-bits 6 --formats nvfp4,fp8 --auto-experts " + mode +
                              " --calib " + readme() +
                              " --calib-samples 4 --calib-seq 64 --dry-run --json -q");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const auto j = nlohmann::json::parse(r.out);
    std::map<std::string, std::set<std::string>> formats;  // layer -> formats of its experts
    for (const auto& m : j["modules"]) {
      const std::string name = m["name"];
      const size_t at = name.find(".mlp.experts.");
      if (at != std::string::npos) formats[name.substr(0, at)].insert(m["format"].get<std::string>());
    }
    ASSERT_EQ(formats.size(), 2u) << r.out;
    if (mode == "layer") {
      for (const auto& [layer, f] : formats) EXPECT_EQ(f.size(), 1u) << layer;
    }
    const auto units = j["auto"]["units"].size();
    // qwen2_moe: 3 layers x (q/k/v, o) + dense MLP (gate/up, down) + 2 MoE layers x (shared
    // gate/up, shared down, experts: 1 unit per layer or 8 x 2).
    EXPECT_EQ(units, mode == "layer" ? 6u + 2u + 2u * 3u : 6u + 2u + 2u * (2u + 16u)) << r.out;
  }
}

// GPTQ builds each expert's Hessian from its own routed rows; its error beats round-to-nearest.
TEST(MoeE2E, PerExpertGptqBeatsRoundToNearest) {
  test::ScratchDir dir;
  const fs::path model = prepare(dir, "qwen3_moe");
  const std::string calib = " --calib " + readme() + " --calib-samples 8 --calib-seq 128";
  std::map<std::string, double> kl;
  for (const std::string algo : {"max", "gptq"}) {
    const fs::path out = dir / algo;
    const auto q = run_qforge("quantize " + quote(model) + " -o " + quote(out) +
                              " --format int4 --algo " + algo + (algo == "gptq" ? calib : "") +
                              " -q");
    ASSERT_EQ(q.exit_code, 0) << q.err;
    const auto r = run_qforge("eval kl " + quote(model) + " " + quote(out) + " --text " + readme() +
                              " --max-chars 6000 --ctx 128 --json");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    kl[algo] = nlohmann::json::parse(r.out)["kl_mean"].get<double>();
  }
  EXPECT_LT(kl["gptq"], kl["max"]) << "gptq " << kl["gptq"] << " max " << kl["max"];
}

// A fused-on-disk checkpoint is written with the per-expert names engines load.
TEST(MoeE2E, FusedExpertsAreExportedPerExpert) {
  test::ScratchDir dir;
  const fs::path model = prepare(dir, "qwen3_moe_fused");
  const auto q = run_qforge("quantize " + quote(model) + " -o " + quote(dir / "q") + " -q");
  ASSERT_EQ(q.exit_code, 0) << q.err;
  const Checkpoint c = Checkpoint::open(dir / "q");
  EXPECT_EQ(c.find("model.layers.1.mlp.experts.gate_up_proj"), nullptr);
  EXPECT_NE(c.find("model.layers.1.mlp.experts.7.down_proj.weight_scale"), nullptr);
  EXPECT_NE(c.find("model.layers.1.mlp.experts.0.gate_proj.weight"), nullptr);
}

// The stored shape of `name`, or a test failure naming it.
Shape shape_of(const Checkpoint& c, const std::string& name) {
  const CheckpointTensor* t = c.find(name);
  EXPECT_NE(t, nullptr) << name;
  return t ? t->entry->shape : Shape{};
}

// gpt-oss (E 8, H 64, I 48) in the layouts the tools write: ModelOpt keeps the hub's fused names
// (`mlp.experts.gate_up_proj` [E, H/2, 2I] codes, `_weight_scale` [E, H/16, 2I], one
// `_weight_scale_2` for all experts, biases `gate_up_proj_bias` [E, 2I]); compressed-tensors
// writes llm-compressor's linearised experts (`experts.N.gate_proj` = the even rows, `up_proj`
// the odd, with their biases). Both load back in qforge, stay close to the original, and the
// summary says which engines load them.
TEST(MoeE2E, GptOssExportsInTheToolsLayouts) {
  test::ScratchDir dir;
  const fs::path model = prepare(dir, "gpt_oss");
  const Checkpoint original = Checkpoint::open(model);
  for (const std::string exp : {"modelopt", "compressed-tensors"}) {
    SCOPED_TRACE(exp);
    const fs::path out = dir / exp;
    const auto q = run_qforge("quantize " + quote(model) + " -o " + quote(out) + " --export " +
                              exp + " --activations nvfp4 --calib " + readme() +
                              " --calib-samples 4 --calib-seq 64 --json -q");
    ASSERT_EQ(q.exit_code, 0) << q.err;
    const auto summary = nlohmann::json::parse(q.out);
    EXPECT_EQ(summary["modules_quantized"], 40) << q.out;
    ASSERT_EQ(summary["serve"].size(), 3u) << q.out;
    EXPECT_EQ(summary["serve"][0]["engine"], "vLLM");
    EXPECT_EQ(summary["serve"][0]["support"], "does not load") << q.out;
    const Checkpoint c = Checkpoint::open(out);
    for (int l = 0; l < 2; ++l) {
      const std::string p = fmt::format("model.layers.{}.mlp.", l);
      EXPECT_EQ(dtype_of(c, p + "router.weight"), DType::BF16);
      EXPECT_EQ(dtype_of(c, p + "router.bias"), DType::BF16);
      EXPECT_EQ(c.find(p + "experts.0.gate_up_proj.weight"), nullptr);
      if (exp == "modelopt") {
        const std::string x = p + "experts.";
        EXPECT_EQ(dtype_of(c, x + "gate_up_proj"), DType::U8);
        EXPECT_EQ(shape_of(c, x + "gate_up_proj"), (Shape{8, 32, 96}));
        EXPECT_EQ(dtype_of(c, x + "gate_up_proj_weight_scale"), DType::F8_E4M3);
        EXPECT_EQ(shape_of(c, x + "gate_up_proj_weight_scale"), (Shape{8, 4, 96}));
        EXPECT_EQ(shape_of(c, x + "gate_up_proj_weight_scale_2"), Shape{});
        EXPECT_EQ(shape_of(c, x + "gate_up_proj_input_scale"), Shape{});
        EXPECT_EQ(shape_of(c, x + "gate_up_proj_bias"), (Shape{8, 96}));
        EXPECT_EQ(shape_of(c, x + "down_proj"), (Shape{8, 24, 64}));
        EXPECT_EQ(shape_of(c, x + "down_proj_weight_scale"), (Shape{8, 3, 64}));
        EXPECT_EQ(shape_of(c, x + "down_proj_weight_scale_2"), Shape{});
        EXPECT_EQ(shape_of(c, x + "down_proj_input_scale"), Shape{});
        EXPECT_EQ(shape_of(c, x + "down_proj_bias"), (Shape{8, 64}));
        // The biases are the hub's bytes.
        for (const std::string b : {"gate_up_proj_bias", "down_proj_bias"}) {
          const CheckpointTensor* o = original.find(x + b);
          const CheckpointTensor* w = c.find(x + b);
          ASSERT_TRUE(o && w);
          const TensorView ov = o->file->view(*o->entry), wv = w->file->view(*w->entry);
          EXPECT_EQ(0, std::memcmp(ov.data, wv.data, ov.nbytes)) << b;
        }
      } else {
        const std::string x = p + "experts.5.";
        EXPECT_EQ(shape_of(c, x + "gate_proj.weight_packed"), (Shape{48, 32}));
        EXPECT_EQ(shape_of(c, x + "up_proj.weight_packed"), (Shape{48, 32}));
        EXPECT_EQ(shape_of(c, x + "down_proj.weight_packed"), (Shape{64, 24}));
        EXPECT_EQ(shape_of(c, x + "gate_proj.bias"), (Shape{48}));
        EXPECT_EQ(shape_of(c, x + "up_proj.bias"), (Shape{48}));
        EXPECT_EQ(shape_of(c, x + "down_proj.bias"), (Shape{64}));
        EXPECT_EQ(shape_of(c, x + "gate_proj.input_global_scale"), (Shape{1}));
        // llm-compressor gives gate and up one global scale.
        EXPECT_EQ(scalar(c, x + "gate_proj.weight_global_scale"),
                  scalar(c, x + "up_proj.weight_global_scale"));
        EXPECT_EQ(c.find(p + "experts.gate_up_proj"), nullptr);
      }
    }
    const std::string cfg = test::read_file(out / "config.json");
    EXPECT_NE(cfg.find("\"model.layers.0.mlp.router\""), std::string::npos);
    const auto inspect = run_qforge("inspect " + quote(out) + " --json");
    ASSERT_EQ(inspect.exit_code, 0) << inspect.err;
    EXPECT_EQ(nlohmann::json::parse(inspect.out)["quantized_modules"],
              exp == "modelopt" ? 2 * (4 + 2) : 2 * (4 + 3 * 8)) << inspect.out;
    const auto kl = run_qforge("eval kl " + quote(model) + " " + quote(out) + " --text " +
                               readme() + " --max-chars 3000 --ctx 128 --json");
    ASSERT_EQ(kl.exit_code, 0) << kl.err;
    const auto j = nlohmann::json::parse(kl.out);
    // A wrong expert layout (rows and columns swapped, gate and up mixed) gives ~0.77.
    EXPECT_LT(j["kl_mean"].get<double>(), 0.25) << kl.out;
  }
  {
    // FP8 per tensor (W8A8): ModelOpt's fused [E, in, out] E4M3 weight with one weight_scale.
    const fs::path out = dir / "fp8-w8a8";
    const auto q = run_qforge("quantize " + quote(model) + " -o " + quote(out) +
                              " --format fp8 --activations fp8 --calib " + readme() +
                              " --calib-samples 4 --calib-seq 64 --json -q");
    ASSERT_EQ(q.exit_code, 0) << q.err;
    EXPECT_EQ(nlohmann::json::parse(q.out)["modules_quantized"], 40) << q.out;
    const Checkpoint c = Checkpoint::open(out);
    const std::string x = "model.layers.1.mlp.experts.";
    EXPECT_EQ(dtype_of(c, x + "gate_up_proj"), DType::F8_E4M3);
    EXPECT_EQ(shape_of(c, x + "gate_up_proj"), (Shape{8, 64, 96}));
    EXPECT_EQ(shape_of(c, x + "gate_up_proj_weight_scale"), Shape{});
    EXPECT_EQ(shape_of(c, x + "gate_up_proj_input_scale"), Shape{});
    EXPECT_EQ(shape_of(c, x + "down_proj"), (Shape{8, 48, 64}));
    EXPECT_EQ(shape_of(c, x + "down_proj_weight_scale"), Shape{});
    const auto kl = run_qforge("eval kl " + quote(model) + " " + quote(out) + " --text " +
                               readme() + " --max-chars 2000 --ctx 128 --json");
    ASSERT_EQ(kl.exit_code, 0) << kl.err;
    EXPECT_LT(nlohmann::json::parse(kl.out)["kl_mean"].get<double>(), 0.1) << kl.out;
  }
  {
    // Per-channel FP8 has no fused ModelOpt layout: the experts stay BF16, in the hub's own
    // layout and bytes, listed as their module `mlp.experts`.
    const fs::path out = dir / "fp8";
    const auto q = run_qforge("quantize " + quote(model) + " -o " + quote(out) +
                              " --format fp8 --json -q");
    ASSERT_EQ(q.exit_code, 0) << q.err;
    EXPECT_EQ(nlohmann::json::parse(q.out)["modules_quantized"], 8) << q.out;
    EXPECT_NE(q.out.find("NVFP4 or FP8 per tensor only"), std::string::npos) << q.out;
    EXPECT_NE(test::read_file(out / "hf_quant_config.json").find("\"model.layers.1.mlp.experts\""),
              std::string::npos);
    const Checkpoint c = Checkpoint::open(out);
    for (const std::string t : {"model.layers.1.mlp.experts.gate_up_proj",
                                "model.layers.1.mlp.experts.down_proj"}) {
      const CheckpointTensor* o = original.find(t);
      const CheckpointTensor* w = c.find(t);
      ASSERT_TRUE(o && w) << t;
      EXPECT_EQ(o->entry->shape, w->entry->shape);
      const TensorView ov = o->file->view(*o->entry), wv = w->file->view(*w->entry);
      EXPECT_EQ(0, std::memcmp(ov.data, wv.data, ov.nbytes)) << t;
    }
    const auto kl = run_qforge("eval kl " + quote(model) + " " + quote(out) + " --text " +
                               readme() + " --max-chars 2000 --ctx 128 --json");
    ASSERT_EQ(kl.exit_code, 0) << kl.err;
  }
}

std::string run_error(const std::string& args) {
  const auto r = run_qforge(args);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  return r.err;
}

TEST(MoeE2E, BrokenLayoutsAreOneLineErrors) {
  {
    // top-k larger than the expert count.
    test::ScratchDir dir;
    const fs::path model = prepare(dir, "mixtral");
    auto config = nlohmann::json::parse(test::read_file(model / "config.json"));
    config["num_experts_per_tok"] = 9;
    test::write_file(model / "config.json", config.dump());
    const std::string e = run_error("quantize " + quote(model) + " -o " + quote(dir / "q"));
    EXPECT_NE(e.find("'num_experts_per_tok' 9 is larger than 'num_local_experts' 8"),
              std::string::npos) << e;
  }
  {
    // An expert tensor missing: the config says 8 experts, the file holds 7 per layer.
    test::ScratchDir dir;
    const fs::path model = prepare(dir, "qwen3_moe");
    auto config = nlohmann::json::parse(test::read_file(model / "config.json"));
    config["num_local_experts"] = 9;
    test::write_file(model / "config.json", config.dump());
    const std::string e = run_error("eval ppl " + quote(model) + " --text " + readme());
    EXPECT_NE(e.find("model.layers.1.mlp.experts.8.gate_proj.weight' missing"), std::string::npos)
        << e;
    const std::string q = run_error("quantize " + quote(model) + " -o " + quote(dir / "q"));
    EXPECT_NE(q.find("experts.8.gate_proj.weight"), std::string::npos) << q;
  }
  {
    // A fused expert tensor whose size does not match num_experts.
    test::ScratchDir dir;
    const fs::path model = prepare(dir, "qwen3_moe_fused");
    auto config = nlohmann::json::parse(test::read_file(model / "config.json"));
    config["num_local_experts"] = 4;
    test::write_file(model / "config.json", config.dump());
    const std::string e = run_error("eval ppl " + quote(model) + " --text " + readme());
    EXPECT_NE(e.find("tensor 'model.layers.1.mlp.experts.gate_up_proj' is [8, 96, 64], expected "
                     "[4, 96, 64]"), std::string::npos) << e;
  }
  {
    // gpt-oss: a fused transposed expert tensor that does not match intermediate_size.
    test::ScratchDir dir;
    const fs::path model = prepare(dir, "gpt_oss");
    auto config = nlohmann::json::parse(test::read_file(model / "config.json"));
    config["intermediate_size"] = 32;
    test::write_file(model / "config.json", config.dump());
    for (const std::string& cmd : {"eval ppl " + quote(model) + " --text " + readme(),
                                  "quantize " + quote(model) + " -o " + quote(dir / "q")}) {
      const std::string e = run_error(cmd);
      EXPECT_NE(e.find("tensor 'model.layers.0.mlp.experts.gate_up_proj' is [8, 64, 96], "
                       "expected [8, 64, 64]"), std::string::npos) << e;
    }
  }
}

}  // namespace
}  // namespace qf

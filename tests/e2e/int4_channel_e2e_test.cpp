// End to end: INT4 with one scale per output channel (`--group-size channel`): bytes equal to
// the scalar reference, compressed-tensors strategy "channel" / ModelOpt W4A16_AWQ with
// group_size = in_features, and the engine runs it (`qforge eval kl`).
#include "engine/model.h"
#include "core/thread_pool.h"
#include "formats/int4.h"
#include "formats/llm_compressor_rtn.h"
#include "io/checkpoint.h"
#include "io/json_file.h"
#include "model/architecture.h"
#include "test_util.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstring>

namespace fs = std::filesystem;

namespace qf {
namespace {

using test::model_dir;
using test::quote;

std::vector<std::byte> bytes_of(const Checkpoint& c, const std::string& name) {
  const CheckpointTensor* t = c.find(name);
  EXPECT_NE(t, nullptr) << name;
  if (!t) return {};
  const TensorView v = t->file->view(*t->entry);
  return {v.data, v.data + v.nbytes};
}

class Int4Channel : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {};

TEST_P(Int4Channel, ExportsBitExactAndRuns) {
  QF_REQUIRE_FIXTURES();
  const auto [name, exp] = GetParam();
  const bool modelopt = exp == "modelopt";
  test::ScratchDir dir;
  auto r = test::run_qforge("quantize " + quote(model_dir(name)) + " -o " + quote(dir / "out") +
                            " --format int4 --group-size channel --export " + exp +
                            " -q --threads 2");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const Checkpoint in = Checkpoint::open(model_dir(name));
  const Checkpoint out = Checkpoint::open(dir / "out");
  const Architecture a = Architecture::from_config(in.config(), "config.json");
  const auto qc = read_json_file(dir / "out" / "config.json")["quantization_config"];
  nlohmann::json hf;
  if (modelopt) hf = read_json_file(dir / "out" / "hf_quant_config.json")["quantization"];
  int checked = 0;
  for (const LinearModule& m : a.linears) {
    const std::string& mod = m.name;
    const int64_t rows = m.out_features, cols = m.in_features;
    const CheckpointTensor* se = out.find(mod + ".weight_scale");
    if (!modelopt && cols % 8 != 0) {  // int32 packing needs in_features % 8 == 0
      EXPECT_EQ(se, nullptr) << mod;
      continue;
    }
    ASSERT_NE(se, nullptr) << mod;
    EXPECT_EQ(se->entry->shape, (Shape{rows, 1})) << mod;
    // The target's rounding with group = in_features: ModelOpt's scalar reference, or
    // llm-compressor's for compressed-tensors.
    const CheckpointTensor* w = in.find(m.weight_name());
    const TensorView v = w->file->view(*w->entry);
    const WeightRows rows_view{v.data, v.dtype, rows, cols};
    std::vector<int8_t> codes(size_t(rows * cols));
    std::vector<float> scales(static_cast<size_t>(rows));
    if (modelopt) {
      int4_quantize_reference(rows_view, int(cols), DType::F32, codes.data(), scales.data());
    } else {
      QuantizedTensor ref;
      ref.format = Format::int4;
      ref.rows = rows;
      ref.cols = cols;
      ref.block = int(cols);
      ref.scale_dtype = v.dtype;
      ThreadPool one(1);
      quantize_llm_compressor(rows_view, ref, one);
      std::memcpy(codes.data(), ref.codes.data(), codes.size());
      scales = ref.scales;
    }
    const auto sb = bytes_of(out, mod + ".weight_scale");
    ASSERT_EQ(sb.size(), scales.size() * 4);  // F32 fixtures: F32 scales in both exports
    EXPECT_EQ(0, std::memcmp(sb.data(), scales.data(), sb.size())) << mod;
    if (modelopt) {
      std::vector<uint8_t> packed(size_t(rows / 2 * cols));
      int4_pack_row_pairs(codes.data(), rows, cols, packed.data());
      const auto wb = bytes_of(out, mod + ".weight");
      ASSERT_EQ(wb.size(), packed.size());
      EXPECT_EQ(0, std::memcmp(wb.data(), packed.data(), packed.size())) << mod;
      // ModelOpt: W4A16_AWQ with group_size = in_features, per layer when they differ.
      const auto& layer = hf.contains("quantized_layers") ? hf["quantized_layers"][mod] : hf;
      EXPECT_EQ(layer["quant_algo"], "W4A16_AWQ") << mod;
      EXPECT_EQ(layer["group_size"], cols) << mod;
    } else {
      std::vector<int32_t> packed(size_t(rows * cols / 8));
      int4_pack_int32(codes.data(), rows, cols, packed.data());
      const auto wb = bytes_of(out, mod + ".weight_packed");
      ASSERT_EQ(wb.size(), packed.size() * 4);
      EXPECT_EQ(0, std::memcmp(wb.data(), packed.data(), wb.size())) << mod;
      const auto shape = bytes_of(out, mod + ".weight_shape");
      int64_t dims[2];
      ASSERT_EQ(shape.size(), sizeof(dims));
      std::memcpy(dims, shape.data(), sizeof(dims));
      EXPECT_EQ(dims[0], rows);
      EXPECT_EQ(dims[1], cols);
    }
    ++checked;
  }
  EXPECT_GT(checked, 0);
  if (!modelopt) {
    // One config group, strategy "channel", no group_size.
    EXPECT_EQ(qc["format"], "pack-quantized");
    ASSERT_EQ(qc["config_groups"].size(), 1u);
    const auto& w = qc["config_groups"]["group_0"]["weights"];
    EXPECT_EQ(w["strategy"], "channel");
    EXPECT_TRUE(w["group_size"].is_null());
    EXPECT_EQ(w["num_bits"], 4);
    EXPECT_EQ(w["type"], "int");
  }
  // The engine runs it, close to the original.
  r = test::run_qforge("eval kl " + quote(model_dir(name)) + " " + quote(dir / "out") + " --text " +
                       quote(test::fixtures_dir() / "corpora" / "tinystories_valid_subset.txt") +
                       " --max-chars 4000 --json --threads 2");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const double kl = nlohmann::json::parse(r.out)["kl_mean"].get<double>();
  EXPECT_TRUE(std::isfinite(kl));
  EXPECT_LT(kl, 0.4);
}

INSTANTIATE_TEST_SUITE_P(
    Models, Int4Channel,
    ::testing::Combine(::testing::Values("stories260K-hf", "tinystories-656K-hf"),
                       ::testing::Values("modelopt", "compressed-tensors")),
    [](const auto& p) {
      return std::string(std::get<0>(p.param) == "stories260K-hf" ? "stories260K" : "ts656K") +
             (std::get<1>(p.param) == "modelopt" ? "_modelopt" : "_ct");
    });

TEST(Int4Channel, GroupSizeFlagIsChecked) {
  QF_REQUIRE_FIXTURES();
  test::ScratchDir dir;
  const auto r = test::run_qforge("quantize " + quote(model_dir("stories260K-hf")) + " -o " +
                                  quote(dir / "x") + " --format nvfp4 --group-size channel -q");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("--group-size applies to int4 only"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace qf

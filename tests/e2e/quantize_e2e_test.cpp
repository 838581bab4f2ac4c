// End to end: `qforge quantize` and `qforge inspect` on the real fixture models, every format and
// both exports, checked tensor by tensor against the reference quantizers and the spec'd names,
// dtypes and shapes.
#include "core/thread_pool.h"
#include "formats/fp8.h"
#include "formats/int4.h"
#include "formats/llm_compressor_rtn.h"
#include "formats/mxfp4.h"
#include "formats/nvfp4.h"
#include "io/checkpoint.h"
#include "io/safetensors.h"
#include "test_util.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace fs = std::filesystem;

namespace qf {
namespace {

struct Case {
  std::string model;   // fixture directory name
  std::string format;  // nvfp4, mxfp4, fp8, int4
  std::string export_format;
  std::string extra;   // extra flags
};

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  std::string s = info.param.model + "_" + info.param.format + "_" + info.param.export_format;
  for (char& c : s)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  return s;
}

// The compressed-tensors target's rounding (llm-compressor's) of an F32 weight.
QuantizedTensor llm_compressor_reference(const WeightRows& w, Format f, int block) {
  QuantizedTensor q;
  q.format = f;
  q.rows = w.rows;
  q.cols = w.cols;
  q.block = block;
  q.scale_dtype = w.dtype;
  ThreadPool one(1);
  quantize_llm_compressor(w, q, one);
  return q;
}

std::vector<std::byte> bytes_of(const Checkpoint& c, const std::string& name) {
  const CheckpointTensor* t = c.find(name);
  EXPECT_NE(t, nullptr) << name;
  if (!t) return {};
  const TensorView v = t->file->view(*t->entry);
  return {v.data, v.data + v.nbytes};
}

const SafetensorsEntry* entry_of(const Checkpoint& c, const std::string& name) {
  const CheckpointTensor* t = c.find(name);
  return t ? t->entry : nullptr;
}

std::vector<float> floats_of(const std::vector<std::byte>& b, DType dtype) {
  std::vector<float> out(b.size() / dtype_size(dtype));
  for (size_t i = 0; i < out.size(); ++i) {
    if (dtype == DType::F32) std::memcpy(&out[i], b.data() + 4 * i, 4);
  }
  return out;
}

// Modules that share NVFP4 tensor scales with `module` (itself included).
std::vector<std::string> fused_group(const std::string& module) {
  const std::string prefix = module.substr(0, module.rfind('.') + 1);
  for (const std::vector<std::string>& group :
       {std::vector<std::string>{"q_proj", "k_proj", "v_proj"}, {"gate_proj", "up_proj"}})
    for (const auto& role : group)
      if (module == prefix + role) {
        std::vector<std::string> members;
        for (const auto& r : group) members.push_back(prefix + r);
        return members;
      }
  return {module};
}

class QuantizeFixture : public ::testing::TestWithParam<Case> {};

TEST_P(QuantizeFixture, WritesSpecLayoutBitExact) {
  QF_REQUIRE_FIXTURES();
  const Case& c = GetParam();
  const fs::path model = test::fixtures_dir() / "models" / c.model;
  test::ScratchDir dir;
  const fs::path out = dir / "out";
  const auto r = test::run_qforge("quantize '" + model.string() + "' -o '" + out.string() +
                                  "' --format " + c.format + " --export " + c.export_format +
                                  " --json -q --threads 2 " + c.extra);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto report = nlohmann::json::parse(r.out);
  EXPECT_GT(report["modules_quantized"].get<int>(), 0);
  EXPECT_GT(report["bytes_in"].get<uint64_t>(), report["bytes_out"].get<uint64_t>());
  for (const char* key : {"bytes_in", "bytes_out", "seconds", "modules_quantized", "modules_excluded"})
    EXPECT_TRUE(report.contains(key)) << key;

  const Checkpoint in = Checkpoint::open(model);
  const Checkpoint q = Checkpoint::open(out);
  const bool modelopt = c.export_format == "modelopt";
  const auto config = read_json_file(out / "config.json");
  ASSERT_TRUE(config.contains("quantization_config"));
  const auto& qc = config["quantization_config"];
  EXPECT_EQ(qc["quant_method"], modelopt ? "modelopt" : "compressed-tensors");
  const auto& ignore = qc["ignore"];
  EXPECT_NE(std::find(ignore.begin(), ignore.end(), "lm_head"), ignore.end());

  std::set<std::string> excluded;
  for (const auto& e : report["excluded"]) excluded.insert(e["name"].get<std::string>());
  // Every excluded Linear is listed in the config.
  for (const auto& name : excluded)
    EXPECT_NE(std::find(ignore.begin(), ignore.end(), name), ignore.end()) << name;

  ThreadPool pool(2);
  int checked = 0;
  for (const auto& t : in.tensors()) {
    const std::string& name = t.name;
    const std::string module = name.substr(0, name.rfind('.'));
    const bool is_linear = name.find("_proj.weight") != std::string::npos;
    if (!is_linear || excluded.count(module)) {
      // A tied embedding stored under lm_head (with an alias) is written under the embedding's
      // name, as transformers, ModelOpt and llm-compressor save it.
      const bool tied_head = name == "lm_head.weight" && in.aliases().count("model.embed_tokens.weight");
      const std::string out_name = tied_head ? "model.embed_tokens.weight" : name;
      if (tied_head) {
        EXPECT_EQ(q.find("lm_head.weight"), nullptr);
        EXPECT_TRUE(q.aliases().empty());
      }
      EXPECT_EQ(bytes_of(q, out_name), bytes_of(in, name)) << name << " must be copied bit for bit";
      continue;
    }
    const TensorView v = t.file->view(*t.entry);
    const int64_t rows = v.rows(), cols = v.cols();
    const WeightRows w{v.data, v.dtype, rows, cols};
    const std::string weight_name = modelopt || c.format == "fp8" ? module + ".weight"
                                                                  : module + ".weight_packed";
    const SafetensorsEntry* we = entry_of(q, weight_name);
    ASSERT_NE(we, nullptr) << weight_name;
    const SafetensorsEntry* se = entry_of(q, module + ".weight_scale");
    ASSERT_NE(se, nullptr) << module;
    if (c.format == "nvfp4") {
      EXPECT_EQ(we->dtype, DType::U8);
      EXPECT_EQ(we->shape, (Shape{rows, cols / 2}));
      EXPECT_EQ(se->dtype, DType::F8_E4M3);
      EXPECT_EQ(se->shape, (Shape{rows, cols / 16}));
      // The tensor scale comes from the largest amax over the fused group.
      float amax = 0;
      for (const auto& member : fused_group(module)) {
        const CheckpointTensor* mt = in.find(member + ".weight");
        ASSERT_NE(mt, nullptr);
        const TensorView mv = mt->file->view(*mt->entry);
        amax = std::max(amax, weight_amax({mv.data, mv.dtype, mv.rows(), mv.cols()}, pool).amax);
      }
      const float g = nvfp4_global_scale(amax);
      if (modelopt) {
        const SafetensorsEntry* ge = entry_of(q, module + ".weight_scale_2");
        ASSERT_NE(ge, nullptr);
        EXPECT_EQ(ge->dtype, DType::F32);
        EXPECT_TRUE(ge->shape.empty());
        EXPECT_EQ(floats_of(bytes_of(q, module + ".weight_scale_2"), DType::F32), std::vector<float>{g});
      } else {
        const SafetensorsEntry* ge = entry_of(q, module + ".weight_global_scale");
        ASSERT_NE(ge, nullptr);
        EXPECT_EQ(ge->dtype, DType::F32);
        EXPECT_EQ(ge->shape, Shape{1});
        // llm-compressor's 2688 / amax: (1/amax) * 2688, each step rounded to float32 here.
        EXPECT_EQ(floats_of(bytes_of(q, module + ".weight_global_scale"), DType::F32),
                  std::vector<float>{(1.0f / amax) * 2688.0f});
      }
      std::vector<uint8_t> packed(size_t(rows * cols / 2)), scales(size_t(rows * cols / 16));
      // Each target rounds as its tool does: ModelOpt's, or llm-compressor's for compressed-tensors.
      if (modelopt) {
        nvfp4_quantize_reference(w, g, packed.data(), scales.data());
      } else {
        QuantizedTensor ref;
        ref.rows = rows;
        ref.cols = cols;
        ref.block = 16;
        nvfp4_quantize_llm_compressor(w, amax, ref, pool);
        EXPECT_EQ(ref.global_scale_reciprocal, (1.0f / amax) * 2688.0f);
        packed = ref.codes;
        scales = ref.block_scales;
      }
      EXPECT_EQ(0, std::memcmp(bytes_of(q, weight_name).data(), packed.data(), packed.size())) << module;
      EXPECT_EQ(0, std::memcmp(bytes_of(q, module + ".weight_scale").data(), scales.data(), scales.size()))
          << module;
    } else if (c.format == "mxfp4") {
      EXPECT_EQ(we->dtype, DType::U8);
      EXPECT_EQ(we->shape, (Shape{rows, cols / 2}));
      EXPECT_EQ(se->dtype, DType::U8);
      EXPECT_EQ(se->shape, (Shape{rows, cols / 32}));
      std::vector<uint8_t> packed(size_t(rows * cols / 2)), scales(size_t(rows * cols / 32));
      // Each target rounds as its tool does: ModelOpt's export rule, or compressed-tensors'.
      if (modelopt)
        mxfp4_quantize_modelopt(w, packed.data(), scales.data(), nullptr);
      else
        mxfp4_quantize_reference(w, packed.data(), scales.data());
      EXPECT_EQ(0, std::memcmp(bytes_of(q, weight_name).data(), packed.data(), packed.size()));
      EXPECT_EQ(0, std::memcmp(bytes_of(q, module + ".weight_scale").data(), scales.data(), scales.size()));
    } else if (c.format == "fp8") {
      EXPECT_EQ(we->dtype, DType::F8_E4M3);
      EXPECT_EQ(we->shape, (Shape{rows, cols}));
      EXPECT_EQ(se->shape, modelopt ? Shape{rows} : (Shape{rows, 1}));
      std::vector<uint8_t> codes(size_t(rows * cols));
      std::vector<float> scales(static_cast<size_t>(rows));
      // ModelOpt's rounding, or llm-compressor's for compressed-tensors.
      if (modelopt) {
        fp8_channel_quantize_reference(w, DType::F32, codes.data(), scales.data());
      } else {
        const QuantizedTensor ref = llm_compressor_reference(w, Format::fp8, 1);
        std::memcpy(codes.data(), ref.codes.data(), codes.size());
        scales = ref.scales;
      }
      EXPECT_EQ(0, std::memcmp(bytes_of(q, weight_name).data(), codes.data(), codes.size()));
      EXPECT_EQ(floats_of(bytes_of(q, module + ".weight_scale"), DType::F32), scales);
    } else if (c.format == "int4") {
      const int group = int(cols / se->shape[1]);
      std::vector<int8_t> codes(size_t(rows * cols));
      std::vector<float> scales(size_t(rows * cols / group));
      if (modelopt) {
        int4_quantize_reference(w, group, DType::F32, codes.data(), scales.data());
      } else {
        const QuantizedTensor ref = llm_compressor_reference(w, Format::int4, group);
        std::memcpy(codes.data(), ref.codes.data(), codes.size());
        scales = ref.scales;
      }
      EXPECT_EQ(floats_of(bytes_of(q, module + ".weight_scale"), DType::F32), scales);
      if (modelopt) {
        EXPECT_EQ(we->dtype, DType::U8);
        EXPECT_EQ(we->shape, (Shape{rows / 2, cols}));
        std::vector<uint8_t> packed(size_t(rows / 2 * cols));
        int4_pack_row_pairs(codes.data(), rows, cols, packed.data());
        EXPECT_EQ(0, std::memcmp(bytes_of(q, weight_name).data(), packed.data(), packed.size()));
      } else {
        EXPECT_EQ(we->dtype, DType::I32);
        EXPECT_EQ(we->shape, (Shape{rows, cols / 8}));
        std::vector<int32_t> packed(size_t(rows * cols / 8));
        int4_pack_int32(codes.data(), rows, cols, packed.data());
        EXPECT_EQ(0, std::memcmp(bytes_of(q, weight_name).data(), packed.data(), packed.size() * 4));
        const auto shape = bytes_of(q, module + ".weight_shape");
        int64_t dims[2];
        std::memcpy(dims, shape.data(), 16);
        EXPECT_EQ(dims[0], rows);
        EXPECT_EQ(dims[1], cols);
      }
    }
    EXPECT_EQ(q.find(module + ".weight") != nullptr, modelopt || c.format == "fp8");
    ++checked;
  }
  EXPECT_EQ(checked, report["modules_quantized"].get<int>());

  // inspect reads it back.
  const auto ir = test::run_qforge("inspect '" + out.string() + "' --json");
  ASSERT_EQ(ir.exit_code, 0) << ir.err;
  const auto inspect = nlohmann::json::parse(ir.out);
  EXPECT_EQ(inspect["total_bytes"].get<uint64_t>(), report["bytes_out"].get<uint64_t>());
  EXPECT_EQ(inspect["quantized_weights"].get<int64_t>(), report["quantized_weights"].get<int64_t>());
  EXPECT_NEAR(inspect["bits_per_quantized_weight"].get<double>(),
              report["bits_per_quantized_weight"].get<double>(), 1e-9);
  EXPECT_FALSE(inspect["quant_algo"].is_null());
  EXPECT_EQ(inspect["tensors"].size(), q.tensors().size());
  for (const auto& t : inspect["tensors"])
    for (const char* key : {"name", "dtype", "shape", "bytes"}) EXPECT_TRUE(t.contains(key));
  if (modelopt) {
    const auto hf = read_json_file(out / "hf_quant_config.json");
    EXPECT_EQ(hf["quantization"]["quant_algo"], qc["quant_algo"]);
    EXPECT_TRUE(hf["quantization"].contains("kv_cache_quant_algo"));
    EXPECT_EQ(hf["quantization"]["exclude_modules"], ignore);
  }
  // Tokenizer and other files come along.
  for (const auto& f : in.extra_files()) EXPECT_TRUE(fs::exists(out / f)) << f;
}

std::vector<Case> all_cases() {
  std::vector<Case> cases;
  for (const std::string model : {"stories260K-hf", "tinystories-656K-hf"})
    for (const std::string format : {"nvfp4", "mxfp4", "fp8", "int4"})
      for (const std::string exp : {"modelopt", "compressed-tensors"})
        cases.push_back({model, format, exp,
                         format == "int4" && model == "stories260K-hf" ? "--group-size 32" : ""});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Fixtures, QuantizeFixture, ::testing::ValuesIn(all_cases()), case_name);

}  // namespace
}  // namespace qf

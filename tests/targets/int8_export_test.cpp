// INT8 W8A8 (SmoothQuant) in both exporters: tensor names, dtypes, shapes and bytes of one
// Linear, and the quantization configs (ModelOpt W8A8_SQ_PER_CHANNEL, compressed-tensors
// int-quantized with static per-tensor INT8 inputs).
#include "core/convert.h"
#include "core/thread_pool.h"
#include "targets/exporter.h"
#include "formats/int8.h"

#include <gtest/gtest.h>

#include <cstring>

namespace qf {
namespace {

ExportedLinear int8_linear(bool pre_quant_scale, DType model_dtype) {
  ExportedLinear l;
  l.module = "model.layers.0.mlp.up_proj";
  l.format = Format::int8;
  l.rows = 3;
  l.cols = 4;
  l.block = 1;
  l.model_dtype = model_dtype;
  l.act = ActQuant::int8;
  l.pre_quant_scale = pre_quant_scale;
  return l;
}

QuantizedTensor small_int8(DType scale_dtype) {
  ThreadPool pool(1);
  const std::vector<float> w = {1.f, -2.f, 0.5f, 127.f, 0.f, 0.f, 0.f, 0.f, -3.f, 1.f, 2.f, 0.25f};
  return int8_to_quantized(int8_channel_quantize(w.data(), 3, 4, scale_dtype, pool));
}

TEST(Int8Export, ModelOptTensors) {
  const auto ex = make_exporter(ExportFormat::modelopt);
  const ExportedLinear l = int8_linear(true, DType::BF16);
  const auto specs = ex->linear_specs(l);
  ASSERT_EQ(specs.size(), 4u);
  const std::string m = l.module;
  EXPECT_EQ(specs[0].name, m + ".weight");
  EXPECT_EQ(specs[0].dtype, DType::I8);
  EXPECT_EQ(specs[0].shape, (Shape{3, 4}));
  EXPECT_EQ(specs[1].name, m + ".weight_scale");
  EXPECT_EQ(specs[1].dtype, DType::F32);
  EXPECT_EQ(specs[1].shape, (Shape{3}));
  EXPECT_EQ(specs[2].name, m + ".input_scale");
  EXPECT_EQ(specs[2].dtype, DType::F32);
  EXPECT_EQ(specs[2].shape, Shape{});
  EXPECT_EQ(specs[3].name, m + ".pre_quant_scale");
  EXPECT_EQ(specs[3].dtype, DType::BF16);  // the model's dtype
  EXPECT_EQ(specs[3].shape, (Shape{4}));
  EXPECT_EQ(ex->pre_quant_scale_dtype(l), DType::BF16);
  EXPECT_EQ(ex->pre_quant_scale_dtype(int8_linear(true, DType::F32)), DType::F32);

  const QuantizedTensor q = small_int8(ex->scale_dtype(l));
  LinearExtras x;
  x.input_scale = 0.5f;
  x.pre_quant_scale = {1.f, 2.f, 0.5f, 0.25f};
  const auto data = ex->linear_data(l, q, x);
  ASSERT_EQ(data.size(), specs.size());
  for (size_t i = 0; i < data.size(); ++i) EXPECT_EQ(data[i].size(), specs[i].nbytes()) << i;
  EXPECT_EQ(int8_t(data[0][3]), 127);
  float s[3];
  std::memcpy(s, data[1].data(), sizeof(s));
  EXPECT_EQ(s[0], 127.f * (1.0f / 127.0f));
  EXPECT_EQ(s[1], 1.f);  // dead row
  float pqs[4];
  convert_to_f32(DType::BF16, data[3].data(), pqs, 4);
  EXPECT_EQ(pqs[1], 2.f);
}

TEST(Int8Export, ModelOptConfig) {
  const auto ex = make_exporter(ExportFormat::modelopt);
  QuantizationSummary s{Format::int8, 1, {"lm_head", "model.embed_tokens"}};
  s.act = ActQuant::int8;
  const auto c = ex->quantization_config(s);
  EXPECT_EQ(c["quant_algo"], "W8A8_SQ_PER_CHANNEL");
  EXPECT_FALSE(c.contains("config_groups"));  // "other single formats" get none (§4.7)
  EXPECT_EQ(c["quant_method"], "modelopt");
  EXPECT_EQ(c["ignore"].size(), 2u);
  s.act = ActQuant::none;
  EXPECT_EQ(ex->quantization_config(s)["quant_algo"], "W8A16");
}

TEST(Int8Export, CompressedTensorsTensorsAndConfig) {
  const auto ex = make_exporter(ExportFormat::compressed_tensors);
  const ExportedLinear l = int8_linear(false, DType::BF16);
  EXPECT_EQ(ex->unsupported_reason(l), "");
  EXPECT_NE(ex->unsupported_reason(int8_linear(true, DType::BF16)), "");
  const auto specs = ex->linear_specs(l);
  ASSERT_EQ(specs.size(), 3u);
  EXPECT_EQ(specs[0].name, l.module + ".weight");
  EXPECT_EQ(specs[0].dtype, DType::I8);
  EXPECT_EQ(specs[1].name, l.module + ".weight_scale");
  EXPECT_EQ(specs[1].dtype, DType::BF16);
  EXPECT_EQ(specs[1].shape, (Shape{3, 1}));
  EXPECT_EQ(specs[2].name, l.module + ".input_scale");
  EXPECT_EQ(specs[2].shape, (Shape{1}));
  const QuantizedTensor q = small_int8(ex->scale_dtype(l));
  LinearExtras x;
  x.input_scale = 0.5f;
  const auto data = ex->linear_data(l, q, x);
  ASSERT_EQ(data.size(), specs.size());
  for (size_t i = 0; i < data.size(); ++i) EXPECT_EQ(data[i].size(), specs[i].nbytes()) << i;

  QuantizationSummary s{Format::int8, 1, {"lm_head"}};
  s.act = ActQuant::int8;
  const auto c = ex->quantization_config(s);
  EXPECT_EQ(c["format"], "int-quantized");
  const auto& g = c["config_groups"]["group_0"];
  EXPECT_EQ(g["format"], "int-quantized");
  EXPECT_EQ(g["weights"]["num_bits"], 8);
  EXPECT_EQ(g["weights"]["type"], "int");
  EXPECT_EQ(g["weights"]["strategy"], "channel");
  EXPECT_EQ(g["weights"]["symmetric"], true);
  EXPECT_EQ(g["input_activations"]["num_bits"], 8);
  EXPECT_EQ(g["input_activations"]["type"], "int");
  EXPECT_EQ(g["input_activations"]["strategy"], "tensor");
  EXPECT_EQ(g["input_activations"]["dynamic"], false);
  EXPECT_EQ(g["input_activations"]["symmetric"], true);
}

}  // namespace
}  // namespace qf

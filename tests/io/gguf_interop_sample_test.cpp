// Writes a GGUF with every type qforge can produce, for scripts/interop/gguf_check.sh to read
// with the `gguf` Python package. Runs only when QFORGE_GGUF_SAMPLE names the output path (the
// default test run skips it); each quantized tensor `q.<type>` comes with `deq.<type>`, qforge's
// own dequantization as F32, which the script compares with gguf-py's.
#include "formats/ggml_quants.h"
#include "formats/ggml_types.h"
#include "io/gguf_writer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

namespace qf {
namespace {

TEST(GgufInteropSample, WriteForGgufPy) {
  const char* out = std::getenv("QFORGE_GGUF_SAMPLE");
  if (!out) GTEST_SKIP() << "QFORGE_GGUF_SAMPLE not set (scripts/interop/gguf_check.sh sets it)";
  const int64_t cols = 256, rows = 4;
  std::mt19937 rng(7);
  std::normal_distribution<float> dist(0.f, 0.05f);
  std::vector<float> w(size_t(rows * cols));
  for (float& x : w) x = dist(rng);

  GgufMetadata m;
  m.set_string("general.architecture", "llama");
  m.set_string("general.name", "qforge-gguf-sample");
  m.set_u32("general.quantization_version", 2);
  m.set_u32("llama.block_count", 1);
  m.set_u32("llama.embedding_length", uint32_t(cols));
  m.set_f32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
  m.set_bool("tokenizer.ggml.add_bos_token", true);
  m.set_string("tokenizer.ggml.model", "llama");
  m.set_string_array("tokenizer.ggml.tokens", {"<unk>", "<s>", "</s>", "hello"});
  m.set_f32_array("tokenizer.ggml.scores", std::vector<float>{0.f, 0.f, 0.f, -1.5f});
  m.set_i32_array("tokenizer.ggml.token_type", std::vector<int32_t>{2, 3, 3, 1});
  m.set_i64("qforge.test.i64", -42);
  m.set_f64("qforge.test.f64", 0.375);

  const GgmlType types[] = {GgmlType::F32,  GgmlType::F16,  GgmlType::BF16, GgmlType::Q8_0,
                            GgmlType::Q4_0, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K,
                            GgmlType::MXFP4, GgmlType::NVFP4};
  std::vector<GgufTensorSpec> specs;
  std::vector<std::vector<uint8_t>> data;
  for (GgmlType t : types) {
    const GgmlTypeInfo& info = ggml_type_info(t);
    const std::string name(info.name);
    std::vector<uint8_t> q(size_t(rows * cols / info.block_size * info.block_bytes));
    info.quantize(w.data(), q.data(), int64_t(w.size()));
    std::vector<float> deq(w.size());
    info.dequantize(q.data(), deq.data(), int64_t(deq.size()));
    specs.push_back({"q." + name, t, {cols, rows}});
    data.push_back(std::move(q));
    specs.push_back({"deq." + name, GgmlType::F32, {cols, rows}});
    std::vector<uint8_t> d(deq.size() * 4);
    std::memcpy(d.data(), deq.data(), d.size());
    data.push_back(std::move(d));
  }
  specs.push_back({"q.nvfp4.scale", GgmlType::F32, {1}});
  const float ws2 = 0.5f;
  data.push_back(std::vector<uint8_t>(reinterpret_cast<const uint8_t*>(&ws2),
                                      reinterpret_cast<const uint8_t*>(&ws2) + 4));
  GgufWriter wr(out, m, specs);
  for (size_t i = 0; i < specs.size(); ++i) wr.write(specs[i].name, std::as_bytes(std::span(data[i])));
  wr.finish();
}

}  // namespace
}  // namespace qf

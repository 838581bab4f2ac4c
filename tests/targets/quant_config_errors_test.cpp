// Quantization configs read back from checkpoints (config.json's quantization_config, ModelOpt's
// hf_quant_config.json): a field of the wrong type is a one-line qf::Error naming the file and
// the field, never a JSON library exception. Each case made tests/fuzz/quant_config_fuzz.cpp abort.
#include "core/error.h"
#include "io/checkpoint.h"
#include "targets/checkpoint_inspector.h"
#include "targets/target.h"
#include "test_util.h"

#include <gtest/gtest.h>

#include <functional>

namespace qf {
namespace {

// A valid shard with one F32 scalar, so that Checkpoint::open reaches the configs.
std::string one_tensor_shard() {
  const std::string header =
      R"({"model.layers.0.mlp.down_proj.weight":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})";
  std::string out(8, '\0');
  for (int b = 0; b < 8; ++b) out[size_t(b)] = char((header.size() >> (8 * b)) & 0xff);
  return out + header + std::string(4, '\0');
}

// The qf::Error message of detecting the target of a checkpoint with these files ("" if none);
// any other exception fails the test.
std::string detect_error(const std::string& config, const std::string& hf_quant = "") {
  test::ScratchDir dir;
  test::write_file(dir / "model.safetensors", one_tensor_shard());
  test::write_file(dir / "config.json", config);
  if (!hf_quant.empty()) test::write_file(dir / "hf_quant_config.json", hf_quant);
  try {
    const Checkpoint ck = Checkpoint::open(dir.path());
    (void)declared_algo_name(declared_quantization_config(ck));
    detect_target(ck, "M");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

void expect_field_error(const std::string& message, const std::string& field) {
  EXPECT_EQ(message.rfind("M: ", 0), 0u) << message;
  EXPECT_NE(message.find(field), std::string::npos) << message;
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
}

TEST(QuantConfigErrors, NonStringFieldsAreNamed) {
  expect_field_error(detect_error(R"({"quantization_config": {"quant_method": 5}})"),
                     "config.json: quantization_config.quant_method is not a string");
  expect_field_error(
      detect_error(R"({"quantization_config": {"quant_method": "compressed-tensors", "format": []}})"),
      "quantization_config.format is not a string");
  expect_field_error(
      detect_error(R"({"quantization_config": {"quant_method": "compressed-tensors",
        "format": "mixed-precision", "config_groups": {"g": {"format": 1}}}})"),
      "quantization_config.config_groups['g'].format is not a string");
  expect_field_error(
      detect_error(R"({"quantization_config": {"quant_method": "compressed-tensors",
        "format": "float-quantized", "config_groups": {"g": {"input_activations":
        {"num_bits": 8, "type": {}}}}}})"),
      "config_groups['g'].input_activations.type is not a string");
  expect_field_error(
      detect_error(R"({"quantization_config": {"quant_method": "modelopt", "quant_algo": "FP8",
        "group_size": 99999999999}})"),
      "quantization_config.group_size is 99999999999, out of range");
  expect_field_error(detect_error("{}", R"({"quantization": {"quant_algo": 7}})"),
                     "hf_quant_config.json: quantization.quant_algo is not a string");
  expect_field_error(
      detect_error("{}", R"({"quantization": {"quant_algo": "MIXED_PRECISION",
        "quantized_layers": {"model.layers.0.mlp.down_proj": {"quant_algo": false}}}})"),
      "quantized_layers['model.layers.0.mlp.down_proj'].quant_algo is not a string");
  expect_field_error(
      detect_error("{}", R"({"quantization": {"quant_algo": "W4A16_AWQ",
        "group_size": -9999999999}})"),
      "hf_quant_config.json: quantization.group_size");
}

// A non-object group, a non-object "quantization" and a fractional num_bits were exceptions of
// the JSON library (or a float-to-int conversion out of range); now they are unsupported
// configs or ignored members.
TEST(QuantConfigErrors, WrongShapesAreErrorsOrIgnored) {
  EXPECT_NE(detect_error(R"({"quantization_config": {"quant_method": "compressed-tensors",
        "format": "mixed-precision", "config_groups": {"g": 3}}})"), "");
  EXPECT_NE(detect_error(R"({"quantization_config": {"quant_method": "compressed-tensors",
        "format": "float-quantized", "config_groups": {"g": {"input_activations":
        {"num_bits": 1e300, "type": "float"}}}}})").find("unsupported"), std::string::npos);
  EXPECT_EQ(detect_error("{}", R"({"quantization": 3})"), "");
  EXPECT_EQ(detect_error(R"({"quantization_config": {"quantization": []}})"), "");
}

// std::regex accepted "re:.**ate.*" and then hung matching it (found by the quant_config fuzzer;
// the reproducer is in tests/fuzz/corpus/quant_config). A bad regex now names the list.
TEST(QuantConfigErrors, InvalidIgnoreRegexIsNamed) {
  expect_field_error(detect_error(R"({"quantization_config": {"quant_method": "compressed-tensors",
        "format": "nvfp4-pack-quantized", "ignore": ["lm_head", "re:.**ate.*"]}})"),
                     "config.json: quantization_config.ignore: invalid regex \".**ate.*\"");
}

TEST(QuantConfigErrors, InspectorNamesANonStringModelType) {
  test::ScratchDir dir;
  test::write_file(dir / "model.safetensors", one_tensor_shard());
  test::write_file(dir / "config.json", R"({"model_type": ["llama"]})");
  try {
    inspect_checkpoint(dir.path());
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("config.json.model_type is not a string"),
              std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace qf

// What is in a checkpoint: its tensors, their dtypes, shapes and sizes, the quantization
// config it declares, and how many bits each quantized weight costs on disk. Reads both plain
// and exported (ModelOpt, compressed-tensors) checkpoints.
#pragma once

#include "core/tensor.h"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <map>
#include <string>
#include <vector>

namespace qf {

struct InspectedTensor {
  std::string name;
  DType dtype = DType::F32;
  Shape shape;
  uint64_t bytes = 0;
};

struct InspectReport {
  std::filesystem::path dir;
  std::string model_type;
  std::string architecture;  // Architecture::describe(), or why qforge cannot run it
  int shards = 0;
  uint64_t total_bytes = 0;    // sizes of the safetensors files
  uint64_t tensor_bytes = 0;   // data bytes of all tensors
  std::string quant_algo;      // ModelOpt quant_algo, or compressed-tensors format; "" if none
  nlohmann::json quantization_config;  // null when the checkpoint is not quantized
  int quantized_modules = 0;
  int64_t quantized_weights = 0;  // logical weight elements stored quantized
  uint64_t quantized_bytes = 0;   // bytes of those weights with all their scales
  // Every decoder Linear (those the layer specs name), quantized or not: its weight elements and
  // stored bytes (scales included). bits_per_linear_weight is what `quantize --auto
  // --target-bits` aims at.
  int64_t linear_weights = 0;
  uint64_t linear_bytes = 0;
  std::vector<InspectedTensor> tensors;  // in file order
  // Each quantized module's scheme as its config declares it ("nvfp4", "nvfp4 W4A4", "fp8 W8A8",
  // ...: the format, then the activations where they are quantized), by module name; empty when
  // the config names no scheme qforge reads.
  std::map<std::string, std::string> module_schemes;

  double bits_per_linear_weight() const {
    return linear_weights ? double(linear_bytes) * 8.0 / double(linear_weights) : 0.0;
  }

  double bits_per_quantized_weight() const {
    return quantized_weights ? double(quantized_bytes) * 8.0 / double(quantized_weights) : 0.0;
  }
};

// Throws qf::Error naming the file for an unreadable or invalid checkpoint.
InspectReport inspect_checkpoint(const std::filesystem::path& dir);

}  // namespace qf

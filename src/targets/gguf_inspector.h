// What is in a GGUF file (`qforge inspect FILE.gguf`): its metadata (long arrays such as a
// tokenizer's vocabulary summarised by their type, length and first elements), its tensors with
// their ggml types, shapes and sizes, and the bits each weight of the 2-D tensors costs.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace qf {

struct GgufInspectedTensor {
  std::string name;
  std::string type;            // ggml's spelling: "q4_K", "nvfp4", "f32"
  std::vector<int64_t> shape;  // row-major (ggml's ne reversed), as `inspect` shows safetensors
  uint64_t bytes = 0;
};

struct GgufInspectReport {
  std::filesystem::path path;
  uint32_t version = 0;
  uint64_t file_bytes = 0;
  uint64_t tensor_bytes = 0;
  std::string architecture;  // general.architecture, "" if absent
  std::string name;          // general.name, "" if absent
  // Each key with its value: scalars as JSON numbers / strings / bools; arrays as
  // {"array": element type, "count": n, "head": first elements}.
  nlohmann::ordered_json metadata = nlohmann::ordered_json::object();
  std::vector<GgufInspectedTensor> tensors;  // file order
  // 2-D tensors (the weight matrices): their elements and bytes, and the bits per element.
  int64_t matrix_weights = 0;
  uint64_t matrix_bytes = 0;
  double bits_per_matrix_weight() const {
    return matrix_weights ? double(matrix_bytes) * 8.0 / double(matrix_weights) : 0.0;
  }
};

// Throws qf::Error naming the file for an invalid GGUF (io/gguf_file.h's checks).
GgufInspectReport inspect_gguf(const std::filesystem::path& path);

}  // namespace qf

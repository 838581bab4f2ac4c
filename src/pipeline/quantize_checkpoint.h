// Weight-only quantization of a whole checkpoint, streamed tensor by tensor: read a Hugging Face
// checkpoint, quantize its Linear weights, and write a checkpoint in an engine's format. Memory
// holds one tensor (and its quantized form) at a time, whatever the model's size.
#pragma once

#include "export/exporter.h"
#include "formats/registry.h"

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace qf {

struct QuantizeOptions {
  Format format = Format::nvfp4;
  ExportFormat export_format = ExportFormat::modelopt;
  std::vector<std::string> exclude;  // glob patterns over module names (fnmatch)
  int block = 0;                     // INT4 group size; 0 = the format's default
  int threads = 0;                   // 0 = all hardware threads
  uint64_t max_shard_bytes = 5'000'000'000;
  bool force = false;     // replace an existing output directory
  bool progress = true;   // progress bar on stderr when it is a terminal
};

struct ExcludedModule {
  std::string name;
  std::string reason;
};

struct QuantizeReport {
  std::filesystem::path output;
  std::string format;
  std::string export_format;
  uint64_t bytes_in = 0;   // sizes of the input safetensors files
  uint64_t bytes_out = 0;  // sizes of the output safetensors files
  double seconds = 0;
  int modules_quantized = 0;
  int modules_excluded = 0;  // Linear modules of the decoder left unquantized
  int tensors_copied = 0;
  int64_t quantized_weights = 0;  // weight elements that were quantized
  uint64_t quantized_bytes = 0;   // bytes of the tensors that replace them (codes and scales)
  int shards = 0;
  uint64_t peak_rss_bytes = 0;
  std::vector<ExcludedModule> excluded;
  std::vector<std::string> warnings;

  double bits_per_quantized_weight() const {
    return quantized_weights ? double(quantized_bytes) * 8.0 / double(quantized_weights) : 0.0;
  }
};

// Quantizes `model_dir` into `out_dir`. The output is written under a temporary name and
// renamed when complete; inputs are only read. Throws qf::Error (one line naming the file,
// tensor or module) on bad input, NaN/Inf weights, an existing output without `force`, or a
// failed write.
QuantizeReport quantize_checkpoint(const std::filesystem::path& model_dir,
                                   const std::filesystem::path& out_dir,
                                   const QuantizeOptions& options);

}  // namespace qf

// The GGUF write step of `qforge quantize --export gguf`: a Llama-family checkpoint to one
// llama.cpp GGUF file. It is not an `Exporter`: those describe safetensors tensors next to a
// config.json, while a GGUF holds the architecture and the tokenizer as metadata and ggml's
// block types as tensors. The plan (every tensor's name, ggml type and shape) is made first, so
// that anything GGUF cannot express is refused before a byte is written; then tensors stream one
// at a time through GgufWriter (temporary name, renamed when complete).
#pragma once

#include "calib/calibration_data.h"
#include "formats/weight_rows.h"
#include "io/imatrix_file.h"
#include "pipeline/gguf_calibrated.h"
#include "pipeline/gguf_tensor_types.h"
#include "pipeline/source_model.h"

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace qf {

struct GgufExportOptions {
  std::string format = "q8_0";  // a gguf_file_types() name
  bool force = false;           // replace an existing output file
  bool allow_nonfinite = false; // copy non-finite float tensors (quantized ones must be finite)
  int threads = 0;              // quantizing threads (0: all hardware threads); bytes do not
                                // depend on it (rows are quantized independently)
  // How NVFP4's tensor scale divides amax (formats/weight_rows.h ConstantDivision, as
  // `--scale-division` sets it for the other exports).
  ConstantDivision scale_division = ConstantDivision::gpu;
  // --imatrix: llama.cpp importance per tensor name. Every tensor quantized to a type whose
  // quantizer reads it and named in it gets it (llama-quantize's rule); a length other than the
  // tensor's row length is an error (the token embedding, which llama-quantize skips then,
  // excepted). Null: none.
  const ImatrixData* imatrix = nullptr;
  // --calib: qforge's calibration pass drives every blk.* Linear (pipeline/gguf_calibrated.h);
  // importance from `imatrix` where it names the tensor. Null: no calibration.
  const CalibrationOptions* calib = nullptr;
  GgufAlgo algo = GgufAlgo::gptq;
  bool progress = false;
};

struct GgufReport {
  std::filesystem::path output;
  std::string format;
  uint32_t file_type = 0;
  std::string tokenizer;  // "llama (tokenizer.model, 512 tokens)"
  struct Tensor {
    std::string name;
    std::string type;   // ggml's name
    std::vector<int64_t> ne;
    uint64_t bytes = 0;
    std::string note;   // why its type differs from the file type's
  };
  std::vector<Tensor> tensors;
  uint64_t bytes_in = 0, bytes_out = 0;
  double seconds = 0;
  std::vector<std::string> warnings;
  std::string algo;            // "" (round to nearest), "imatrix", "gptq"
  int64_t imatrix_entries = 0; // tensors that took an importance from --imatrix
  int64_t calib_tokens = 0;
  double calib_seconds = 0;
};

// Writes `model` as GGUF file `out`. Throws qf::Error naming the file and the problem for a
// family other than llama (config.json model_type), a feature the llama graph does not compute
// (biases, RoPE scaling other than linear), a tokenizer GGUF cannot express, non-finite weights,
// an existing `out` without `force`, or a failed write; nothing is left at `out` then.
GgufReport export_gguf(const SourceModel& model, const std::filesystem::path& out,
                       const GgufExportOptions& options);

}  // namespace qf

// Importance-weighted and calibrated quantization of the weight matrices of a GGUF export
// (`quantize --export gguf --imatrix FILE` and/or `--calib FILE [--algo imatrix|gptq]`).
//
// Importance is the mean x^2 of each input column of a Linear, what llama-imatrix measures:
// from a llama.cpp imatrix file (io/imatrix_file.h, looked up by the tensor's llama.cpp name),
// or from qforge's own calibration pass (calib/layer_calibration: diag(X^T X) / tokens). It
// drives each type's scale search: ggml's weighted quantizers for Q4_0/Q4_K/Q5_K/Q6_K (the
// bytes llama-quantize --imatrix writes), qforge's weighted searches for MXFP4 and NVFP4 (ggml
// ignores the importance there, as it does for Q8_0). With `gptq` the scales found so are
// frozen and the codes chosen column by column with error feedback through the full X^T X
// (algo/ggml_gptq.h); for NVFP4 the scale search then weighs each 16-block by its 16x16 block
// of X^T X (ModelOpt's local_hessian criterion) instead of its diagonal.
#pragma once

#include "calib/calibration_data.h"
#include "formats/ggml_types.h"
#include "io/imatrix_file.h"
#include "io/spill_file.h"
#include "pipeline/source_model.h"

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace qf {

class ThreadPool;

// The `--algo` names of the calibrated GGUF path.
enum class GgufAlgo { imatrix, gptq };

// One weight matrix: rows (GGUF row order: q/k already permuted) x cols, quantized to `type`.
// importance [cols] or null (then the reference quantizer); block_hessian: NVFP4 only,
// [cols/16][16*16] float (used instead of importance for the scale search when given); xtx and
// tokens: GPTQ's statistics when `gptq`. g: NVFP4's tensor scale. out: rows * row bytes.
struct GgufMatrixJob {
  GgmlType type = GgmlType::Q8_0;
  const float* x = nullptr;
  int64_t rows = 0, cols = 0;
  const float* importance = nullptr;
  const float* block_hessian = nullptr;
  bool gptq = false;
  const std::vector<double>* xtx = nullptr;
  int64_t tokens = 0;
  float g = 1.f;
};
// Returns what was done, for the report ("", "importance", "importance + gptq", "gptq fell
// back to the weighted search: H not positive definite").
std::string quantize_gguf_matrix(const GgufMatrixJob& job, uint8_t* out, ThreadPool& pool);

// A Linear of the export as gguf_output planned it.
struct GgufLinearTarget {
  std::string name;  // llama.cpp name: blk.N.attn_q.weight
  GgmlType type;
  const CheckpointTensor* source;
  int64_t permute_heads;  // q/k: heads to reorder rows in (0: none)
};

struct GgufCalibrationOptions {
  CalibrationOptions calib;
  GgufAlgo algo = GgufAlgo::gptq;
  const ImatrixData* imatrix = nullptr;  // importance from a file instead of calibration
  int threads = 0;
  bool progress = false;
};

// Quantized bytes of the calibrated Linears, waiting in an unnamed spill file until written.
class GgufPrecomputed {
 public:
  struct Entry {
    SpillFile::Extent extent;
    float g = 1.f;      // NVFP4 tensor scale
    std::string note;   // what was done
  };
  explicit GgufPrecomputed(const std::filesystem::path& spill_dir) : spill_(spill_dir) {}
  void put(const std::string& name, std::span<const uint8_t> bytes, float g, std::string note);
  const Entry* find(const std::string& name) const;
  std::vector<uint8_t> bytes(const Entry& e) const { return spill_.get(e.extent); }
  int64_t tokens = 0;
  double seconds = 0;
  std::vector<std::string> warnings;

 private:
  SpillFile spill_;
  std::map<std::string, Entry> entries_;
};

// The NVFP4 tensor scale qforge gives a weight (ModelOpt's weight_scale_2 of its amax).
float gguf_nvfp4_tensor_scale(const float* x, int64_t n);

// Runs the calibration pass (one decoder layer at a time; memory: one layer's X^T X) and
// quantizes every target Linear from its statistics. Throws qf::Error for unreadable
// calibration data, non-finite activations, or an importance of the wrong length.
std::unique_ptr<GgufPrecomputed> calibrate_gguf(const SourceModel& model,
                                                const std::vector<GgufLinearTarget>& targets,
                                                const GgufCalibrationOptions& options,
                                                const std::filesystem::path& spill_dir);

}  // namespace qf

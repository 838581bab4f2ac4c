// The input of a pipeline job (quantize, sensitivity, --auto): the checkpoint opened and its
// config parsed once, then handed to every step, so one run never re-opens or re-reads a file
// that might change under it.
#pragma once

#include "io/checkpoint.h"
#include "io/tokenizer.h"
#include "model/architecture.h"

#include <filesystem>
#include <memory>
#include <string_view>

namespace qf {

class GgufFile;

struct SourceModel {
  // The model directory, or a GGUF file (llama architecture, F32/F16/BF16 weights) whose
  // tensors `checkpoint` presents under Hugging Face names (model/gguf_checkpoint.h).
  std::filesystem::path dir;
  // --tokenizer: where the tokenizer files are read from instead of `dir` (empty: `dir`).
  std::filesystem::path tokenizer_dir;
  std::shared_ptr<const Checkpoint> checkpoint;  // shared with the engine's views
  Architecture arch;
  std::shared_ptr<const GgufFile> gguf;  // the GGUF file when `dir` is one, else null

  // Opens `dir` (Checkpoint::open, then Architecture::from_config), or a GGUF file
  // (open_gguf_checkpoint). Throws qf::Error naming the file and problem.
  static SourceModel open(const std::filesystem::path& dir,
                          const std::filesystem::path& tokenizer_dir = {});
  // Throws qf::Error "<file>: already quantized (<what was found>); <command> takes an
  // unquantized BF16/F16/F32 checkpoint" when the checkpoint declares a quantization config
  // (config.json's quantization_config, ModelOpt's hf_quant_config.json) or holds quantized
  // tensors (scales, packed codes, FP8 weights) -- before any shape check can fail on them.
  void require_unquantized(std::string_view command) const;
  // Bytes of the input files: the shards, or the GGUF file (not the in-memory q/k copy its
  // checkpoint view holds as a second file).
  uint64_t input_bytes() const;
  // Whether this is gpt-oss's original MXFP4 release (quantization_config quant_method "mxfp4":
  // routed experts MXFP4, the rest float), which `quantize` casts to NVFP4.
  bool is_gpt_oss_mxfp4() const;

  // The tokenizer (of tokenizer_dir when set; a GGUF file's own otherwise), loaded on first use (calibration needs it;
  // weight-only jobs do not). Throws qf::Error naming the directory when it has none.
  const Tokenizer& tokenizer() const;

 private:
  mutable std::shared_ptr<const Tokenizer> tokenizer_;
};

}  // namespace qf

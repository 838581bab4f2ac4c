// A GGUF file of llama.cpp's "llama" architecture whose weights are F32, F16 or BF16, seen as a
// Hugging Face checkpoint, so the quantizer (and sensitivity) read it like a model directory:
// tensors under Hugging Face names (the inverse of model/gguf_llama_layout's map), a
// config.json built from the llama.* metadata (gguf_llama_config, the engine's own), and the
// GGUF's tokenizer (io/tokenizer.h load_gguf) for calibration. Tensors are views of the file's
// mapping, except q_proj / k_proj, whose rows are put back in rotate-half order in an anonymous
// read-only copy (the q and k weights held in memory once).
#pragma once

#include "io/checkpoint.h"
#include "io/gguf_file.h"

#include <filesystem>
#include <memory>

namespace qf {

struct GgufCheckpoint {
  std::shared_ptr<const GgufFile> file;
  std::shared_ptr<const Checkpoint> checkpoint;
};

// Opens `path`. Throws qf::Error, one line starting with the file: a truncated or malformed
// file (io/gguf_file.h), another architecture or a feature gguf_llama_config refuses, a weight
// stored in a quantized ggml type (naming the tensor and the type), a tensor the llama model
// does not read, a missing tensor.
GgufCheckpoint open_gguf_checkpoint(const std::filesystem::path& path);

}  // namespace qf

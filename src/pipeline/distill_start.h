// Where `qforge tune` starts: every quantized decoder Linear's QuantizedTensor (its scales are
// frozen for the distillation, its codes are the student's first weights) and, for W4A4 / W8A8,
// each block's static input scales as the engine reads them. Either made by the normal
// quantization pipeline, or read from a checkpoint the user quantized before (`--from`).
#pragma once

#include "formats/quantized_tensor.h"
#include "pipeline/quantize_checkpoint.h"
#include "train/block_grad.h"

#include <filesystem>
#include <map>
#include <vector>

namespace qf {

struct SourceModel;

struct DistillStart {
  std::map<size_t, QuantizedTensor> tensors;  // by Architecture::linears index, quantized only
  std::vector<BlockActQuant> act;             // per layer; empty for weight-only quantization
};

// Quantizes `model` with `options` into a scratch directory beside `out_dir` (removed however
// this ends), keeping the tensors; the input scales are read back from that export.
DistillStart quantize_start(const SourceModel& model, const std::filesystem::path& out_dir,
                            const QuantizeOptions& options);

// Reads the start from `quant`, a qforge (ModelOpt or compressed-tensors) export of `model` in
// NVFP4 or MXFP4. It must be the export `options` would write: the same architecture and shapes,
// the same Linears quantized (the plan's --exclude), the same weight format and activation
// quantization, and no input pre-scales (AWQ / SmoothQuant). Throws qf::Error naming `quant`
// and the first Linear that differs.
DistillStart read_start(const SourceModel& model, const std::filesystem::path& quant,
                        const QuantizeOptions& options);

}  // namespace qf

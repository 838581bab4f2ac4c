// Step 3 of quantization, "write": the output checkpoint, tensor by tensor in input order, in
// the export target's layout (quantized Linears through the target's writer, every other tensor
// copied as stored), cut into shards, then config.json with the target's quantization config,
// the target's extra files and the input's tokenizer files. Input pages are released as they
// are consumed, so memory holds one tensor and its quantized form.
#pragma once

#include "pipeline/calibrated_weights.h"

#include "io/safetensors_writer.h"

#include <filesystem>
#include <map>
#include <string>
#include <vector>

namespace qf {

// One tensor of the input as it appears in the output, in file order: copied, or a quantized
// Linear (several output tensors: codes and scales).
struct OutputItem {
  const CheckpointTensor* source = nullptr;
  int linear = -1;    // index into Architecture::linears when quantized
  bool head = false;  // the quantized output head (--quantize-lm-head)
  // gpt-oss experts a target writes fused (ModulePlan::stacks): the whole stack as one item,
  // quantized (Exporter::fused_expert_specs) or float in the hub's [E, in, out] layout, or, with
  // stack_bias, the experts' biases [E, out]. `parts` are the experts' input tensors in order.
  int stack = -1;
  bool stack_bias = false;
  bool stack_quantized = false;
  std::vector<const CheckpointTensor*> parts;
  // A gpt-oss expert's gate_up bias (or float weight) written as gate_proj / up_proj, the even
  // and odd rows (targets that write experts one Linear each, as llm-compressor does).
  bool deinterleave = false;
  // A k_proj / v_proj kept in its dtype that carries the layer's FP8 KV-cache scale: the
  // Linear's index (its weight is copied, then the scale written as specs[1]); -1 otherwise.
  int kv_linear = -1;
  std::vector<TensorSpec> specs;
  uint64_t nbytes() const;
};

struct OutputShard {
  std::string file_name;                        // model.safetensors or model-0000i-of-0000n...
  std::vector<size_t> items;                    // indices into OutputLayout::items
  std::vector<TensorSpec> specs;                // in write order
  std::map<std::string, std::string> metadata;  // __metadata__ ("format" and kept aliases)
};

// Every output tensor and the shard it goes to, decided before a byte is written; the same
// layout serves the write and `quantize --dry-run`'s predicted sizes.
struct OutputLayout {
  std::vector<OutputItem> items;
  std::vector<OutputShard> shards;
  std::map<std::string, std::string> weight_map;  // tensor name -> shard file (for the index)
  uint64_t total_bytes = 0;                       // tensor data, headers excluded
};
OutputLayout plan_output(const SourceModel& model, const ModulePlan& plan,
                         const Exporter& exporter, uint64_t max_shard_bytes);

// Writes into `staging_dir` (the caller renames it into place). Fills report's byte counts.
// Throws qf::Error naming the file on NaN/Inf weights or a failed write.
void write_output(const SourceModel& model, const ModulePlan& plan, CalibrationOutcome& calibration,
                  LinearQuantizer& quantizer, const QuantizeOptions& options,
                  const Exporter& exporter, ThreadPool& pool,
                  const std::filesystem::path& staging_dir, QuantizeReport& report);

}  // namespace qf

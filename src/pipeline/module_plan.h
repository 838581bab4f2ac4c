// Step 1 of quantization, "decide": what becomes of each Linear module and the output head,
// from the architecture, the tensors' shapes and dtypes, the options and what the export target
// can write. Pure: it reads checkpoint metadata, never tensor data, and writes nothing.
#pragma once

#include "targets/exporter.h"
#include "pipeline/quantize_checkpoint.h"
#include "pipeline/source_model.h"

#include <map>
#include <set>
#include <string>
#include <vector>

namespace qf {

// The calibrated modes a set of options asks for, after checking that they combine.
struct AlgoModes {
  bool awq = false, local_hessian = false, gptq = false, smoothquant = false;
  bool four_over_six = false;  // the --algo's NVFP4 block scales are Four Over Six's
  bool tune = false;           // block-wise tuning after the init (--algo ...tune)
  bool data_algo = false;   // a weight algorithm that needs calibration statistics
  bool calibrate = false;   // anything needs the calibration pass
  bool per_tensor = false;  // FP8 W8A8: one weight scale per tensor
};

struct ModulePlan {
  AlgoModes modes;
  int block = 0;              // the options' block (INT4 group), resolved
  bool int4_channel = false;  // INT4 per output channel: each module's block is its in_features
  // Per Architecture::linears: the export description, the weight tensor, and why the module is
  // left unquantized (empty: it is quantized).
  std::vector<ExportedLinear> exported;
  std::vector<const CheckpointTensor*> weights;
  std::vector<std::string> reason;
  // Per Linear: its NVFP4 block scales are chosen by Four Over Six (--algo four_over_six[+gptq],
  // or a plan's module algo four_over_six), not by max/mse.
  std::vector<char> four_over_six;
  std::map<std::string, int> linear_by_weight;  // weight tensor name -> linear, quantized only
  std::vector<ExcludedModule> excluded;         // in module order, with reasons
  std::vector<std::string> excluded_names;      // sorted, for the exported configs
  // --quantize-lm-head: the head's source tensor (its own, or the tied embedding, which then
  // stays and gains a quantized copy named lm_head), null when the head stays as it is.
  const CheckpointTensor* head_src = nullptr;
  bool head_tied = false;
  ExportedLinear head;
  bool head_four_over_six = false;  // a plan's lm_head rule asks for four_over_six
  std::vector<std::string> warnings;
  // gpt-oss experts of a target that writes them fused (Exporter::fuses_experts): per layer and
  // projection, the experts' Linears in expert order, written as one tensor `name`
  // ("model.layers.0.mlp.experts.gate_up_proj") with their biases as `name`_bias. A stack is
  // quantized entirely, in one format, or not at all.
  struct ExpertStack {
    std::string name;
    std::vector<size_t> linears;
  };
  std::vector<ExpertStack> stacks;
  // Linears whose tensor scale is set by the largest amax among them: the architecture's fused
  // groups (q/k/v, gate/up) and the stacks (one quantizer per fused tensor). Per Linear, its
  // group here or -1.
  std::vector<std::vector<size_t>> scale_groups;
  std::vector<int> scale_group;
  // The input is gpt-oss's MXFP4 release and its routed experts are cast to NVFP4
  // (formats/mxfp4_nvfp4_cast.h) instead of quantized from float; their E8M0 scale tensors
  // (`<expert>.weight_scale`) are consumed with the codes, not copied.
  bool mxfp4_cast = false;
  std::set<std::string> dropped;  // input tensors the output does not carry over

  bool quantized(size_t linear) const { return reason[linear].empty(); }
};

// Throws qf::Error (one line naming the flag, file or tensor) for options that do not combine,
// a weight tensor that is missing or does not match config.json, or a head that cannot be
// quantized as asked.
ModulePlan plan_modules(const SourceModel& model, const QuantizeOptions& options,
                        const Exporter& exporter);

// Whether a glob of `patterns` matches module `name` (or `name`.weight); `matched` gets it.
bool matches_any(const std::string& name, const std::vector<std::string>& patterns,
                 std::string* matched);

}  // namespace qf

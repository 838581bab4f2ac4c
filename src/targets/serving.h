// Which serving engines load a quantized output, and the command line that serves it. The
// knowledge comes from ../shared/specs/engine-formats.md (engine sources read, not run here), so
// every line says how sure it is: the notes say the engine loads it, say it does not, or do not
// cover the combination.
#pragma once

#include "core/act_quant.h"
#include "formats/registry.h"
#include "targets/exporter.h"

#include <set>
#include <string>
#include <vector>

namespace qf {

// What was written, as far as loading it is concerned.
struct ServeQuery {
  ExportFormat target = ExportFormat::modelopt;
  std::set<Format> formats;          // of the quantized Linears (more than one: mixed precision)
  bool int4_channel = false;         // some INT4 module has one scale per output channel
  bool fp8_per_channel = false;      // some FP8 module has one weight scale per row (weight-only)
  ActQuant activations = ActQuant::none;
  bool pre_quant_scale = false;      // AWQ / SmoothQuant scales stored as tensors (ModelOpt)
  bool kv_fp8 = false;
  bool lm_head_quantized = false;
  // gpt-oss with quantized routed experts: ModelOpt writes them fused (`mlp.experts.gate_up_proj`
  // with `_weight_scale`, `_weight_scale_2`, `_input_scale`), compressed-tensors linearised
  // (`mlp.experts.N.{gate,up,down}_proj`, as llm-compressor saves them); engines' gpt-oss loaders
  // decide separately whether they read those.
  bool gpt_oss_experts = false;
  std::string output = "OUT";        // the directory, as the user will type it
};

enum class EngineSupport { loads, unverified, no };
std::string_view engine_support_name(EngineSupport s);  // "loads", "unverified", "does not load"

struct ServeCommand {
  std::string engine;   // "vLLM", "SGLang", "TensorRT-LLM"
  std::string command;  // empty when the engine does not load it
  EngineSupport support = EngineSupport::unverified;
  std::string note;     // hardware it needs, or why not and what to do instead
};

// One entry per engine (vLLM, SGLang, TensorRT-LLM), in that order; empty when nothing was
// quantized.
std::vector<ServeCommand> serve_commands(const ServeQuery& q);

}  // namespace qf

// The inspector knows no target: which leaves make a quantized weight, and how a declared
// quantization config names its scheme, come from the targets' readers (targets/target.h).
#include "targets/checkpoint_inspector.h"

#include "core/error.h"
#include "formats/registry.h"
#include "io/checkpoint.h"
#include "model/architecture.h"
#include "model/expert_tensors.h"
#include "targets/target.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <optional>
#include <set>

namespace fs = std::filesystem;

namespace qf {
namespace {

std::string module_of(const std::string& name, std::string* leaf) {
  const size_t dot = name.rfind('.');
  if (dot == std::string::npos) {
    *leaf = name;
    return "";
  }
  *leaf = name.substr(dot + 1);
  return name.substr(0, dot);
}

}  // namespace

InspectReport inspect_checkpoint(const fs::path& dir) {
  const Checkpoint ckpt = Checkpoint::open(dir);
  InspectReport r;
  r.dir = dir;
  r.model_type = json_string_member(ckpt.config(), "model_type", (dir / "config.json").string());
  // The decoder Linears are the ones the layer specs name; a checkpoint of an architecture
  // qforge does not run falls back to the Hugging Face naming habit (*.layers.*_proj).
  std::set<std::string> spec_linears;
  bool have_spec = false;
  try {
    const Architecture arch = checkpoint_architecture(ckpt, (dir / "config.json").string());
    for (const LinearModule& m : arch.linears) spec_linears.insert(m.name);
    r.architecture = arch.describe();
    have_spec = true;
  } catch (const Error& e) {
    r.architecture = fmt::format("not runnable by qforge ({})", e.what());
  }
  r.shards = int(ckpt.shards().size());
  for (const auto& s : ckpt.shards()) r.total_bytes += s->file_size();

  // Per module: its tensors by leaf name.
  std::map<std::string, std::map<std::string, const CheckpointTensor*>> modules;
  for (const auto& t : ckpt.tensors()) {
    const auto& e = *t.entry;
    r.tensors.push_back({t.name, e.dtype, e.shape, e.end - e.begin});
    r.tensor_bytes += e.end - e.begin;
    std::string leaf;
    std::string module = module_of(t.name, &leaf);
    // A weight stored as an attribute of a module (ModelOpt's fused gpt-oss experts:
    // `experts.gate_up_proj` with `experts.gate_up_proj_weight_scale`, ...) is read as the
    // module `experts.gate_up_proj` with the usual leaves.
    for (const char* suffix : {"_weight_scale_2", "_weight_scale", "_input_scale"}) {
      const std::string sfx = suffix;
      if (leaf.size() > sfx.size() && leaf.compare(leaf.size() - sfx.size(), sfx.size(), sfx) == 0) {
        module += "." + leaf.substr(0, leaf.size() - sfx.size());
        leaf = sfx.substr(1);
        break;
      }
    }
    if (leaf.find('_') != std::string::npos && ckpt.find(t.name + "_weight_scale")) {
      module = t.name;
      leaf = "weight";
    }
    modules[module][leaf] = &t;
  }

  // The declared scheme, for each module's format (none: the checkpoint's config is not one
  // qforge reads; the tensors are still counted).
  std::optional<QuantScheme> scheme;
  try {
    if (DetectedTarget t = detect_target(ckpt, dir.string()); t.reader && t.scheme.quantizes())
      scheme = std::move(t.scheme);
  } catch (const Error&) {
  }
  const std::vector<std::string> packed = packed_weight_leaves();
  const std::vector<std::string> companions = companion_leaves();
  // Markers beside a plain "weight" (a packed leaf is a weight of its own).
  std::vector<std::string> markers;
  for (auto& leaf : quantized_marker_leaves())
    if (std::find(packed.begin(), packed.end(), leaf) == packed.end()) markers.push_back(leaf);

  for (const auto& [module, leaves] : modules) {
    const CheckpointTensor* weight = nullptr;
    for (const auto& leaf : packed)
      if (auto it = leaves.find(leaf); !weight && it != leaves.end()) weight = it->second;
    if (!weight && leaves.count("weight"))
      for (const auto& leaf : markers)
        if (leaves.count(leaf)) weight = leaves.at("weight");
    const bool fused_experts = module.find(".experts.") != std::string::npos &&
                               module.find_first_of("0123456789", module.find(".experts.") + 9) ==
                                   std::string::npos;
    const bool decoder_linear =
        have_spec ? spec_linears.count(module) > 0 || fused_experts
                  : module.find(".layers.") != std::string::npos && module.size() > 5 &&
                        module.compare(module.size() - 5, 5, "_proj") == 0;
    if (!weight) {
      // An unquantized decoder Linear still counts in the bits per Linear weight.
      if (auto it = leaves.find("weight"); decoder_linear && it != leaves.end() &&
                                           is_quantizable_float(it->second->entry->dtype)) {
        r.linear_weights += shape_numel(it->second->entry->shape);
        r.linear_bytes += it->second->entry->end - it->second->entry->begin;
      }
      continue;
    }
    const SafetensorsEntry& e = *weight->entry;
    const int64_t numel = shape_numel(e.shape);
    int64_t elements = 0;
    if (auto it = leaves.find("weight_shape"); it != leaves.end() &&
                                               it->second->entry->dtype == DType::I64 &&
                                               shape_numel(it->second->entry->shape) == 2) {
      int64_t dims[2];
      std::memcpy(dims, it->second->file->view(*it->second->entry).data, sizeof(dims));
      elements = dims[0] * dims[1];
    } else if (e.dtype == DType::U8) {
      elements = numel * 2;  // two 4-bit codes per byte (FP4 pairs, or INT4 row pairs)
    } else if (e.dtype == DType::I32) {
      elements = numel * 8;  // eight 4-bit codes per int32
    } else if (e.dtype == DType::F8_E4M3 || e.dtype == DType::I8) {
      elements = numel;
    } else {
      continue;  // a float weight with a scale beside it is not a quantized weight
    }
    ++r.quantized_modules;
    if (scheme) {
      const QuantScheme one = scheme->for_module(module);
      if (one.format) {
        std::string label(format_info(*one.format).name);
        if (one.act == ActQuant::nvfp4) label += " W4A4";
        else if (one.act == ActQuant::fp8) label += " W8A8";
        else if (one.act == ActQuant::int8) label += " W8A8 (int8)";
        r.module_schemes[module] = label;
      }
    }
    r.quantized_weights += elements;
    const uint64_t before = r.quantized_bytes;
    r.quantized_bytes += e.end - e.begin;
    for (const auto& suffix : companions)
      if (auto it = leaves.find(suffix); it != leaves.end())
        r.quantized_bytes += it->second->entry->end - it->second->entry->begin;
    if (decoder_linear) {
      r.linear_weights += elements;
      r.linear_bytes += r.quantized_bytes - before;
    }
  }

  r.quantization_config = declared_quantization_config(ckpt);
  r.quant_algo = declared_algo_name(r.quantization_config);
  return r;
}

}  // namespace qf

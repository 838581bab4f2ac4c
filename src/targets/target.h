// The export targets, one row each: the writer (an Exporter) and the reader (a TargetReader)
// that a target's own file implements. Code that must handle whichever target wrote a
// checkpoint (the engine, the inspector) iterates this table instead of naming targets.
#pragma once

#include "targets/exporter.h"
#include "targets/reader.h"

#include <nlohmann/json.hpp>

#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace qf {

struct Target {
  ExportFormat format;
  std::string_view name;  // as `--export` spells it
  std::unique_ptr<Exporter> (*make_exporter)();
  const TargetReader& (*reader)();  // a static instance, valid for the program's life
};

// Every target, in the order readers are tried.
std::span<const Target> targets();
// Their `--export` names, in table order.
std::vector<std::string> target_names();

// The target that wrote a checkpoint and its scheme; reader is null (and the scheme quantizes
// nothing) for a checkpoint without a quantization config.
struct DetectedTarget {
  const TargetReader* reader = nullptr;
  QuantScheme scheme;
};

// Asks each target's reader in turn. Throws qf::Error, starting with `label`, when the owning
// reader cannot read its config, or when config.json names a quantization method no target reads.
DetectedTarget detect_target(const Checkpoint& ck, const std::string& label);

// The union over all targets of TargetReader's leaf lists, first appearance first.
std::vector<std::string> packed_weight_leaves();
std::vector<std::string> quantized_marker_leaves();
std::vector<std::string> pre_scale_leaves();
std::vector<std::string> companion_leaves();

// The quantization config a checkpoint declares, as stored: config.json's quantization_config
// when present, else the first target's declared_config(); null when none.
nlohmann::json declared_quantization_config(const Checkpoint& ck);
// The scheme's name in a declared config, from the first target that finds its keys; "" if none.
std::string declared_algo_name(const nlohmann::json& config);

}  // namespace qf

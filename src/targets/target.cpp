// The target table and the target-agnostic lookups built on it.
#include "targets/target.h"

#include "core/error.h"

#include <algorithm>
#include <array>

namespace qf {

// Defined in each target's file.
std::unique_ptr<Exporter> make_modelopt_exporter();
const TargetReader& modelopt_reader();
// Read only (no --export writes it): the original gpt-oss release's MXFP4 experts.
const TargetReader& gpt_oss_mxfp4_reader();
std::unique_ptr<Exporter> make_compressed_tensors_exporter();
const TargetReader& compressed_tensors_reader();

namespace {

const std::array<Target, 2> kTargets{{
    {ExportFormat::modelopt, "modelopt", make_modelopt_exporter, modelopt_reader},
    {ExportFormat::compressed_tensors, "compressed-tensors", make_compressed_tensors_exporter,
     compressed_tensors_reader},
}};

std::vector<std::string> leaf_union(std::vector<std::string> (TargetReader::*leaves)() const) {
  std::vector<std::string> out;
  for (const Target& t : kTargets)
    for (auto& leaf : (t.reader().*leaves)())
      if (std::find(out.begin(), out.end(), leaf) == out.end()) out.push_back(std::move(leaf));
  return out;
}

}  // namespace

std::span<const Target> targets() { return kTargets; }

DetectedTarget detect_target(const Checkpoint& ck, const std::string& label) {
  for (const Target& t : kTargets)
    if (auto scheme = t.reader().read_scheme(ck, label))
      return {&t.reader(), std::move(*scheme)};
  if (auto scheme = gpt_oss_mxfp4_reader().read_scheme(ck, label))
    return {&gpt_oss_mxfp4_reader(), std::move(*scheme)};
  const auto& cfg = ck.config();
  if (cfg.contains("quantization_config") && cfg["quantization_config"].is_object()) {
    const std::string method = json_string_member(cfg["quantization_config"], "quant_method",
                                                  label + ": config.json: quantization_config");
    if (!method.empty())
      fail("{}: config.json: unsupported quantization method '{}'", label, method);
  }
  return {};
}

std::vector<std::string> target_names() {
  std::vector<std::string> out;
  for (const Target& t : targets()) out.emplace_back(t.name);
  return out;
}

std::vector<std::string> packed_weight_leaves() {
  return leaf_union(&TargetReader::packed_weight_leaves);
}

std::vector<std::string> quantized_marker_leaves() {
  return leaf_union(&TargetReader::quantized_marker_leaves);
}

std::vector<std::string> pre_scale_leaves() { return leaf_union(&TargetReader::pre_scale_leaves); }

std::vector<std::string> companion_leaves() { return leaf_union(&TargetReader::companion_leaves); }

nlohmann::json declared_quantization_config(const Checkpoint& ck) {
  if (ck.config().contains("quantization_config")) return ck.config()["quantization_config"];
  for (const Target& t : kTargets)
    if (auto c = t.reader().declared_config(ck.dir()); !c.is_null()) return c;
  return {};
}

std::string declared_algo_name(const nlohmann::json& config) {
  if (!config.is_object()) return "";
  for (const Target& t : kTargets)
    if (auto name = t.reader().algo_name(config)) return *name;
  if (auto name = gpt_oss_mxfp4_reader().algo_name(config)) return *name;
  return "";
}

}  // namespace qf

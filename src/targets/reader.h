// The reading half of an export target: what a target's configs say about a checkpoint's
// quantized Linears (QuantScheme), and per module which tensors hold it, in which layout, and how
// its scales convert to the engine's convention (StoredLinear). The engine and the inspector see
// checkpoints only through this interface, so they name no target; each target implements it in
// the same file as its Exporter, so a name is written and read in one place.
#pragma once

#include "core/act_quant.h"
#include "core/name_pattern.h"
#include "formats/registry.h"
#include "io/checkpoint.h"
#include "kernels/linear.h"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace qf {

// What a checkpoint's configs say about its quantized Linears.
struct QuantScheme {
  std::optional<Format> format;
  int group = 0;  // from the config, 0 if not given
  std::string algo;  // the target's own name for the scheme (quant_algo, format)
  std::vector<NamePattern> ignore;  // module names, fnmatch globs, or "re:" regexes
  ActQuant act = ActQuant::none;   // what the config says about Linear inputs
  bool kv_fp8 = false;             // FP8 KV cache with per-layer k/v scales

  // Mixed precision (each listed module with its own format, group and input quantization;
  // unlisted modules stay float). `format` then holds the first listed format, so quantizes()
  // is true.
  struct Layer {
    Format format = Format::nvfp4;
    int group = 0;
    ActQuant act = ActQuant::none;
    std::string algo;  // the target's name for the layer's scheme
  };
  bool mixed = false;
  std::map<std::string, Layer> layers;
  // Targets given as "re:" patterns (compressed-tensors), tried in order after `layers`.
  std::vector<std::pair<NamePattern, Layer>> layer_patterns;

  bool quantizes() const { return format.has_value(); }

  // The scheme of one module: itself, or for mixed precision that module's format and group
  // (no format when the module is not listed).
  QuantScheme for_module(const std::string& module) const;

  // True when `module` matches an ignore entry, or an entry that is a plain name names one of
  // its parent modules. Throws qf::Error when a regex entry exceeds
  // its backtracking budget (core/name_pattern.h).
  bool ignored(const std::string& module) const;
};

// How a scale is stored relative to the engine's convention (kernels/linear.h: value =
// code * scale; input_scale = amax / maxbound).
enum class ScaleStored : uint8_t { as_is, reciprocal };

// One quantized Linear as a target stores it: full tensor names, the layout of the codes, and
// the conversion of each scale. Dtypes and shapes follow from the layout and are checked by the
// engine.
struct StoredLinear {
  std::string weight;        // the codes
  WeightFormat layout = WeightFormat::f32;
  std::string weight_scale;  // block / row / group scales
  std::string global_scale;  // NVFP4's second-level scale (F32 scalar); empty for other layouts
  ScaleStored global_scale_stored = ScaleStored::as_is;
  // Static input scale of activation-quantized Linears; empty when the scheme has none.
  std::string input_scale;
  ScaleStored input_scale_stored = ScaleStored::as_is;
  // Absent input scale: the module runs weight-only instead of being an error.
  bool input_scale_optional = false;
};

// The strings of a JSON array; other elements, and a non-array, give none.
std::vector<std::string> json_string_list(const nlohmann::json& j);
// The string entries of a config's `ignore` list as patterns ("re:" entries anchored as
// Python's re.match, as compressed-tensors and vLLM match them). Throws qf::Error
// "<context>: invalid regex ..." for a "re:" entry that does not compile.
std::vector<NamePattern> ignore_patterns(const nlohmann::json& j, std::string_view context);

// Typed reads of a config member, for configs that come with downloaded checkpoints: a member
// of the wrong type is an error naming it ("WHERE.KEY is not a string"), never a JSON library
// exception. `obj` that is not an object, an absent member and null all give the fallback.
std::string json_string_member(const nlohmann::json& obj, const char* key, const std::string& where);
// An integer member that fits an int; nullopt when absent, null or not an integer number.
// Throws qf::Error for an integer outside int's range.
std::optional<int> json_int_member(const nlohmann::json& obj, const char* key,
                                   const std::string& where);

class TargetReader {
 public:
  virtual ~TargetReader() = default;
  // The target's name as `--export` and `ModelWeights::quantization` spell it.
  virtual std::string_view name() const = 0;
  // The name error messages use ("ModelOpt").
  virtual std::string_view display_name() const = 0;

  // The scheme when this target wrote the checkpoint's quantization configs, nullopt when they
  // are not this target's (or there are none). Throws qf::Error, starting with `label`, for a
  // config of this target that it cannot read (unsupported algo or format, malformed map).
  virtual std::optional<QuantScheme> read_scheme(const Checkpoint& ck,
                                                 const std::string& label) const = 0;
  // How `module` is stored when quantized as `scheme`, which is the module's own
  // (QuantScheme::for_module) and has a format.
  virtual StoredLinear stored_linear(const std::string& module, const QuantScheme& scheme) const = 0;
  // The tensor holding the FP8 KV-cache scale `which` ('k' or 'v'), written with the projection
  // module `proj` (e.g. "model.layers.3.self_attn.k_proj").
  virtual std::string kv_scale_name(const std::string& proj, char which) const = 0;

  // For readers that look at tensors without a scheme (the inspector, the engine's check that a
  // float module carries no quantized tensors): leaf names after the module's last dot.
  // Leaves holding codes under a name other than "weight".
  virtual std::vector<std::string> packed_weight_leaves() const = 0;
  // Leaves whose presence beside "weight" marks the module as quantized.
  virtual std::vector<std::string> quantized_marker_leaves() const = 0;
  // Leaves of a per-input-channel scale the engine divides inputs by before the product (AWQ,
  // SmoothQuant), quantized module or not.
  virtual std::vector<std::string> pre_scale_leaves() const = 0;
  // Leaves stored with a quantized weight that count towards its bytes (scales, shapes).
  virtual std::vector<std::string> companion_leaves() const = 0;

  // The quantization config this target declares outside config.json (ModelOpt's
  // hf_quant_config.json), as stored; null when it has none. Throws qf::Error for an unreadable
  // file.
  virtual nlohmann::json declared_config(const std::filesystem::path& dir) const;
  // The scheme's name in a declared quantization config object (config.json's
  // quantization_config or declared_config()), nullopt when this target's keys are not there.
  virtual std::optional<std::string> algo_name(const nlohmann::json& config) const = 0;
};

}  // namespace qf

// Recipes: ordered rules (module glob or regex -> format, algorithm, options) read from a JSON
// file, applied to an architecture to give a per-module Assignment; and the reverse, writing an
// Assignment as exact per-module rules so a search's choice can be reviewed and replayed.
//
// File format (JSON, or the same structure in YAML for .yaml / .yml files):
//   {"rules": [{"match": "*.mlp.down_proj", "format": "fp8", "algo": "mse", "options": {...}},
//              {"match": "re:model\\.layers\\.(0|31)\\..*", "format": "keep"}, ...]}
// match: a shell glob (fnmatch, '*' crosses dots) over the full module name
//   ("model.layers.3.self_attn.q_proj"), or "re:" + a Perl-syntax regex (PCRE2) that must match
//   the whole name. format: nvfp4 | mxfp4 | fp8 | int4 | keep (int4's group size: "int4:64" or
//   options.group_size; "nvfp4:4o6" = nvfp4 with algo four_over_six). algo (optional): max |
//   mse | awq | gptq | smoothquant | four_over_six (NVFP4 block scales, or the 1.0x / 1.5x amax
//   of an FP8 W8A8 tensor). activations (optional): none |
//   nvfp4 (with format nvfp4: W4A4) | fp8 (with format fp8: FP8 W8A8, per-tensor weights and a
//   static input scale); calibrated. options (optional): an object passed to the algorithm
//   unchanged. The first matching rule wins; the output head is a module named "lm_head" (a
//   rule naming it quantizes it, weight-only). Top-level keys besides "rules" (optional):
//   "description" (a line for listings), "kv_cache" (fp8: FP8 KV-cache scales, calibrated).
// YAML:
//   rules:
//     - {match: "*.mlp.down_proj", format: fp8}
//     - match: "re:model\.layers\.0\..*"
//       format: keep
#pragma once

#include "core/name_pattern.h"
#include "model/architecture.h"
#include "plan/candidates.h"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace qf {

struct RecipeRule {
  std::string match;            // as written (with "re:" for a regex)
  FormatChoice format;
  std::optional<std::string> algo;  // absent: the caller's default algorithm
  nlohmann::ordered_json options = nlohmann::ordered_json::object();
  ActQuant activations = ActQuant::none;
  // Throws qf::Error when a regex exceeds its backtracking budget (core/name_pattern.h).
  bool matches(const std::string& module_name) const;

  std::optional<NamePattern> pattern;  // `match` compiled (set by parse_recipe; unset matches nothing)
  int line = 0;                     // where the rule starts in a YAML file (1-based), else 0
};

struct Recipe {
  std::string source;  // file name (or a label) for messages
  std::string description;
  bool kv_fp8 = false;  // "kv_cache": "fp8"
  std::vector<RecipeRule> rules;
  // "rule N", with " (line L)" when the rule's line is known, for messages.
  std::string rule_label(size_t i) const;
};

// Parses a recipe. Throws a one-line qf::Error "SOURCE: rule N: ..." (N from 0; "SOURCE:LINE:
// rule N: ..." when `rule_lines` gives rule N's 1-based line) for a missing or invalid field,
// an unknown format / algorithm (with the closest known name), an unknown key or a bad regex.
Recipe parse_recipe(const nlohmann::ordered_json& json, const std::string& source,
                    const std::vector<int>& rule_lines = {});
// Parses a YAML recipe held in `text` (errors as parse_recipe's, with the rule's line).
Recipe parse_recipe_yaml(const std::string& text, const std::string& source);
// Reads and parses a recipe file: YAML when the name ends in .yaml or .yml, else JSON; both
// give the same Recipe. Throws qf::Error naming the file (and the line: JSON and YAML syntax
// errors, and a YAML rule's own errors).
Recipe load_recipe(const std::filesystem::path& path);

// Resolves every Linear of `arch`, and the output head as "lm_head": the first matching rule's
// format / algo / options / activations (algo absent: default_choice.algo), else
// default_choice (the head: keep, unless a rule names it). Throws qf::Error naming the source and the
// rules when members of a fused group resolve to different formats, or a format does not fit a
// module (in_features not a multiple of its block).
Assignment apply_recipe(const Recipe& recipe, const Architecture& arch,
                        const ModuleChoice& default_choice);

// The assignment as exact rules, one per Linear of `arch` in architecture order (modules absent
// from the assignment written as "keep"; the head when quantized), and "kv_cache": "fp8" when
// `kv_fp8`; apply_recipe of the result gives the assignment back.
nlohmann::ordered_json recipe_json(const Assignment& assignment, const Architecture& arch,
                                   bool kv_fp8 = false);
// Writes recipe_json to `path` (4-space JSON, through a temporary file). Throws qf::Error.
void save_recipe(const std::filesystem::path& path, const Assignment& assignment,
                 const Architecture& arch, bool kv_fp8 = false);

}  // namespace qf

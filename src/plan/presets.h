// Recipe presets shipped with qforge (recipes/presets/*.yaml, compiled in by CMake): NVIDIA's
// published Nemotron recipes as qforge recipes, for `qforge quantize --preset NAME`.
#pragma once

#include "plan/recipe.h"

#include <span>
#include <string>
#include <string_view>

namespace qf {

struct PresetFile {
  std::string_view name;  // the file name without .yaml
  std::string_view text;  // the YAML recipe
};

// Every preset, sorted by name (build/generated/preset_files.cpp).
std::span<const PresetFile> preset_files();

// The preset `name` parsed as a recipe (source "preset NAME"). Throws qf::Error for an unknown
// name, listing the presets with the closest one first.
Recipe load_preset(const std::string& name);

// One line per preset: its name and description, for --help and `--preset list`.
std::string preset_listing();

}  // namespace qf

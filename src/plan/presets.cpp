#include "plan/presets.h"

#include "core/error.h"
#include "core/suggest.h"

#include <fmt/format.h>

#include <vector>

namespace qf {

Recipe load_preset(const std::string& name) {
  std::vector<std::string> known;
  for (const PresetFile& p : preset_files()) {
    if (p.name == name) return parse_recipe_yaml(std::string(p.text), "preset " + name);
    known.emplace_back(p.name);
  }
  fail("{}", unknown_name_message("preset", name, known));
}

std::string preset_listing() {
  std::string out;
  for (const PresetFile& p : preset_files())
    out += fmt::format("  {}\n      {}\n", p.name, load_preset(std::string(p.name)).description);
  return out;
}

}  // namespace qf

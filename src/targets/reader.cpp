// Shared pieces of the target readers.
#include "targets/reader.h"

#include <fnmatch.h>

#include <regex>

namespace qf {

QuantScheme QuantScheme::for_module(const std::string& module) const {
  if (!mixed) return *this;
  QuantScheme one = *this;
  one.mixed = false;
  one.layers.clear();
  auto it = layers.find(module);
  if (it == layers.end()) {
    one.format.reset();
  } else {
    one.format = it->second.first;
    one.group = it->second.second;
  }
  return one;
}

bool QuantScheme::ignored(const std::string& module) const {
  for (const auto& p : ignore) {
    if (p == module) return true;
    if (p.rfind("re:", 0) == 0) {
      try {
        if (std::regex_match(module, std::regex(p.substr(3)))) return true;
      } catch (const std::regex_error&) {
      }
    } else if (fnmatch(p.c_str(), module.c_str(), 0) == 0) {
      return true;
    }
  }
  return false;
}

std::vector<std::string> json_string_list(const nlohmann::json& j) {
  std::vector<std::string> out;
  if (j.is_array())
    for (const auto& e : j)
      if (e.is_string()) out.push_back(e.get<std::string>());
  return out;
}

nlohmann::json TargetReader::declared_config(const std::filesystem::path&) const { return {}; }

}  // namespace qf

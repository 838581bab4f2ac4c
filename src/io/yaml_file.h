// YAML documents read into the same nlohmann JSON values the JSON files give, so a format
// accepted in both spellings (recipes) has one parser. Needs libyaml-cpp.
#pragma once

#include <nlohmann/json.hpp>

#include <map>
#include <string>
#include <string_view>

namespace qf {

struct YamlDocument {
  nlohmann::ordered_json json;
  // Where each value starts: JSON pointer ("/rules/0") -> 1-based line, for messages.
  std::map<std::string, int> lines;
};

// Parses the first document of `text`. Mappings become objects (keys must be scalars), sequences
// arrays; plain scalars become null (~, null), true / false, integers or floats when they read
// as one (YAML 1.2 core schema), anything else (and every quoted scalar) a string. Throws a
// one-line qf::Error "SOURCE:LINE: invalid YAML: ..." for a syntax error or a non-scalar key.
YamlDocument parse_yaml(std::string_view text, const std::string& source);

}  // namespace qf

#include "io/yaml_file.h"

#include "core/error.h"

#include <yaml-cpp/yaml.h>

#include <charconv>
#include <regex>

namespace qf {
namespace {

nlohmann::ordered_json scalar(const YAML::Node& node) {
  const std::string& v = node.Scalar();
  // A quoted scalar carries the non-specific tag "!": it is a string whatever it spells.
  if (node.Tag() == "!") return v;
  if (v.empty() || v == "~" || v == "null" || v == "Null" || v == "NULL") return nullptr;
  if (v == "true" || v == "True" || v == "TRUE") return true;
  if (v == "false" || v == "False" || v == "FALSE") return false;
  static const std::regex integer(R"([-+]?[0-9]+)");
  static const std::regex real(R"([-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?)");
  if (std::regex_match(v, integer)) {
    int64_t i = 0;
    const char* begin = v.data() + (v[0] == '+' ? 1 : 0);
    const auto [end, ec] = std::from_chars(begin, v.data() + v.size(), i);
    if (ec == std::errc() && end == v.data() + v.size()) return i;
  }
  if (std::regex_match(v, real)) return std::stod(v);
  return v;
}

void convert(const YAML::Node& node, const std::string& pointer, const std::string& source,
             nlohmann::ordered_json& out, std::map<std::string, int>& lines) {
  const int line = node.Mark().line + 1;
  lines[pointer] = line;
  switch (node.Type()) {
    case YAML::NodeType::Null:
    case YAML::NodeType::Undefined:
      out = nullptr;
      return;
    case YAML::NodeType::Scalar:
      out = scalar(node);
      return;
    case YAML::NodeType::Sequence: {
      out = nlohmann::ordered_json::array();
      size_t i = 0;
      for (const YAML::Node& item : node) {
        nlohmann::ordered_json value;
        convert(item, pointer + "/" + std::to_string(i++), source, value, lines);
        out.push_back(std::move(value));
      }
      return;
    }
    case YAML::NodeType::Map: {
      out = nlohmann::ordered_json::object();
      for (const auto& kv : node) {
        if (!kv.first.IsScalar())
          fail("{}:{}: invalid YAML: a mapping key is not a scalar", source,
               kv.first.Mark().line + 1);
        const std::string key = kv.first.Scalar();
        nlohmann::ordered_json value;
        convert(kv.second, pointer + "/" + key, source, value, lines);
        out[key] = std::move(value);
      }
      return;
    }
  }
}

}  // namespace

YamlDocument parse_yaml(std::string_view text, const std::string& source) {
  YamlDocument doc;
  YAML::Node root;
  try {
    root = YAML::Load(std::string(text));
  } catch (const YAML::Exception& e) {
    fail("{}:{}: invalid YAML: {}", source, e.mark.line + 1, e.msg);
  }
  convert(root, "", source, doc.json, doc.lines);
  return doc;
}

}  // namespace qf

// Shared pieces of the target readers.
#include "targets/reader.h"

#include "core/error.h"


#include <limits>

namespace qf {

QuantScheme QuantScheme::for_module(const std::string& module) const {
  if (!mixed) return *this;
  QuantScheme one = *this;
  one.mixed = false;
  one.layers.clear();
  one.layer_patterns.clear();
  const Layer* layer = nullptr;
  if (auto it = layers.find(module); it != layers.end()) layer = &it->second;
  for (const auto& [pattern, l] : layer_patterns)
    if (!layer && pattern.matches(module)) layer = &l;
  if (!layer) {
    one.format.reset();
  } else {
    one.format = layer->format;
    one.group = layer->group;
    one.act = layer->act;
    if (!layer->algo.empty()) one.algo = layer->algo;
  }
  return one;
}

bool QuantScheme::ignored(const std::string& module) const {
  for (const auto& p : ignore) {
    if (p.matches(module)) return true;
    // A listed parent module leaves its children alone (ModelOpt names an unquantized fused
    // experts module `...mlp.experts`, which vLLM checks as the FusedMoE layer's prefix).
    const std::string& t = p.text();
    if (!p.is_regex() && module.size() > t.size() && module.compare(0, t.size(), t) == 0 &&
        module[t.size()] == '.')
      return true;
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

std::vector<NamePattern> ignore_patterns(const nlohmann::json& j, std::string_view context) {
  std::vector<NamePattern> out;
  for (auto& s : json_string_list(j)) out.emplace_back(std::move(s), NamePattern::Anchor::prefix, context);
  return out;
}

std::string json_string_member(const nlohmann::json& obj, const char* key,
                               const std::string& where) {
  if (!obj.is_object()) return "";
  const auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return "";
  if (!it->is_string()) fail("{}.{} is not a string ({})", where, key, it->type_name());
  return it->get<std::string>();
}

std::optional<int> json_int_member(const nlohmann::json& obj, const char* key,
                                   const std::string& where) {
  if (!obj.is_object()) return std::nullopt;
  const auto it = obj.find(key);
  if (it == obj.end() || !it->is_number_integer()) return std::nullopt;
  const bool fits = it->is_number_unsigned()
                        ? it->get<uint64_t>() <= uint64_t(std::numeric_limits<int>::max())
                        : it->get<int64_t>() >= std::numeric_limits<int>::min() &&
                              it->get<int64_t>() <= std::numeric_limits<int>::max();
  if (!fits) fail("{}.{} is {}, out of range", where, key, it->dump());
  return it->get<int>();
}

nlohmann::json TargetReader::declared_config(const std::filesystem::path&) const { return {}; }

}  // namespace qf

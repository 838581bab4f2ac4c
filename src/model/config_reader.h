// Reading a Hugging Face config.json for model/architecture: typed lookups whose errors name
// the file and the key. Internal to model/.
#pragma once

#include "core/error.h"
#include "model/architecture.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdint>
#include <string>

namespace qf {

class ConfigReader {
 public:
  ConfigReader(const nlohmann::json& c, const std::string& label) : c_(c), label_(label) {}

  bool has(const char* key) const { return c_.contains(key) && !c_[key].is_null(); }
  // Present with the value null: where the family's config class has a default that a null
  // does not take, transformers fails on it, so a caller refuses it.
  bool is_null(const char* key) const { return c_.contains(key) && c_[key].is_null(); }
  void refuse_null(const char* key) const {
    if (is_null(key)) fail("{}: '{}' is null", label_, key);
  }

  // A positive integer no larger than `limit` (shape arithmetic stays far from overflow).
  int64_t positive(const char* key, int64_t limit = int64_t(1) << 24) const {
    if (!has(key) || !c_[key].is_number_integer() || c_[key].get<int64_t>() <= 0)
      fail("{}: '{}' missing or not a positive integer", label_, key);
    const int64_t v = c_[key].get<int64_t>();
    if (v > limit) fail("{}: '{}' is {}, larger than the supported {}", label_, key, v, limit);
    return v;
  }
  int64_t positive_or(const char* key, int64_t fallback, int64_t limit = int64_t(1) << 24) const {
    return has(key) ? positive(key, limit) : fallback;
  }
  double number_or(const char* key, double fallback) const {
    if (!has(key)) return fallback;
    if (!c_[key].is_number()) fail("{}: '{}' is not a number", label_, key);
    const double v = c_[key].get<double>();
    if (!std::isfinite(v)) fail("{}: '{}' is not finite", label_, key);
    return v;
  }
  bool flag_or(const char* key, bool fallback) const {
    if (!has(key)) return fallback;
    if (!c_[key].is_boolean()) fail("{}: '{}' is not true or false", label_, key);
    return c_[key].get<bool>();
  }
  std::string string_or(const char* key, const std::string& fallback) const {
    if (!has(key)) return fallback;
    if (!c_[key].is_string()) fail("{}: '{}' is not a string", label_, key);
    return c_[key].get<std::string>();
  }
  const nlohmann::json& operator[](const char* key) const { return c_[key]; }
  const std::string& label() const { return label_; }

 private:
  const nlohmann::json& c_;
  const std::string& label_;
};


// The group-limited routing fields of a sigmoid_grouped MoeSpec (DeepSeek-V3, Nemotron-H),
// checked as the router needs them: groups dividing the experts, two experts per group at
// least (a group scores its two best), no more groups kept than exist, top-k within them.
inline void check_group_routing(const MoeSpec& s, const std::string& label) {
  if (s.num_experts % s.n_group != 0)
    fail("{}: 'n_group' {} does not divide 'n_routed_experts' {}", label, s.n_group, s.num_experts);
  const int64_t per_group = s.num_experts / s.n_group;
  if (per_group < 2)
    fail("{}: 'n_group' {} leaves {} expert per group of 'n_routed_experts' {}; a group scores "
         "its two best experts", label, s.n_group, per_group, s.num_experts);
  if (s.topk_group > s.n_group)
    fail("{}: 'topk_group' {} is larger than 'n_group' {}", label, s.topk_group, s.n_group);
  if (s.top_k > s.topk_group * per_group)
    fail("{}: 'num_experts_per_tok' {} is more than the {} experts of 'topk_group' {} groups", label,
         s.top_k, s.topk_group * per_group, s.topk_group);
}

}  // namespace qf

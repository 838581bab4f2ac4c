// Recipe files: parsing, first-match resolution with fused-group checks, and saving.
#include "plan/recipe.h"

#include "core/error.h"
#include "core/mapped_file.h"
#include "core/suggest.h"
#include "io/json_file.h"
#include "io/yaml_file.h"


#include <array>

namespace qf {
namespace {

constexpr std::array<std::string_view, 6> kAlgos = {"max", "mse", "awq", "gptq", "smoothquant",
                                                    "four_over_six"};

bool known_algo(const std::string& a) {
  for (std::string_view k : kAlgos)
    if (a == k) return true;
  return false;
}

}  // namespace

bool RecipeRule::matches(const std::string& module_name) const {
  return pattern && pattern->matches(module_name);
}

Recipe parse_recipe(const nlohmann::ordered_json& json, const std::string& source,
                    const std::vector<int>& rule_lines) {
  Recipe recipe;
  recipe.source = source;
  auto line_of = [&](size_t i) { return i < rule_lines.size() ? rule_lines[i] : 0; };
  auto at = [&](size_t i) {
    return line_of(i) > 0 ? fmt::format("{}:{}: rule {}", source, line_of(i), i)
                          : fmt::format("{}: rule {}", source, i);
  };
  if (!json.is_object()) fail("{}: a recipe is a JSON object with a \"rules\" list", source);
  for (const auto& [key, value] : json.items()) {
    if (key == "description") {
      if (!value.is_string()) fail("{}: \"description\" must be a string", source);
      recipe.description = value.get<std::string>();
    } else if (key == "kv_cache") {
      if (!value.is_string() || (value != "fp8" && value != "none"))
        fail("{}: \"kv_cache\" is {}; a recipe says fp8 or none", source, value.dump());
      recipe.kv_fp8 = value == "fp8";
    } else if (key != "rules") {
      fail("{}: unknown key \"{}\" (a recipe has rules, description, kv_cache)", source, key);
    }
  }
  const auto rules = json.find("rules");
  if (rules == json.end() || !rules->is_array())
    fail("{}: a recipe needs a \"rules\" list", source);
  for (size_t i = 0; i < rules->size(); ++i) {
    const nlohmann::ordered_json& r = (*rules)[i];
    if (!r.is_object()) fail("{}: not an object", at(i));
    RecipeRule rule;
    rule.line = line_of(i);
    for (const auto& [key, value] : r.items()) {
      if (key == "match") {
        if (!value.is_string() || value.get<std::string>().empty())
          fail("{}: \"match\" must be a non-empty string", at(i));
        rule.match = value.get<std::string>();
      } else if (key == "format") {
        if (!value.is_string()) fail("{}: \"format\" must be a string", at(i));
        const auto f = parse_format_choice(value.get<std::string>());
        if (!f)
          fail("{}: {}", at(i),
               unknown_name_message("format", value.get<std::string>(), format_choice_names(true)));
        rule.format = *f;
      } else if (key == "algo") {
        if (!value.is_string())
          fail("{}: \"algo\" must be a string", at(i));
        if (!known_algo(value.get<std::string>()))
          fail("{}: {}", at(i),
               unknown_name_message("algo", value.get<std::string>(),
                                    std::vector<std::string>(kAlgos.begin(), kAlgos.end())));
        rule.algo = value.get<std::string>();
      } else if (key == "options") {
        if (!value.is_object()) fail("{}: \"options\" must be an object", at(i));
        rule.options = value;
      } else if (key == "activations") {
        const std::string v = value.is_string() ? value.get<std::string>() : value.dump();
        if (v == "nvfp4") rule.activations = ActQuant::nvfp4;
        else if (v == "fp8") rule.activations = ActQuant::fp8;
        else if (v != "none")
          fail("{}: {}", at(i), unknown_name_message("activations", v, std::vector<std::string>{"none", "nvfp4", "fp8"}));
      } else {
        fail("{}: unknown key \"{}\" (match, format, algo, activations, options)", at(i), key);
      }
    }
    if (rule.match.empty()) fail("{}: missing \"match\"", at(i));
    if (!r.contains("format")) fail("{}: missing \"format\"", at(i));
    // "nvfp4:4o6" is format nvfp4 with algo four_over_six (the form plans store).
    if (rule.format.four_over_six) {
      if (rule.algo && *rule.algo != "four_over_six")
        fail("{}: format nvfp4:4o6 is Four Over Six's; it takes no algo \"{}\"", at(i), *rule.algo);
      rule.format.four_over_six = false;
      rule.algo = "four_over_six";
    }
    if (rule.activations == ActQuant::nvfp4 && rule.format.format != Format::nvfp4)
      fail("{}: activations nvfp4 (W4A4) needs format nvfp4, not {}", at(i), rule.format.name());
    if (rule.activations == ActQuant::fp8 && rule.format.format != Format::fp8)
      fail("{}: activations fp8 (FP8 W8A8) needs format fp8, not {}", at(i), rule.format.name());
    if (rule.algo == "four_over_six" && rule.format.format != Format::nvfp4 &&
        !(rule.format.format == Format::fp8 && rule.activations == ActQuant::fp8))
      fail("{}: algo four_over_six chooses NVFP4 block scales or an FP8 W8A8 tensor's amax; it "
           "needs format nvfp4, or fp8 with activations fp8, not {}", at(i), rule.format.name());
    if (const auto g = rule.options.find("group_size"); g != rule.options.end()) {
      if (!rule.format.format || format_info(*rule.format.format).block_rule != BlockRule::free)
        fail("{}: options.group_size applies to int4 only", at(i));
      if (!g->is_number_integer() || g->get<int64_t>() <= 0 || g->get<int64_t>() % 2 != 0 ||
          g->get<int64_t>() > (1 << 20))
        fail("{}: options.group_size must be a positive even integer", at(i));
      const int gs = int(g->get<int64_t>());
      if (rule.format.block > 0 && rule.format.effective_block() != gs)
        fail("{}: group size {} in the format and {} in options", at(i),
             rule.format.block, gs);
      rule.format.block = gs;
    }
    rule.pattern.emplace(rule.match, NamePattern::Anchor::whole, at(i));
    recipe.rules.push_back(std::move(rule));
  }
  return recipe;
}

Recipe parse_recipe_yaml(const std::string& text, const std::string& source) {
  const YamlDocument doc = parse_yaml(text, source);
  std::vector<int> rule_lines;
  for (size_t i = 0;; ++i) {
    const auto it = doc.lines.find("/rules/" + std::to_string(i));
    if (it == doc.lines.end()) break;
    rule_lines.push_back(it->second);
  }
  return parse_recipe(doc.json, source, rule_lines);
}

Recipe load_recipe(const std::filesystem::path& path) {
  const std::string text = read_regular_file(path, "the recipe", uint64_t(16) << 20);
  const std::string ext = path.extension().string();
  if (ext == ".yaml" || ext == ".yml") return parse_recipe_yaml(text, path.string());
  return parse_recipe(parse_ordered_json_text(text, path.string()), path.string());
}

std::string Recipe::rule_label(size_t i) const {
  const int line = i < rules.size() ? rules[i].line : 0;
  return line > 0 ? fmt::format("rule {} (line {})", i, line) : fmt::format("rule {}", i);
}

Assignment apply_recipe(const Recipe& recipe, const Architecture& arch,
                        const ModuleChoice& default_choice) {
  Assignment a;
  std::vector<int> rule_of(arch.linears.size(), -1);
  auto resolve = [&](const std::string& name, ModuleChoice mc, int& rule) {
    for (size_t i = 0; i < recipe.rules.size(); ++i) {
      const RecipeRule& r = recipe.rules[i];
      if (!r.matches(name)) continue;
      rule = int(i);
      mc.format = r.format;
      mc.algo = r.algo.value_or(default_choice.algo);
      mc.options = r.options;
      mc.activations = r.activations;
      break;
    }
    return mc;
  };
  // The head only where a rule names it (matching "*" alone does not quantize it, as
  // --quantize-lm-head is needed without a recipe).
  int head_rule = -1;
  const ModuleChoice head = resolve(arch.head_module, ModuleChoice{}, head_rule);
  if (head_rule >= 0 && recipe.rules[size_t(head_rule)].match != "*" && !head.format.is_keep()) {
    if (head.activations != ActQuant::none)
      fail("{}: {} gives {} activations {}; the output head is quantized weight-only", recipe.source,
           recipe.rule_label(size_t(head_rule)), arch.head_module, act_quant_name(head.activations));
    if (!choice_fits(head.format, arch.hidden_size))
      fail("{}: {} gives {} {}, whose block of {} does not divide its {} inputs", recipe.source,
           recipe.rule_label(size_t(head_rule)), arch.head_module, head.format.name(),
           head.format.effective_block(), arch.hidden_size);
    a.modules[arch.head_module] = head;
  }
  for (size_t m = 0; m < arch.linears.size(); ++m) {
    const LinearModule& lm = arch.linears[m];
    const ModuleChoice mc = resolve(lm.name, default_choice, rule_of[m]);
    if (!choice_fits(mc.format, lm.in_features)) {
      const std::string by = rule_of[m] >= 0 ? recipe.rule_label(size_t(rule_of[m])) : "the default";
      fail("{}: {} gives {} {}, whose block of {} does not divide its {} inputs", recipe.source, by,
           lm.name, mc.format.name(), mc.format.effective_block(), lm.in_features);
    }
    a.modules[lm.name] = mc;
  }
  auto origin = [&](size_t m) {
    return rule_of[m] >= 0 ? recipe.rule_label(size_t(rule_of[m])) : std::string("the default");
  };
  for (const std::vector<size_t>& group : arch.fused_groups) {
    const size_t first = group.front();
    const FormatChoice& f0 = a.modules[arch.linears[first].name].format;
    for (size_t m : group) {
      const FormatChoice& f = a.modules[arch.linears[m].name].format;
      if (f == f0) continue;
      fail("{}: fused group of {} and {} resolves to different formats: {} by {}, {} by {} "
           "(fused modules must share a format)",
           recipe.source, arch.linears[first].name, arch.linears[m].name, f0.name(),
           origin(first), f.name(), origin(m));
    }
  }
  return a;
}

nlohmann::ordered_json recipe_json(const Assignment& assignment, const Architecture& arch,
                                   bool kv_fp8) {
  nlohmann::ordered_json rules = nlohmann::ordered_json::array();
  for (const LinearModule& lm : arch.linears) {
    const ModuleChoice mc = assignment.at(lm.name);
    nlohmann::ordered_json r;
    // Module names hold only [A-Za-z0-9._]: a literal name is an exact glob.
    r["match"] = lm.name;
    r["format"] = mc.format.name();
    r["algo"] = mc.algo;
    if (mc.activations != ActQuant::none) r["activations"] = act_quant_name(mc.activations);
    if (!mc.options.empty()) r["options"] = mc.options;
    rules.push_back(std::move(r));
  }
  if (const ModuleChoice head = assignment.at(arch.head_module); !head.format.is_keep())
    rules.push_back({{"match", arch.head_module}, {"format", head.format.name()}, {"algo", head.algo}});
  nlohmann::ordered_json j;
  if (kv_fp8) j["kv_cache"] = "fp8";
  j["rules"] = std::move(rules);
  return j;
}

void save_recipe(const std::filesystem::path& path, const Assignment& assignment,
                 const Architecture& arch, bool kv_fp8) {
  write_json_file(path, recipe_json(assignment, arch, kv_fp8));
}

}  // namespace qf

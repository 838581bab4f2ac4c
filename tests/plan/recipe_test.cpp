// Recipe parsing, first-match resolution, fused-group consistency, errors, save/load round trip.
#include "plan/recipe.h"

#include "core/error.h"
#include "plan_test_util.h"
#include "test_util.h"

#include <gtest/gtest.h>

#include <fstream>

namespace qf {
namespace {

Recipe parse(const std::string& text) {
  return parse_recipe(nlohmann::ordered_json::parse(text), "r.json");
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(Recipe, FirstMatchWinsAndDefaultsApply) {
  const Architecture arch = test::tiny_llama(3, 64, 128);
  const Recipe r = parse(R"({"rules": [
      {"match": "model.layers.0.*", "format": "keep"},
      {"match": "re:model\\.layers\\.[0-9]+\\.mlp\\.down_proj", "format": "int4", "algo": "gptq",
       "options": {"group_size": 64, "damp": 0.02}},
      {"match": "*.self_attn.*", "format": "fp8", "algo": "mse"},
      {"match": "*", "format": "mxfp4"}]})");
  ASSERT_EQ(r.rules.size(), 4u);
  ModuleChoice def;
  def.format = FormatChoice::of(Format::nvfp4);
  def.algo = "awq";
  const Assignment a = apply_recipe(r, arch, def);
  EXPECT_EQ(a.modules.size(), arch.linears.size());
  EXPECT_TRUE(a.at("model.layers.0.self_attn.q_proj").format.is_keep());
  EXPECT_TRUE(a.at("model.layers.0.mlp.down_proj").format.is_keep());
  EXPECT_EQ(a.at("model.layers.0.mlp.down_proj").algo, "awq");  // rule without algo: default
  const ModuleChoice down = a.at("model.layers.2.mlp.down_proj");
  EXPECT_EQ(down.format, FormatChoice::of(Format::int4, 64));
  EXPECT_EQ(down.algo, "gptq");
  EXPECT_EQ(down.options["damp"], 0.02);
  EXPECT_EQ(a.at("model.layers.1.self_attn.v_proj").format, FormatChoice::of(Format::fp8));
  EXPECT_EQ(a.at("model.layers.1.self_attn.v_proj").algo, "mse");
  EXPECT_EQ(a.at("model.layers.1.mlp.up_proj").format, FormatChoice::of(Format::mxfp4));

  // No rule matches: the caller's default.
  const Assignment b = apply_recipe(parse(R"({"rules": [{"match": "*.o_proj", "format": "fp8"}]})"), arch, def);
  EXPECT_EQ(b.at("model.layers.1.mlp.up_proj").format, FormatChoice::of(Format::nvfp4));
  EXPECT_EQ(b.at("model.layers.1.mlp.up_proj").algo, "awq");
}

TEST(Recipe, FourOverSixIsNvfp4WithItsAlgo) {
  const Architecture arch = test::tiny_llama(2, 64, 128);
  const Recipe r = parse(R"({"rules": [{"match": "*.mlp.*", "format": "nvfp4:4o6"},
                                       {"match": "*.o_proj", "format": "nvfp4", "algo": "four_over_six"},
                                       {"match": "*", "format": "nvfp4"}]})");
  const Assignment a = apply_recipe(r, arch, ModuleChoice{});
  for (const char* m : {"model.layers.1.mlp.up_proj", "model.layers.0.self_attn.o_proj"}) {
    const ModuleChoice c = a.at(m);
    EXPECT_EQ(c.format, FormatChoice::of(Format::nvfp4)) << m;
    EXPECT_EQ(c.algo, "four_over_six") << m;
    EXPECT_EQ(candidate_of(c), FormatChoice::nvfp4_four_over_six()) << m;
    EXPECT_EQ(candidate_of(c).name(), "nvfp4:4o6");
  }
  EXPECT_EQ(a.at("model.layers.0.self_attn.q_proj").algo, "max");
  EXPECT_EQ(candidate_of(a.at("model.layers.0.self_attn.q_proj")), FormatChoice::of(Format::nvfp4));
  // The candidate spellings.
  EXPECT_EQ(parse_format_choice("nvfp4:four_over_six"), FormatChoice::nvfp4_four_over_six());
  EXPECT_FALSE(parse_format_choice("fp8:4o6"));
  EXPECT_FALSE(parse_format_choice("int4:4o6"));
  EXPECT_FALSE(FormatChoice::nvfp4_four_over_six() == FormatChoice::of(Format::nvfp4));
  const ModuleChoice mc = module_choice_of(FormatChoice::nvfp4_four_over_six(), "max");
  EXPECT_EQ(mc.format, FormatChoice::of(Format::nvfp4));
  EXPECT_EQ(mc.algo, "four_over_six");
  EXPECT_EQ(module_choice_of(FormatChoice::of(Format::fp8), "max").algo, "max");
}

TEST(Recipe, FusedGroupMustShareAFormat) {
  const Architecture arch = test::tiny_llama(2);
  const Recipe r = parse(R"({"rules": [{"match": "*.k_proj", "format": "fp8"},
                                       {"match": "*", "format": "nvfp4"}]})");
  const std::string e = error_of([&] { apply_recipe(r, arch, ModuleChoice{}); });
  EXPECT_NE(e.find("r.json: fused group of model.layers.0.self_attn.q_proj and "
                   "model.layers.0.self_attn.k_proj resolves to different formats: nvfp4 by rule 1, "
                   "fp8 by rule 0"),
            std::string::npos)
      << e;
  EXPECT_EQ(e.find('\n'), std::string::npos);
}

TEST(Recipe, ErrorsNameTheFileAndRule) {
  EXPECT_EQ(error_of([] { parse(R"({"rules": [{"match": "*", "format": "nvfp4"}, {"match": "*", "format": "fp5"}]})"); })
                .rfind("r.json: rule 1: unknown format 'fp5'; did you mean 'fp8'? (choices: nvfp4, ", 0),
            0u);
  EXPECT_EQ(error_of([] { parse(R"({"rules": [{"format": "fp8"}]})"); }), "r.json: rule 0: missing \"match\"");
  EXPECT_EQ(error_of([] { parse(R"({"rules": [{"match": "*"}]})"); }), "r.json: rule 0: missing \"format\"");
  EXPECT_EQ(error_of([] { parse(R"({"rules": [{"match": "*", "format": "fp8", "algo": "magic"}]})"); }),
            "r.json: rule 0: unknown algo 'magic' (choices: max, mse, awq, gptq, smoothquant, "
            "four_over_six)");
  EXPECT_EQ(error_of([] { parse(R"({"rules": [{"match": "*", "format": "fp8", "algo": "gtpq"}]})"); }),
            "r.json: rule 0: unknown algo 'gtpq'; did you mean 'gptq'? (choices: max, mse, awq, "
            "gptq, smoothquant, four_over_six)");
  EXPECT_EQ(error_of([] { parse(R"({"rules": [{"match": "*", "format": "fp8", "algo": "four_over_six"}]})"); }),
            "r.json: rule 0: algo four_over_six chooses NVFP4 block scales or an FP8 W8A8 tensor's "
            "amax; it needs format nvfp4, or fp8 with activations fp8, not fp8");
  EXPECT_EQ(error_of([] { parse(R"({"rules": [{"match": "*", "format": "nvfp4:4o6", "algo": "mse"}]})"); }),
            "r.json: rule 0: format nvfp4:4o6 is Four Over Six's; it takes no algo \"mse\"");
  EXPECT_EQ(error_of([] { parse(R"({"rules": [{"match": "*", "format": "fp8", "colour": 1}]})"); }),
            "r.json: rule 0: unknown key \"colour\" (match, format, algo, activations, options)");
  EXPECT_NE(error_of([] { parse(R"({"rules": [{"match": "re:(", "format": "fp8"}]})"); })
                .find("r.json: rule 0: invalid regex \"(\""),
            std::string::npos);
  EXPECT_EQ(error_of([] { parse(R"({"rules": [{"match": "*", "format": "fp8", "options": {"group_size": 64}}]})"); }),
            "r.json: rule 0: options.group_size applies to int4 only");
  EXPECT_EQ(error_of([] { parse(R"({"rule": []})"); }),
            "r.json: unknown key \"rule\" (a recipe has rules, description, kv_cache)");
  // A block that does not divide the inputs.
  const Architecture arch = test::tiny_llama(1);
  EXPECT_EQ(error_of([&] { apply_recipe(parse(R"({"rules": [{"match": "*", "format": "int4"}]})"), arch, ModuleChoice{}); }),
            "r.json: rule 0 gives model.layers.0.self_attn.q_proj int4, whose block of 128 does not "
            "divide its 64 inputs");
  test::ScratchDir dir;
  {
    std::ofstream(dir / "bad.json") << "{\"rules\": [";
  }
  const std::string e = error_of([&] { load_recipe(dir / "bad.json"); });
  EXPECT_EQ(e.rfind((dir / "bad.json").string() + ": invalid JSON", 0), 0u) << e;
  EXPECT_EQ(e.find('\n'), std::string::npos);
  EXPECT_NE(error_of([&] { load_recipe(dir / "absent.json"); }).find("absent.json: cannot open the recipe: not found"),
            std::string::npos);
}

// Found by recipe_fuzz: options nested 100000 deep overflowed the stack when the rule copied
// them; load_recipe now refuses nesting beyond 256 levels.
TEST(Recipe, DeeplyNestedOptionsAreRefused) {
  test::ScratchDir dir;
  const size_t n = 100'000;
  std::string nested;
  for (size_t i = 0; i < n; ++i) nested += "{\"a\": ";
  nested += "1" + std::string(n, '}');
  test::write_file(dir / "deep.json",
                   R"({"rules": [{"match": "*", "format": "fp8", "options": )" + nested + "}]}");
  EXPECT_EQ(error_of([&] { load_recipe(dir / "deep.json"); }),
            (dir / "deep.json").string() + ": JSON nests deeper than 64 levels");
}

TEST(Recipe, SaveLoadRoundTrip) {
  const Architecture arch = test::tiny_llama(2, 64, 128);
  Assignment a;
  for (const LinearModule& lm : arch.linears) {
    ModuleChoice mc;
    switch (lm.layer * 7 + lm.slot) {
      case 3: mc.format = FormatChoice::of(Format::fp8); mc.algo = "mse"; break;
      case 6: mc.format = FormatChoice::of(Format::int4, 32); mc.algo = "gptq";
              mc.options = {{"damp", 0.05}, {"block", 64}}; break;
      case 10: mc.format = FormatChoice::keep(); break;
      case 13: mc = module_choice_of(FormatChoice::nvfp4_four_over_six()); break;
      default: mc.format = FormatChoice::of(Format::nvfp4); mc.algo = "awq";
    }
    a.modules[lm.name] = mc;
  }
  test::ScratchDir dir;
  save_recipe(dir / "saved.json", a, arch);
  const Recipe r = load_recipe(dir / "saved.json");
  EXPECT_EQ(r.rules.size(), arch.linears.size());
  ModuleChoice def;
  def.format = FormatChoice::of(Format::mxfp4);
  const Assignment back = apply_recipe(r, arch, def);
  ASSERT_EQ(back.modules.size(), a.modules.size());
  for (const auto& [name, mc] : a.modules) EXPECT_TRUE(back.at(name) == mc) << name;
  // Saving the replay gives the same file.
  save_recipe(dir / "again.json", back, arch);
  std::ifstream f1(dir / "saved.json"), f2(dir / "again.json");
  const std::string s1((std::istreambuf_iterator<char>(f1)), {}), s2((std::istreambuf_iterator<char>(f2)), {});
  EXPECT_EQ(s1, s2);
}

}  // namespace
}  // namespace qf

namespace qf {
namespace {

TEST(RecipeYaml, SameRecipeAsJson) {
  test::ScratchDir dir;
  test::write_file(dir / "r.json", R"({"rules": [
      {"match": "model.layers.0.*", "format": "keep"},
      {"match": "re:model\\.layers\\.[0-9]+\\.mlp\\.down_proj", "format": "int4", "algo": "gptq",
       "options": {"group_size": 64, "damp": 0.02, "note": "x", "flag": true, "none": null}},
      {"match": "*", "format": "int4:32"}]})");
  test::write_file(dir / "r.yaml", R"(# the same rules
rules:
  - {match: "model.layers.0.*", format: keep}
  - match: 're:model\.layers\.[0-9]+\.mlp\.down_proj'
    format: int4
    algo: gptq
    options:
      group_size: 64
      damp: 0.02
      note: x
      flag: true
      none: ~
  - match: "*"
    format: "int4:32"
)");
  const Recipe j = load_recipe(dir / "r.json");
  const Recipe y = load_recipe(dir / "r.yaml");
  ASSERT_EQ(y.rules.size(), j.rules.size());
  for (size_t i = 0; i < j.rules.size(); ++i) {
    EXPECT_EQ(y.rules[i].match, j.rules[i].match) << i;
    EXPECT_EQ(y.rules[i].format, j.rules[i].format) << i;
    EXPECT_EQ(y.rules[i].algo, j.rules[i].algo) << i;
    EXPECT_EQ(y.rules[i].options, j.rules[i].options) << i;
  }
  EXPECT_EQ(y.rules[1].line, 4);
  EXPECT_EQ(j.rules[1].line, 0);
  const Architecture arch = test::tiny_llama(2, 64, 128);
  EXPECT_EQ(apply_recipe(y, arch, ModuleChoice{}).modules, apply_recipe(j, arch, ModuleChoice{}).modules);
  // A .yml file is YAML too; a quoted number stays a string (and is refused as a format).
  test::write_file(dir / "r.yml", "rules:\n  - match: '*'\n    format: '8'\n");
  EXPECT_NE(error_of([&] { load_recipe(dir / "r.yml"); }).find("unknown format '8'"), std::string::npos);
}

TEST(RecipeYaml, ErrorsNameTheFileAndLine) {
  test::ScratchDir dir;
  const std::string f = (dir / "r.yaml").string();
  test::write_file(dir / "r.yaml", "rules:\n  - match: '*.k_proj'\n    format: fp8\n"
                                   "  - match: '*'\n    format: fp5\n");
  EXPECT_EQ(error_of([&] { load_recipe(dir / "r.yaml"); })
                .rfind(f + ":4: rule 1: unknown format 'fp5'; did you mean 'fp8'?", 0),
            0u);
  test::write_file(dir / "r.yaml", "rules:\n  - match: '*'\n    format: [fp8\n");
  const std::string syntax = error_of([&] { load_recipe(dir / "r.yaml"); });
  EXPECT_EQ(syntax.rfind(f + ":4: invalid YAML: ", 0), 0u) << syntax;
  EXPECT_EQ(syntax.find('\n'), std::string::npos);
  test::write_file(dir / "r.yaml", "rules:\n  - match: '*'\n    colour: red\n    format: fp8\n");
  EXPECT_EQ(error_of([&] { load_recipe(dir / "r.yaml"); }),
            f + ":2: rule 0: unknown key \"colour\" (match, format, algo, activations, options)");
  test::write_file(dir / "r.yaml", "- a\n- b\n");
  EXPECT_EQ(error_of([&] { load_recipe(dir / "r.yaml"); }),
            f + ": a recipe is a JSON object with a \"rules\" list");
  // Fused modules given different formats name the rules' lines.
  test::write_file(dir / "r.yaml", "rules:\n  - {match: '*.k_proj', format: fp8}\n"
                                   "  - {match: '*', format: nvfp4}\n");
  const std::string fused =
      error_of([&] { apply_recipe(load_recipe(dir / "r.yaml"), test::tiny_llama(1), ModuleChoice{}); });
  EXPECT_NE(fused.find("nvfp4 by rule 1 (line 3), fp8 by rule 0 (line 2)"), std::string::npos) << fused;
}

}  // namespace
}  // namespace qf

namespace qf {
namespace {

// Per-module activations, the recipe's KV cache and description, and a rule for the head.
TEST(Recipe, ActivationsKvCacheAndTheHead) {
  const Architecture arch = test::tiny_llama(2, 64, 128);
  const Recipe r = parse(R"({"description": "d", "kv_cache": "fp8", "rules": [
      {"match": "*.mlp.*", "format": "nvfp4", "activations": "nvfp4"},
      {"match": "*.self_attn.*", "format": "fp8", "activations": "fp8"},
      {"match": "lm_head", "format": "nvfp4:4o6"},
      {"match": "*", "format": "keep"}]})");
  EXPECT_EQ(r.description, "d");
  EXPECT_TRUE(r.kv_fp8);
  const Assignment a = apply_recipe(r, arch, ModuleChoice{});
  EXPECT_EQ(a.at("model.layers.1.mlp.up_proj").activations, ActQuant::nvfp4);
  EXPECT_EQ(a.at("model.layers.1.self_attn.k_proj").activations, ActQuant::fp8);
  EXPECT_EQ(a.at("lm_head").format, FormatChoice::of(Format::nvfp4));
  EXPECT_EQ(a.at("lm_head").algo, "four_over_six");
  // The saved form replays the same assignment, activations, head and KV cache included.
  const Recipe saved = parse_recipe(recipe_json(a, arch, r.kv_fp8), "saved");
  EXPECT_EQ(apply_recipe(saved, arch, ModuleChoice{}).modules, a.modules);
  EXPECT_TRUE(saved.kv_fp8);
  EXPECT_FALSE(parse_recipe(recipe_json(a, arch), "saved").kv_fp8);
  // "*" alone does not quantize the head (as without a recipe, it needs naming).
  const Assignment b =
      apply_recipe(parse(R"({"rules": [{"match": "*", "format": "fp8"}]})"), arch, ModuleChoice{});
  EXPECT_TRUE(b.at("lm_head").format.is_keep());
}

TEST(Recipe, ActivationErrorsNameTheRule) {
  EXPECT_EQ(error_of([] {
              parse(R"({"rules": [{"match": "*", "format": "fp8", "activations": "nvfp4"}]})");
            }),
            "r.json: rule 0: activations nvfp4 (W4A4) needs format nvfp4, not fp8");
  EXPECT_EQ(error_of([] {
              parse(R"({"rules": [{"match": "*", "format": "nvfp4", "activations": "fp4"}]})");
            }).rfind("r.json: rule 0: unknown activations 'fp4'", 0),
            0u);
  EXPECT_EQ(error_of([] { parse(R"({"kv_cache": "int8", "rules": []})"); }),
            "r.json: \"kv_cache\" is \"int8\"; a recipe says fp8 or none");
  const Architecture arch = test::tiny_llama(2, 64, 128);
  EXPECT_EQ(error_of([&] {
              apply_recipe(parse(R"({"rules": [{"match": "lm_head", "format": "fp8",
                                                "activations": "fp8"}]})"),
                           arch, ModuleChoice{});
            }),
            "r.json: rule 0 gives lm_head activations fp8; the output head is quantized "
            "weight-only");
}

}  // namespace
}  // namespace qf

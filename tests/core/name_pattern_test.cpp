// NamePattern: names, globs and "re:" regexes as configs and recipes write them; a regex that
// would backtrack for minutes is a one-line error within milliseconds.
#include "core/name_pattern.h"

#include "core/error.h"

#include <gtest/gtest.h>

#include <functional>
#include <string>

namespace qf {
namespace {

using Anchor = NamePattern::Anchor;

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(NamePattern, NamesAndGlobs) {
  const NamePattern exact("lm_head", Anchor::prefix, "c");
  EXPECT_TRUE(exact.matches("lm_head"));
  EXPECT_FALSE(exact.matches("lm_head2"));
  EXPECT_FALSE(exact.is_regex());
  const NamePattern glob("*.mlp.down_proj", Anchor::whole, "c");
  EXPECT_TRUE(glob.matches("model.layers.3.mlp.down_proj"));  // '*' crosses dots
  EXPECT_FALSE(glob.matches("model.layers.3.mlp.up_proj"));
}

// compressed-tensors and vLLM use re.match: anchored at the start only. Recipes anchor both ends.
TEST(NamePattern, RegexAnchoring) {
  const NamePattern prefix("re:.*self_attn", Anchor::prefix, "c");
  EXPECT_TRUE(prefix.is_regex());
  EXPECT_TRUE(prefix.matches("model.layers.0.self_attn.q_proj"));
  EXPECT_FALSE(NamePattern("re:self_attn", Anchor::prefix, "c").matches("model.self_attn"));
  const NamePattern whole("re:model\\.layers\\.[0-9]+\\.mlp\\.down_proj", Anchor::whole, "c");
  EXPECT_TRUE(whole.matches("model.layers.12.mlp.down_proj"));
  EXPECT_FALSE(whole.matches("model.layers.12.mlp.down_proj_extra"));
  EXPECT_FALSE(NamePattern("re:.*self_attn", Anchor::whole, "c").matches("model.self_attn.q"));
}

TEST(NamePattern, InvalidRegexIsNamed) {
  // Found by tests/fuzz/quant_config_fuzz.cpp: std::regex accepted ".**" and then hung.
  const std::string e = error_of([] { NamePattern("re:.**ate.*", Anchor::prefix, "cfg.json: ignore"); });
  EXPECT_EQ(e.rfind("cfg.json: ignore: invalid regex \".**ate.*\": ", 0), 0u) << e;
  EXPECT_NE(e.find("offset"), std::string::npos) << e;
  EXPECT_NE(error_of([] { NamePattern("re:(", Anchor::whole, "r"); }), "");
}

TEST(NamePattern, CatastrophicBacktrackingIsAnErrorNotAHang) {
  const NamePattern evil("re:(a+)+$", Anchor::prefix, "cfg.json: ignore");
  EXPECT_TRUE(evil.matches("aaaa"));
  const std::string name = std::string(40, 'a') + "!";
  const std::string e = error_of([&] { (void)evil.matches(name); });
  EXPECT_EQ(e, "cfg.json: ignore: regex \"(a+)+$\" exceeds its backtracking budget on \"" + name + "\"");
}

}  // namespace
}  // namespace qf

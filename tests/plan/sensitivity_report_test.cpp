// The sensitivity report: sorted rows, JSON fields, and a self-contained, well-formed HTML page.
#include "plan/sensitivity_report.h"

#include "plan_test_util.h"

#include <gtest/gtest.h>

#include <cmath>
#include <regex>

namespace qf {
namespace {

SensitivityReport sample_report(bool with_exact) {
  const Architecture arch = test::tiny_llama(2);
  CandidateOptions o;
  o.formats = {FormatChoice::of(Format::nvfp4), FormatChoice::of(Format::fp8)};
  std::vector<DecisionUnit> units = decision_units(arch, o);
  units[1].name = "model.layers.0.<o&\"proj\">";  // to see escaping
  UnitScores proxy, exact;
  for (size_t u = 0; u < units.size(); ++u) {
    proxy.push_back({double(u + 1), double(u + 1) / 10, 0});
    exact.push_back({double(u + 1) * 2, double(u + 1) / 5, 0});
  }
  exact[0][0] = 100;  // one disagreement
  return build_sensitivity_report("tiny <model>", units, proxy, with_exact ? exact : UnitScores{});
}

TEST(PlanReport, RowsSortedMostSensitiveFirst) {
  const SensitivityReport r = sample_report(true);
  ASSERT_EQ(r.rows.size(), 16u);  // 8 units x 2 formats (keep is not a row)
  for (size_t i = 1; i < r.rows.size(); ++i) EXPECT_GE(r.rows[i - 1].proxy, r.rows[i].proxy);
  EXPECT_EQ(r.rows[0].name, "model.layers.1.mlp.down_proj");
  EXPECT_EQ(r.rows[0].format, "nvfp4");
  EXPECT_GT(r.rank_correlation, 0.8);
  EXPECT_LT(r.rank_correlation, 1.0);
  EXPECT_TRUE(std::isnan(sample_report(false).rank_correlation));
}

TEST(PlanReport, JsonFields) {
  const nlohmann::ordered_json j = sensitivity_report_json(sample_report(true));
  ASSERT_TRUE(j["modules"].is_array());
  const auto& m = j["modules"][0];
  EXPECT_EQ(m["name"], "model.layers.1.mlp.down_proj");
  EXPECT_EQ(m["format"], "nvfp4");
  EXPECT_EQ(m["proxy"], 8.0);
  EXPECT_EQ(m["exact"], 16.0);
  EXPECT_TRUE(m["bytes"].is_number_unsigned());
  EXPECT_TRUE(j["rank_correlation"].is_number());
  const nlohmann::ordered_json p = sensitivity_report_json(sample_report(false));
  EXPECT_TRUE(p["modules"][0]["exact"].is_null());
  EXPECT_TRUE(p["rank_correlation"].is_null());
}

// Every non-void element closes in order.
bool balanced(const std::string& html, std::string* why) {
  static const std::regex tag("<(/?)([a-zA-Z][a-zA-Z0-9]*)[^>]*?(/?)>");
  std::vector<std::string> stack;
  for (auto it = std::sregex_iterator(html.begin(), html.end(), tag); it != std::sregex_iterator(); ++it) {
    const std::string name = (*it)[2];
    if (name == "meta" || name == "br") continue;  // void elements
    if ((*it)[3] == "/") continue;  // self-closed
    if ((*it)[1] == "") {
      stack.push_back(name);
    } else {
      if (stack.empty() || stack.back() != name) {
        *why = "unexpected </" + name + "> after <" + (stack.empty() ? "" : stack.back()) + ">";
        return false;
      }
      stack.pop_back();
    }
  }
  if (!stack.empty()) *why = "unclosed <" + stack.back() + ">";
  return stack.empty();
}

TEST(PlanReport, HtmlIsSelfContainedAndWellFormed) {
  for (bool exact : {true, false}) {
    const std::string html = sensitivity_report_html(sample_report(exact));
    std::string why;
    EXPECT_TRUE(balanced(html, &why)) << why;
    EXPECT_EQ(html.rfind("<!DOCTYPE html>", 0), 0u);
    EXPECT_EQ(html.find("http"), std::string::npos);
    EXPECT_EQ(html.find("<script"), std::string::npos);
    EXPECT_EQ(html.find("<o&"), std::string::npos);  // escaped
    EXPECT_NE(html.find("model.layers.0.&lt;o&amp;&quot;proj&quot;&gt;"), std::string::npos);
    EXPECT_NE(html.find("model.layers.1.mlp.gate_proj+up_proj"), std::string::npos);
    EXPECT_NE(html.find("tiny &lt;model&gt;"), std::string::npos);
    EXPECT_NE(html.find("<svg"), std::string::npos);
    EXPECT_NE(html.find("<rect"), std::string::npos);
  }
  const std::string table = sensitivity_report_table(sample_report(true));
  EXPECT_NE(table.find("rank correlation"), std::string::npos);
}

}  // namespace
}  // namespace qf

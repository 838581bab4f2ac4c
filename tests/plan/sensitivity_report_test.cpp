// The sensitivity report: sorted rows, JSON fields, and a self-contained, well-formed HTML page.
#include "plan/sensitivity_report.h"

#include "plan/report_svg.h"
#include "plan_test_util.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <set>
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

size_t count(const std::string& s, const std::string& needle) {
  size_t n = 0;
  for (size_t at = s.find(needle); at != std::string::npos; at = s.find(needle, at + 1)) ++n;
  return n;
}

// The part of `html` from `start` to the next `end` (empty when absent).
std::string section(const std::string& html, const std::string& start, const std::string& end) {
  const size_t a = html.find(start);
  if (a == std::string::npos) return {};
  const size_t b = html.find(end, a);
  return html.substr(a, b == std::string::npos ? std::string::npos : b - a);
}

SensitivityReport report_with_settings() {
  SensitivityReport r = sample_report(false);
  r.settings.calib_files = {"corpora/<shakespeare>.txt", "more.jsonl"};
  r.settings.calib_samples = 8;
  r.settings.calib_seq = 64;
  r.settings.seed = 7;
  r.settings.calib_tokens = 512;
  r.settings.proxy_rows = 256;
  r.settings.formats = {"nvfp4", "fp8"};
  return r;
}

TEST(PlanReport, HtmlBarsPerUnitAndFormatSortedAndScaled) {
  const SensitivityReport r = report_with_settings();
  const std::string html = sensitivity_report_html(r);
  const std::string bars =
      section(html, "aria-label=\"sensitivity per unit and format\"", "</svg>");
  ASSERT_FALSE(bars.empty());
  // One labelled bar per row (every score here is positive), the largest the full 560 px.
  EXPECT_EQ(count(bars, "<rect x=\"") - count(bars, "fill=\"#f5f5f5\""), r.rows.size());
  EXPECT_NE(bars.find("width=\"560.0\""), std::string::npos);
  EXPECT_LT(bars.find("model.layers.1.mlp.down_proj"), bars.find("model.layers.0.mlp.down_proj"));
  // A colour per format with a legend naming both.
  EXPECT_NE(html.find("class=\"legend\""), std::string::npos);
  EXPECT_NE(bars.find(series_color(0)), std::string::npos);
  EXPECT_NE(bars.find(series_color(1)), std::string::npos);
  // The per-layer chart is tall enough to read.
  const std::string layers = section(html, "aria-label=\"scores per layer\"", "</svg>");
  ASSERT_FALSE(layers.empty());
  const std::string svg_open = html.substr(html.rfind("<svg", html.find("aria-label=\"scores per layer\"")), 60);
  int h = 0;
  ASSERT_EQ(std::sscanf(svg_open.c_str(), "<svg width=\"%*d\" height=\"%d\"", &h), 1) << svg_open;
  EXPECT_GE(h, 350);
}

TEST(PlanReport, HtmlListsModelFormatsAndCalibrationSettings) {
  const std::string html = sensitivity_report_html(report_with_settings());
  const std::string settings = section(html, "<h2>Settings</h2>", "</table>");
  ASSERT_FALSE(settings.empty());
  EXPECT_NE(settings.find("tiny &lt;model&gt;"), std::string::npos);
  EXPECT_NE(settings.find("nvfp4, fp8"), std::string::npos);
  EXPECT_NE(settings.find("corpora/&lt;shakespeare&gt;.txt"), std::string::npos);
  EXPECT_NE(settings.find("more.jsonl"), std::string::npos);
  for (const char* row : {"<th>samples (windows)</th><td>8</td>", "<th>sequence length</th><td>64</td>",
                          "<th>seed</th><td>7</td>", "<th>calibration tokens</th><td>512</td>",
                          "<th>proxy rows per Linear input</th><td>256</td>"})
    EXPECT_NE(settings.find(row), std::string::npos) << row;
  EXPECT_NE(settings.find("<th>scores</th><td>proxy"), std::string::npos);
  const std::string exact = sensitivity_report_html(sample_report(true));
  EXPECT_NE(exact.find("<th>scores</th><td>exact"), std::string::npos);
  EXPECT_NE(exact.find("rank correlation"), std::string::npos);
}

AutoPlanReport sample_plan_report() {
  AutoPlanReport a;
  a.sensitivity = report_with_settings();
  a.target = "--target-bits 5";
  a.solved = "least total predicted error <with> a budget";
  a.measure = "proxy";
  a.target_bits = 5;
  a.curve = {{4.5, 1000, 9.0}, {4.9, 1100, 4.0}, {5.5, 1200, 2.0}, {32, 8000, 0}};
  a.chosen = a.curve[1];
  // One row per decision unit: the 8 units of sample_report, one of them kept.
  std::set<std::string> units;
  for (const SensitivityRow& row : a.sensitivity.rows) units.insert(row.name);
  for (const std::string& u : units)
    a.units.push_back({u, u.find("down_proj") != std::string::npos ? "keep" : "nvfp4", 4.5, 100, 0.5});
  a.kept = {{"model.layers.1.mlp.down_proj", "--auto: keep"}, {"lm_head", "kept <in> its dtype"}};
  return a;
}

TEST(PlanReport, AutoPlanHtmlCurveChosenPointTargetAndPlan) {
  const AutoPlanReport a = sample_plan_report();
  const std::string html = auto_plan_report_html(a);
  std::string why;
  EXPECT_TRUE(balanced(html, &why)) << why;
  EXPECT_EQ(html.rfind("<!DOCTYPE html>", 0), 0u);
  EXPECT_EQ(html.find("<script"), std::string::npos);
  // The curve: a line through one dot per point, the chosen point marked, the target drawn.
  const std::string curve =
      section(html, "aria-label=\"total predicted error against bits per weight\"", "</svg>");
  ASSERT_FALSE(curve.empty());
  EXPECT_NE(curve.find("<polyline"), std::string::npos);
  EXPECT_EQ(count(curve, "<circle"), a.curve.size() + 1);
  EXPECT_EQ(count(curve, "class=\"chosen\""), 1u);
  EXPECT_NE(curve.find("chosen: 4.900 bits"), std::string::npos);
  EXPECT_EQ(count(curve, "class=\"target\""), 1u);
  EXPECT_NE(curve.find("target: --target-bits 5"), std::string::npos);
  // The plan: one row per unit, kept units marked, totals; kept modules with reasons, escaped.
  const std::string plan = section(html, "<table class=\"plan\">", "</tbody>");
  EXPECT_EQ(count(plan, "<tr"), a.units.size() + 1);  // + the header row
  EXPECT_EQ(count(plan, "<tr class=\"keep\">"), 2u);
  EXPECT_NE(html.find("kept &lt;in&gt; its dtype"), std::string::npos);
  EXPECT_NE(html.find("&lt;with&gt; a budget"), std::string::npos);
  EXPECT_EQ(html.find("<with>"), std::string::npos);
  // The sensitivity bars with the chosen formats outlined, and the settings.
  const std::string bars = section(html, "aria-label=\"sensitivity per unit and format\"", "</svg>");
  EXPECT_EQ(count(bars, "stroke=\"#000\""), 6u);  // 6 units chose nvfp4; keep has no bar
  EXPECT_NE(html.find("<th>sequence length</th><td>64</td>"), std::string::npos);
  EXPECT_NE(html.find("<th>target</th><td>--target-bits 5</td>"), std::string::npos);
}

TEST(PlanReport, AutoPlanHtmlConvertsOtherTargetsToBits) {
  AutoPlanReport a = sample_plan_report();
  a.target = "--target-size 1.2MB";
  a.target_bits = 5.25;
  a.kept.clear();
  const std::string html = auto_plan_report_html(a);
  EXPECT_NE(html.find("target: --target-size 1.2MB (= 5.250 bits per weight)"), std::string::npos);
  EXPECT_NE(html.find("None: every quantizable Linear is quantized."), std::string::npos);
}

}  // namespace
}  // namespace qf

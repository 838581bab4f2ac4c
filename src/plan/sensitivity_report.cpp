// Rendering of the sensitivity report: table, JSON and standalone HTML with inline SVG.
#include "plan/sensitivity_report.h"

#include "core/html.h"
#include "core/progress.h"
#include "plan/report_svg.h"

#include "core/error.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <set>

namespace qf {

SensitivityReport build_sensitivity_report(const std::string& model,
                                           const std::vector<DecisionUnit>& units,
                                           const UnitScores& proxy, const UnitScores& exact) {
  if (proxy.size() != units.size())
    fail("sensitivity report: {} proxy rows for {} units", proxy.size(), units.size());
  if (!exact.empty() && exact.size() != units.size())
    fail("sensitivity report: {} exact rows for {} units", exact.size(), units.size());
  SensitivityReport r;
  r.model = model;
  std::vector<double> pa, ea;
  for (size_t u = 0; u < units.size(); ++u) {
    const auto& cand = units[u].candidates;
    if (proxy[u].size() != cand.size() || (!exact.empty() && exact[u].size() != cand.size()))
      fail("sensitivity report: unit {}: scores do not match its {} candidates", units[u].name,
           cand.size());
    for (size_t c = 0; c < cand.size(); ++c) {
      if (cand[c].choice.is_keep()) continue;
      SensitivityRow row{units[u].name, units[u].layer, cand[c].choice.name(), proxy[u][c],
                         std::nullopt, cand[c].bytes};
      if (!exact.empty()) {
        row.exact = exact[u][c];
        pa.push_back(proxy[u][c]);
        ea.push_back(exact[u][c]);
      }
      r.rows.push_back(std::move(row));
    }
  }
  std::stable_sort(r.rows.begin(), r.rows.end(), [](const SensitivityRow& a, const SensitivityRow& b) {
    if (a.proxy != b.proxy) return a.proxy > b.proxy;
    if (a.name != b.name) return a.name < b.name;
    return a.format < b.format;
  });
  r.rank_correlation = spearman_correlation(pa, ea);
  return r;
}

namespace {

nlohmann::ordered_json number_or_null(double v) {
  return std::isfinite(v) ? nlohmann::ordered_json(v) : nlohmann::ordered_json(nullptr);
}


std::string exact_text(const std::optional<double>& e) { return e ? fmt::format("{:.4g}", *e) : "-"; }

}  // namespace

nlohmann::ordered_json sensitivity_report_json(const SensitivityReport& report) {
  nlohmann::ordered_json j;
  j["model"] = report.model;
  nlohmann::ordered_json modules = nlohmann::ordered_json::array();
  for (const SensitivityRow& row : report.rows) {
    nlohmann::ordered_json m;
    m["name"] = row.name;
    m["format"] = row.format;
    m["proxy"] = number_or_null(row.proxy);
    m["exact"] = row.exact ? number_or_null(*row.exact) : nlohmann::ordered_json(nullptr);
    m["bytes"] = row.bytes;
    modules.push_back(std::move(m));
  }
  j["modules"] = std::move(modules);
  j["rank_correlation"] = number_or_null(report.rank_correlation);
  return j;
}

std::string sensitivity_report_table(const SensitivityReport& report) {
  size_t w = 4, fw = 8;
  for (const SensitivityRow& row : report.rows) {
    w = std::max(w, row.name.size());
    fw = std::max(fw, row.format.size());
  }
  std::string out = fmt::format("{:<{}}  {:<{}}  {:>12}  {:>12}  {:>14}\n", "unit", w, "format",
                                fw, "proxy", "exact", "bytes");
  for (const SensitivityRow& row : report.rows)
    out += fmt::format("{:<{}}  {:<{}}  {:>12.4g}  {:>12}  {:>14}\n", row.name, w, row.format, fw,
                       row.proxy, exact_text(row.exact), row.bytes);
  if (std::isfinite(report.rank_correlation))
    out += fmt::format("rank correlation (Spearman, proxy vs exact): {:.3f}\n",
                       report.rank_correlation);
  return out;
}

namespace {

bool has_exact(const SensitivityReport& r) {
  return std::any_of(r.rows.begin(), r.rows.end(),
                     [](const SensitivityRow& row) { return row.exact.has_value(); });
}

// The score the charts show: exact when the report has exact scores (the measure the user asked
// for), else the proxy.
double shown_score(const SensitivityRow& row, bool exact) {
  return exact && row.exact ? *row.exact : row.proxy;
}

// The formats that have rows, in the user's order (settings.formats), then in order of
// appearance: an asked name can differ from the rows' (int4:channel is stored as int4:172), and
// a legend key without bars would only mislead.
std::vector<std::string> report_formats(const SensitivityReport& r) {
  std::vector<std::string> out;
  auto present = [&r](const std::string& f) {
    return std::any_of(r.rows.begin(), r.rows.end(),
                       [&f](const SensitivityRow& row) { return row.format == f; });
  };
  for (const std::string& f : r.settings.formats)
    if (present(f) && std::find(out.begin(), out.end(), f) == out.end()) out.push_back(f);
  for (const SensitivityRow& row : r.rows)
    if (std::find(out.begin(), out.end(), row.format) == out.end()) out.push_back(row.format);
  return out;
}

// What the user asked for, when known; else what the rows hold.
std::vector<std::string> considered_formats(const SensitivityReport& r) {
  return r.settings.formats.empty() ? report_formats(r) : r.settings.formats;
}

size_t index_of(const std::vector<std::string>& v, const std::string& s) {
  return size_t(std::find(v.begin(), v.end(), s) - v.begin());
}

std::string join_escaped(const std::vector<std::string>& items, const char* sep) {
  std::string out;
  for (const std::string& s : items) out += (out.empty() ? "" : sep) + escape_html(s);
  return out;
}

// Bars per unit and format, most sensitive first; `chosen` (unit -> format) outlines a plan's
// choice.
std::string unit_bars_section(const SensitivityReport& r,
                              const std::map<std::string, std::string>& chosen) {
  const bool exact = has_exact(r);
  const std::vector<std::string> formats = report_formats(r);
  std::vector<const SensitivityRow*> sorted;
  for (const SensitivityRow& row : r.rows) sorted.push_back(&row);
  std::stable_sort(sorted.begin(), sorted.end(), [&](const SensitivityRow* a, const SensitivityRow* b) {
    return shown_score(*a, exact) > shown_score(*b, exact);
  });
  std::vector<HBar> bars;
  for (const SensitivityRow* row : sorted) {
    HBar b;
    b.label = row->name;
    b.tag = row->format;
    b.series = index_of(formats, row->format);
    b.value = shown_score(*row, exact);
    b.value_text = fmt::format("{:.3g}", b.value);
    const auto it = chosen.find(row->name);
    b.highlight = it != chosen.end() && it->second == row->format;
    bars.push_back(std::move(b));
  }
  std::string html = fmt::format(
      "<h2>Sensitivity per unit and format</h2>\n<p>{} score when only that unit is quantized in "
      "that format (lower is better), most sensitive first; bars are linear, the largest fills "
      "the width.{}</p>\n",
      exact ? "Exact (KL of the final logits)" : "Proxy", chosen.empty() ? "" :
      " Outlined, in bold: the format the plan chose for the unit.");
  html += html_legend(formats);
  html += svg_hbars(bars, 560, "sensitivity per unit and format");
  return html;
}

// Scores summed per layer and format on a log scale: where in depth the model is fragile.
std::string layer_chart_section(const SensitivityReport& r) {
  const bool exact = has_exact(r);
  const std::vector<std::string> formats = report_formats(r);
  std::map<int, std::vector<double>> by_layer;
  for (const SensitivityRow& row : r.rows) {
    auto& v = by_layer[row.layer];
    v.resize(formats.size(), 0.0);
    const double s = shown_score(row, exact);
    v[index_of(formats, row.format)] += std::isfinite(s) ? std::max(s, 0.0) : 0.0;
  }
  GroupedBars chart;
  chart.series = formats;
  chart.x_label = "layer";
  chart.y_label = fmt::format("{} score, summed over the layer (log)", exact ? "exact" : "proxy");
  for (const auto& [layer, v] : by_layer) {
    chart.groups.push_back(std::to_string(layer));
    chart.values.push_back(v);
  }
  return fmt::format("<h2>Per layer ({} scores, summed over the layer's units)</h2>\n",
                     exact ? "exact" : "proxy") +
         html_legend(formats) + svg_grouped_log_bars(chart, 1000, 340, "scores per layer");
}

// The settings section: the model, the formats, how the scores were measured, then `extra`.
std::string settings_section(const SensitivityReport& r,
                             const std::vector<std::pair<std::string, std::string>>& extra) {
  const SensitivitySettings& s = r.settings;
  std::vector<std::pair<std::string, std::string>> rows;
  rows.emplace_back("model", escape_html(r.model));
  rows.emplace_back("formats considered", join_escaped(considered_formats(r), ", ") + " (and keep)");
  rows.emplace_back("scores", has_exact(r)
                                  ? "exact (KL of the final logits with only that unit "
                                    "quantized) and proxy"
                                  : "proxy (layer output error on sampled calibration rows, "
                                    "relative to the residual stream)");
  if (!s.calib_files.empty())
    rows.emplace_back("calibration files", join_escaped(s.calib_files, "<br>"));
  if (s.calib_samples > 0) rows.emplace_back("samples (windows)", std::to_string(s.calib_samples));
  if (s.calib_seq > 0) rows.emplace_back("sequence length", std::to_string(s.calib_seq));
  if (!s.calib_files.empty()) rows.emplace_back("seed", std::to_string(s.seed));
  if (s.calib_tokens > 0) rows.emplace_back("calibration tokens", std::to_string(s.calib_tokens));
  if (s.proxy_rows > 0) rows.emplace_back("proxy rows per Linear input", std::to_string(s.proxy_rows));
  if (std::isfinite(r.rank_correlation))
    rows.emplace_back("rank correlation (Spearman, proxy vs exact)",
                      fmt::format("{:.3f}", r.rank_correlation));
  rows.insert(rows.end(), extra.begin(), extra.end());
  return "<h2>Settings</h2>\n" + html_settings_table(rows);
}

std::string rows_table_section(const SensitivityReport& r) {
  std::string html =
      "<h2>All scores, most sensitive by proxy first</h2>\n<table>\n<thead><tr><th>unit</th>"
      "<th>format</th><th>proxy</th><th>exact</th><th>bytes</th></tr></thead>\n<tbody>\n";
  for (const SensitivityRow& row : r.rows)
    html += fmt::format(
        "<tr><td>{}</td><td>{}</td><td class=\"n\">{:.4g}</td><td class=\"n\">{}</td><td "
        "class=\"n\">{}</td></tr>\n",
        escape_html(row.name), escape_html(row.format), row.proxy, exact_text(row.exact),
        row.bytes);
  return html + "</tbody>\n</table>\n";
}

}  // namespace

std::string sensitivity_report_html(const SensitivityReport& report) {
  std::string body = fmt::format("<h1>Sensitivity of {}</h1>\n", escape_html(report.model));
  body += fmt::format(
      "<p>How much the model's output changes when one decision unit (a Linear, or a fused "
      "q/k/v or gate/up group) is quantized in one format, the rest left as is; formats "
      "{}. Proxy: the unit's output error on sampled calibration rows relative to the residual "
      "stream's energy (compare within a run). Exact: KL divergence of the final logits.</p>\n",
      join_escaped(considered_formats(report), ", "));
  body += unit_bars_section(report, {});
  body += layer_chart_section(report);
  body += settings_section(report, {});
  body += rows_table_section(report);
  return html_page("qforge sensitivity: " + report.model, body);
}

std::string auto_plan_report_html(const AutoPlanReport& r) {
  const SensitivityReport& s = r.sensitivity;
  std::string body = fmt::format("<h1>--auto plan for {}</h1>\n<p>{}: {}.</p>\n",
                                 escape_html(s.model), escape_html(r.target), escape_html(r.solved));

  LineChart chart;
  for (const ErrorCurvePoint& p : r.curve)
    chart.points.push_back({p.bits, p.error,
                            fmt::format("{:.3f} bits per weight, {} of Linears: total predicted "
                                        "error {:.4g}",
                                        p.bits, human_bytes(double(p.bytes)), p.error)});
  chart.marked = ChartPoint{r.chosen.bits, r.chosen.error,
                            fmt::format("chosen: {:.3f} bits per weight, {}, total predicted error "
                                        "{:.4g}",
                                        r.chosen.bits, human_bytes(double(r.chosen.bytes)),
                                        r.chosen.error)};
  chart.marked_label = fmt::format("chosen: {:.3f} bits, error {:.3g}", r.chosen.bits, r.chosen.error);
  chart.target_x = r.target_bits;
  chart.target_label = r.target.rfind("--target-bits", 0) == 0
                           ? "target: " + r.target
                           : fmt::format("target: {} (= {:.3f} bits per weight)", r.target,
                                         r.target_bits);
  chart.log_x = true;
  chart.x_label = "average bits per weight of the quantizable Linears, scales included (log scale)";
  chart.y_label = "total predicted error";
  chart.width = 1000;
  chart.height = 440;
  body += fmt::format(
      "<h2>Predicted error against bits per weight</h2>\n<p>Each dot is the plan the same solver "
      "chooses for a byte budget ({} budgets from the smallest choice to the largest); the line "
      "is the best total predicted error reachable at each size. Red: the chosen plan; dashed: "
      "the target.</p>\n",
      r.curve.size());
  body += svg_line_chart(chart, "total predicted error against bits per weight");

  std::string rows;
  double total_error = 0;
  uint64_t total_bytes = 0;
  std::map<std::string, std::string> chosen;
  for (const PlanReportUnit& u : r.units) {
    chosen[u.unit] = u.format;
    total_error += u.predicted_error;
    total_bytes += u.bytes;
    rows += fmt::format(
        "<tr{}><td>{}</td><td>{}</td><td class=\"n\">{:.3f}</td><td class=\"n\">{}</td><td "
        "class=\"n\">{:.4g}</td></tr>\n",
        u.format == "keep" ? " class=\"keep\"" : "", escape_html(u.unit), escape_html(u.format),
        u.bits, u.bytes, u.predicted_error);
  }
  body += fmt::format(
      "<h2>Chosen plan</h2>\n<p>Predicted error: {}.</p>\n<table class=\"plan\">\n<thead><tr>"
      "<th>unit</th><th>format</th><th>bits</th><th>bytes</th><th>predicted error</th></tr>"
      "</thead>\n<tbody>\n{}</tbody>\n<tfoot><tr><th>{} units</th><th></th><th class=\"n\">{:.3f}"
      "</th><th class=\"n\">{}</th><th class=\"n\">{:.4g}</th></tr></tfoot>\n</table>\n",
      escape_html(r.measure), rows, r.units.size(), r.chosen.bits, total_bytes, total_error);

  body += "<h2>Modules kept</h2>\n";
  if (r.kept.empty()) {
    body += "<p>None: every quantizable Linear is quantized.</p>\n";
  } else {
    body += "<table class=\"kept\">\n<thead><tr><th>module</th><th>why</th></tr></thead>\n<tbody>\n";
    for (const KeptModule& k : r.kept)
      body += fmt::format("<tr><td>{}</td><td>{}</td></tr>\n", escape_html(k.name),
                          escape_html(k.reason));
    body += "</tbody>\n</table>\n";
  }

  body += unit_bars_section(s, chosen);
  body += layer_chart_section(s);
  body += settings_section(s, {{"target", escape_html(r.target)},
                               {"target as bits per weight", fmt::format("{:.3f}", r.target_bits)},
                               {"predicted error", escape_html(r.measure)}});
  return html_page("qforge --auto plan: " + s.model, body);
}

}  // namespace qf

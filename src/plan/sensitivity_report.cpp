// Rendering of the sensitivity report: table, JSON and standalone HTML with inline SVG.
#include "plan/sensitivity_report.h"

#include "core/html.h"

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
  size_t w = 4;
  for (const SensitivityRow& row : report.rows) w = std::max(w, row.name.size());
  std::string out = fmt::format("{:<{}}  {:<8}  {:>12}  {:>12}  {:>14}\n", "unit", w, "format",
                                "proxy", "exact", "bytes");
  for (const SensitivityRow& row : report.rows)
    out += fmt::format("{:<{}}  {:<8}  {:>12.4g}  {:>12}  {:>14}\n", row.name, w, row.format,
                       row.proxy, exact_text(row.exact), row.bytes);
  if (std::isfinite(report.rank_correlation))
    out += fmt::format("rank correlation (Spearman, proxy vs exact): {:.3f}\n",
                       report.rank_correlation);
  return out;
}

std::string sensitivity_report_html(const SensitivityReport& report) {
  // Per layer and format: the sum of the layer's unit scores (exact when present, else proxy).
  std::set<std::string> format_set;
  std::map<int, std::map<std::string, double>> by_layer;
  bool have_exact = false;
  for (const SensitivityRow& row : report.rows) have_exact = have_exact || row.exact.has_value();
  for (const SensitivityRow& row : report.rows) {
    format_set.insert(row.format);
    const double v = have_exact && row.exact ? *row.exact : row.proxy;
    by_layer[row.layer][row.format] += std::isfinite(v) ? std::max(v, 0.0) : 0.0;
  }
  const std::vector<std::string> formats(format_set.begin(), format_set.end());
  static constexpr const char* kColors[] = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2",
                                            "#59a14f", "#edc948", "#b07aa1", "#9c755f"};
  // Bars on a log scale: scores span orders of magnitude across layers and formats.
  double lo = std::numeric_limits<double>::infinity(), hi = 0;
  for (const auto& [layer, m] : by_layer)
    for (const auto& [f, v] : m)
      if (v > 0) {
        lo = std::min(lo, v);
        hi = std::max(hi, v);
      }
  const double llo = std::isfinite(lo) ? std::floor(std::log10(lo)) : 0.0;
  const double lhi = hi > 0 ? std::max(std::ceil(std::log10(hi)), llo + 1) : 1.0;
  const int chart_h = 240, left = 60, top = 20, bottom = 40;
  const int bar_w = 10, gap = 12;
  const int group_w = int(formats.size()) * bar_w + gap;
  const int width = left + std::max<int>(1, int(by_layer.size())) * group_w + 20;
  const int height = top + chart_h + bottom;
  std::string svg = fmt::format(
      "<svg width=\"{}\" height=\"{}\" role=\"img\" "
      "aria-label=\"scores per layer\">\n",
      width, height);
  svg += fmt::format("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"#333\"/>\n", left, top,
                     left, top + chart_h);
  for (double e = llo; e <= lhi; e += 1) {
    const double y = top + chart_h - (e - llo) / (lhi - llo) * chart_h;
    svg += fmt::format(
        "<line x1=\"{}\" y1=\"{:.1f}\" x2=\"{}\" y2=\"{:.1f}\" stroke=\"#ddd\"/><text x=\"{}\" "
        "y=\"{:.1f}\" class=\"ax\" text-anchor=\"end\">1e{:.0f}</text>\n",
        left, y, width - 10, y, left - 4, y + 4, e);
  }
  int gi = 0;
  for (const auto& [layer, m] : by_layer) {
    const int x0 = left + gi * group_w + gap / 2;
    for (size_t f = 0; f < formats.size(); ++f) {
      const auto it = m.find(formats[f]);
      if (it == m.end() || it->second <= 0) continue;
      const double frac = std::clamp((std::log10(it->second) - llo) / (lhi - llo), 0.0, 1.0);
      const double h = std::max(1.0, frac * chart_h);
      svg += fmt::format(
          "<rect x=\"{}\" y=\"{:.1f}\" width=\"{}\" height=\"{:.1f}\" fill=\"{}\"><title>layer {} "
          "{}: {:.4g}</title></rect>\n",
          x0 + int(f) * bar_w, top + chart_h - h, bar_w - 1, h, kColors[f % 8], layer,
          escape_html(formats[f]), it->second);
    }
    svg += fmt::format("<text x=\"{}\" y=\"{}\" class=\"ax\" text-anchor=\"middle\">{}</text>\n",
                       x0 + int(formats.size()) * bar_w / 2, top + chart_h + 16, layer);
    ++gi;
  }
  svg += fmt::format("<text x=\"{}\" y=\"{}\" class=\"ax\">layer</text>\n", left,
                     top + chart_h + 34);
  svg += "</svg>\n";

  std::string legend;
  for (size_t f = 0; f < formats.size(); ++f)
    legend += fmt::format("<span class=\"key\"><span class=\"sw\" style=\"background:{}\"></span>{}</span>\n",
                          kColors[f % 8], escape_html(formats[f]));

  std::string rows;
  for (const SensitivityRow& row : report.rows)
    rows += fmt::format(
        "<tr><td>{}</td><td>{}</td><td class=\"n\">{:.4g}</td><td class=\"n\">{}</td><td "
        "class=\"n\">{}</td></tr>\n",
        escape_html(row.name), escape_html(row.format), row.proxy, exact_text(row.exact),
        row.bytes);

  const std::string corr = std::isfinite(report.rank_correlation)
                               ? fmt::format("{:.3f}", report.rank_correlation)
                               : std::string("n/a (no exact scores)");
  std::string html;
  html += "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n";
  html += fmt::format("<title>qforge sensitivity: {}</title>\n", escape_html(report.model));
  html +=
      "<style>\n"
      "body{font-family:system-ui,sans-serif;margin:2em;color:#222}\n"
      "table{border-collapse:collapse;font-size:13px}\n"
      "th,td{border:1px solid #ccc;padding:2px 8px}\n"
      "th{background:#f0f0f0;text-align:left}\n"
      "td.n{text-align:right;font-family:monospace}\n"
      ".ax{font-size:11px;fill:#444}\n"
      ".key{margin-right:1.5em}\n"
      ".sw{display:inline-block;width:12px;height:12px;margin-right:4px;vertical-align:middle}\n"
      "</style>\n</head>\n<body>\n";
  html += fmt::format("<h1>Sensitivity of {}</h1>\n", escape_html(report.model));
  html += fmt::format(
      "<p>Score per decision unit and format when only that unit is quantized (lower is better). "
      "Proxy: layer output error weighted by the calibration inputs. Exact: KL divergence of the "
      "final logits. Rank correlation (Spearman) of proxy and exact: {}.</p>\n",
      escape_html(corr));
  html += fmt::format("<h2>Per layer ({} scores, summed over the layer's units)</h2>\n",
                      have_exact ? "exact" : "proxy");
  html += "<div>\n" + legend + "</div>\n" + svg;
  html += "<h2>Units, most sensitive first</h2>\n<table>\n<thead><tr><th>unit</th><th>format</th>"
          "<th>proxy</th><th>exact</th><th>bytes</th></tr></thead>\n<tbody>\n";
  html += rows;
  html += "</tbody>\n</table>\n</body>\n</html>\n";
  return html;
}

}  // namespace qf

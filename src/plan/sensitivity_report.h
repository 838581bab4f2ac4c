// The sensitivity report: one row per (unit, format) with its proxy and exact scores and bytes,
// as a sorted text table, JSON, or a self-contained HTML page (inline CSS and SVG, no scripts,
// no external references) with a per-layer bar chart.
#pragma once

#include "plan/candidates.h"
#include "plan/sensitivity.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace qf {

struct SensitivityRow {
  std::string name;   // decision unit name
  int layer = 0;
  std::string format;  // FormatChoice::name()
  double proxy = 0;
  std::optional<double> exact;  // absent when only the proxy was computed
  uint64_t bytes = 0;           // stored bytes of the unit in this format
};

struct SensitivityReport {
  std::string model;                 // label shown in the title
  std::vector<SensitivityRow> rows;  // sorted: proxy descending, then name, then format
  double rank_correlation = 0;       // Spearman(proxy, exact) over rows with both; NaN if none
};

// Rows for every unit's non-keep candidates. `exact` may be empty (proxy only); otherwise
// [unit][candidate] like `proxy`. Throws qf::Error for mismatched shapes.
SensitivityReport build_sensitivity_report(const std::string& model,
                                           const std::vector<DecisionUnit>& units,
                                           const UnitScores& proxy, const UnitScores& exact);

// {"model", "modules": [{"name", "format", "proxy", "exact" (null if absent), "bytes"}],
//  "rank_correlation" (null if NaN)}
nlohmann::ordered_json sensitivity_report_json(const SensitivityReport& report);

// Fixed-width table, one row per line, most sensitive first.
std::string sensitivity_report_table(const SensitivityReport& report);

// A complete HTML document (UTF-8); names are HTML-escaped.
std::string sensitivity_report_html(const SensitivityReport& report);


}  // namespace qf

// The sensitivity report: one row per (unit, format) with its proxy and exact scores and bytes,
// as a sorted text table, JSON, or a self-contained HTML page (inline CSS and SVG, no scripts,
// no external references): bars per unit and format, a per-layer chart, the calibration
// settings. The --auto plan page adds the error-vs-bits curve and the chosen plan.
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

// How the scores were measured, for the reports' settings section. Zero / empty fields are
// left out of the page.
struct SensitivitySettings {
  std::vector<std::string> calib_files;
  int64_t calib_samples = 0;  // windows asked for (--calib-samples)
  int64_t calib_seq = 0;      // tokens per window (--calib-seq)
  uint64_t seed = 0;
  int64_t calib_tokens = 0;   // tokens the pass ran
  int64_t proxy_rows = 0;     // calibration rows sampled per Linear input
  std::vector<std::string> formats;  // candidates considered (keep aside)
};

struct SensitivityReport {
  std::string model;                 // label shown in the title
  std::vector<SensitivityRow> rows;  // sorted: proxy descending, then name, then format
  double rank_correlation = 0;       // Spearman(proxy, exact) over rows with both; NaN if none
  SensitivitySettings settings;
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

// A complete HTML document (UTF-8); names are HTML-escaped. Shows: a horizontal bar per unit
// and format (exact score when the report has exact scores, else proxy), most sensitive first,
// scaled so that the largest fills the width and coloured per format; the scores summed per
// layer on a log scale; the model, formats and calibration settings; the table of rows.
std::string sensitivity_report_html(const SensitivityReport& report);

// One point of the error-vs-bits curve: a plan solved for some byte budget.
struct ErrorCurvePoint {
  double bits = 0;       // average bits per weight of the units' Linears, scales included
  uint64_t bytes = 0;    // the units' Linear bytes
  double error = 0;      // total predicted error (the solver's objective)
};

struct PlanReportUnit {
  std::string unit;    // decision unit name
  std::string format;  // chosen FormatChoice::name(), "keep" included
  double bits = 0;
  uint64_t bytes = 0;
  double predicted_error = 0;
};

struct KeptModule {
  std::string name;
  std::string reason;
};

// What the --auto plan page shows.
struct AutoPlanReport {
  SensitivityReport sensitivity;       // the scores the plan was solved on
  std::string target;                  // "--target-bits 5"
  std::string solved;                  // the summary's sentence: constraint, budget, reached
  std::string measure;                 // what predicted error measures, in words
  double target_bits = 0;              // the target's byte budget as bits per weight (x axis)
  std::vector<ErrorCurvePoint> curve;  // ascending bits; includes `chosen`
  ErrorCurvePoint chosen;
  std::vector<PlanReportUnit> units;   // one row per decision unit, in model order
  std::vector<KeptModule> kept;        // modules left unquantized and why (may be empty)
};

// A complete HTML document for `quantize --auto --html`: the error-vs-bits curve (an SVG line
// with a dot per solved budget) with the chosen point marked and the target drawn as a dashed
// line, the chosen plan (unit, format, bits, bytes, predicted error), the modules kept, the
// sensitivity bars with the chosen format outlined, and the settings.
std::string auto_plan_report_html(const AutoPlanReport& report);


}  // namespace qf

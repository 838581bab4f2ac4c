// The charts of the HTML reports as inline SVG: horizontal bars (one per item, sorted by the
// caller), bars grouped per layer on a log scale, and a line of points with one point marked and
// a vertical target line. Every text is escaped here; the caller passes plain text.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

namespace qf {

// The colour of series i (a format), fixed per index so that bars and legend agree; cycles
// after 8 series.
const char* series_color(size_t i);

// HTML: one coloured key per series name, in order.
std::string html_legend(const std::vector<std::string>& series);

struct HBar {
  std::string label;       // left of the bar, right-aligned
  std::string tag;         // a short second label in its own column before the bar (a format)
  size_t series = 0;       // colour (series_color)
  double value = 0;        // length; non-finite or negative draws no bar
  std::string value_text;  // right of the bar's end
  bool highlight = false;  // outlined and its label bold (e.g. the format a plan chose)
};

// One horizontal bar per entry, top to bottom in the given order, on a linear scale from 0 at
// the left edge of the bars to the largest value filling `bar_width` pixels; the label column
// and tag columns are as wide as their longest text. Height grows with the number of bars (18 px each).
std::string svg_hbars(const std::vector<HBar>& bars, int bar_width, const std::string& aria_label);

struct GroupedBars {
  std::vector<std::string> groups;          // x axis, left to right (e.g. layer numbers)
  std::vector<std::string> series;          // bars within a group, coloured by index
  std::vector<std::vector<double>> values;  // [group][series]; <= 0 or non-finite: no bar
  std::string x_label, y_label;
};

// Vertical bars per group on a log10 y axis with a labelled line per decade; groups share
// `width` (bars at most 40 px wide), the plot area is `plot_height` pixels high.
std::string svg_grouped_log_bars(const GroupedBars& chart, int width, int plot_height,
                                 const std::string& aria_label);

struct ChartPoint {
  double x = 0, y = 0;
  std::string title;  // tooltip
};

struct LineChart {
  std::vector<ChartPoint> points;   // joined by a line in the given order, each drawn as a dot
  std::optional<ChartPoint> marked;  // drawn larger and labelled with marked_label
  std::string marked_label;
  std::optional<double> target_x;    // a dashed vertical line labelled with target_label
  std::string target_label;
  bool log_x = false;                // x values must be > 0 when set
  std::string x_label, y_label;
  int width = 900, height = 420;
};

// The y axis starts at 0; the x axis spans the points, the marked point and the target line.
std::string svg_line_chart(const LineChart& chart, const std::string& aria_label);

}  // namespace qf

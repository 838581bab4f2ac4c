// SVG charts for the HTML reports. Sizes are in pixels at the SVG's natural size; text widths
// are estimated from the character count (labels are monospace) since nothing measures text
// without a browser.
#include "plan/report_svg.h"

#include "core/html.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace qf {

namespace {

// Dark enough to read as text on white (format tags are drawn in their bar's colour).
constexpr const char* kColors[] = {"#4e79a7", "#f28e2b", "#59a14f", "#e15759",
                                   "#b07aa1", "#9c755f", "#499894", "#b8860b"};
constexpr double kMonoCharWidth = 7.3;  // 12 px monospace

// A round step that cuts `range` into about `n` intervals.
double nice_step(double range, int n) {
  if (!(range > 0)) return 1;
  const double raw = range / n;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  const double norm = raw / mag;
  return (norm < 1.5 ? 1 : norm < 3 ? 2 : norm < 7 ? 5 : 10) * mag;
}

// Tick values for a log axis over [lo, hi] (> 0): 1-2-3-4-5-6-8 per decade, thinned to 1-2-5
// when that gives too many.
std::vector<double> log_ticks(double lo, double hi) {
  auto with = [&](std::initializer_list<double> mantissas) {
    std::vector<double> out;
    for (double e = std::floor(std::log10(lo)); e <= std::ceil(std::log10(hi)); e += 1)
      for (double m : mantissas) {
        const double v = m * std::pow(10.0, e);
        if (v >= lo * (1 - 1e-9) && v <= hi * (1 + 1e-9)) out.push_back(v);
      }
    return out;
  };
  std::vector<double> t = with({1, 1.5, 2, 3, 4, 5, 6, 8});
  if (t.size() > 12) t = with({1, 2, 5});
  if (t.size() > 12) t = with({1});
  return t;
}

}  // namespace

const char* series_color(size_t i) { return kColors[i % (sizeof(kColors) / sizeof(kColors[0]))]; }

std::string html_legend(const std::vector<std::string>& series) {
  std::string out = "<div class=\"legend\">\n";
  for (size_t i = 0; i < series.size(); ++i)
    out += fmt::format(
        "<span class=\"key\"><span class=\"sw\" style=\"background:{}\"></span>{}</span>\n",
        series_color(i), escape_html(series[i]));
  return out + "</div>\n";
}

std::string svg_hbars(const std::vector<HBar>& bars, int bar_width, const std::string& aria_label) {
  size_t label_chars = 4, tag_chars = 0;
  double max_v = 0;
  for (const HBar& b : bars) {
    label_chars = std::max(label_chars, b.label.size());
    tag_chars = std::max(tag_chars, b.tag.size());
    if (std::isfinite(b.value)) max_v = std::max(max_v, b.value);
  }
  const int row_h = 18, pad = 4, value_w = 110;
  const int tag_w = tag_chars ? int(double(tag_chars) * kMonoCharWidth) + 12 : 0;
  const int label_w = int(double(label_chars) * kMonoCharWidth) + 12 + tag_w;
  const int width = label_w + bar_width + value_w;
  const int height = pad * 2 + row_h * std::max<int>(1, int(bars.size()));
  std::string svg = fmt::format(
      "<svg width=\"{}\" height=\"{}\" role=\"img\" aria-label=\"{}\">\n", width, height,
      escape_html(aria_label));
  for (size_t i = 0; i < bars.size(); ++i) {
    const HBar& b = bars[i];
    const int y = pad + int(i) * row_h;
    if (i % 2 == 1)  // zebra rows guide the eye from label to bar
      svg += fmt::format("<rect x=\"0\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"#f5f5f5\"/>\n",
                         y, width, row_h);
    const char* bold = b.highlight ? " font-weight=\"bold\"" : "";
    svg += fmt::format("<text x=\"{}\" y=\"{}\" class=\"bl\" text-anchor=\"end\"{}>{}</text>\n",
                       label_w - tag_w - 6, y + 13, bold, escape_html(b.label));
    if (!b.tag.empty())
      svg += fmt::format("<text x=\"{}\" y=\"{}\" class=\"bl\" style=\"fill:{}\"{}>{}</text>\n",
                         label_w - tag_w + 2, y + 13, series_color(b.series), bold,
                         escape_html(b.tag));
    double w = 0;
    if (std::isfinite(b.value) && b.value > 0 && max_v > 0)
      w = std::max(1.0, b.value / max_v * bar_width);
    if (w > 0)
      svg += fmt::format(
          "<rect x=\"{}\" y=\"{}\" width=\"{:.1f}\" height=\"{}\" fill=\"{}\"{}><title>{}: {}"
          "</title></rect>\n",
          label_w, y + 2, w, row_h - 4, series_color(b.series),
          b.highlight ? " stroke=\"#000\" stroke-width=\"2\"" : "",
          escape_html(b.label + (b.tag.empty() ? "" : " " + b.tag)), escape_html(b.value_text));
    svg += fmt::format("<text x=\"{:.1f}\" y=\"{}\" class=\"bv\">{}</text>\n", label_w + w + 5,
                       y + 13, escape_html(b.value_text));
  }
  svg += fmt::format("<line x1=\"{0}\" y1=\"{1}\" x2=\"{0}\" y2=\"{2}\" stroke=\"#333\"/>\n",
                     label_w, pad, height - pad);
  return svg + "</svg>\n";
}

std::string svg_grouped_log_bars(const GroupedBars& c, int width, int plot_height,
                                 const std::string& aria_label) {
  double lo = INFINITY, hi = 0;
  for (const auto& g : c.values)
    for (double v : g)
      if (std::isfinite(v) && v > 0) {
        lo = std::min(lo, v);
        hi = std::max(hi, v);
      }
  const double llo = std::isfinite(lo) ? std::floor(std::log10(lo)) : 0.0;
  const double lhi = hi > 0 ? std::max(std::ceil(std::log10(hi)), llo + 1) : 1.0;
  const int left = 70, right = 20, top = 16, bottom = 56;
  const int height = top + plot_height + bottom;
  const double plot_w = width - left - right;
  const size_t ng = std::max<size_t>(1, c.groups.size()), ns = std::max<size_t>(1, c.series.size());
  const double group_w = plot_w / double(ng);
  const double bar_w = std::clamp(group_w * 0.8 / double(ns), 2.0, 40.0);
  auto y_of = [&](double v) {
    const double f = std::clamp((std::log10(v) - llo) / (lhi - llo), 0.0, 1.0);
    return top + plot_height - f * plot_height;
  };
  std::string svg = fmt::format(
      "<svg width=\"{}\" height=\"{}\" role=\"img\" aria-label=\"{}\">\n", width, height,
      escape_html(aria_label));
  for (double e = llo; e <= lhi; e += 1) {
    const double y = top + plot_height - (e - llo) / (lhi - llo) * plot_height;
    svg += fmt::format(
        "<line x1=\"{}\" y1=\"{:.1f}\" x2=\"{}\" y2=\"{:.1f}\" stroke=\"#ddd\"/><text x=\"{}\" "
        "y=\"{:.1f}\" class=\"ax\" text-anchor=\"end\">1e{:.0f}</text>\n",
        left, y, width - right, y, left - 6, y + 4, e);
  }
  // Label every k-th group so that labels never overlap (about 28 px each).
  const size_t every = std::max<size_t>(1, size_t(std::ceil(28.0 / group_w)));
  for (size_t g = 0; g < c.groups.size(); ++g) {
    const double gx = left + double(g) * group_w + (group_w - bar_w * double(ns)) / 2;
    for (size_t s = 0; s < ns && g < c.values.size() && s < c.values[g].size(); ++s) {
      const double v = c.values[g][s];
      if (!std::isfinite(v) || v <= 0) continue;
      const double y = y_of(v);
      svg += fmt::format(
          "<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" fill=\"{}\"><title>"
          "{} {}, {}: {:.4g}</title></rect>\n",
          gx + double(s) * bar_w, y, std::max(1.0, bar_w - 1), std::max(1.0, top + plot_height - y),
          series_color(s), escape_html(c.x_label), escape_html(c.groups[g]),
          s < c.series.size() ? escape_html(c.series[s]) : std::string(), v);
    }
    if (g % every == 0)
      svg += fmt::format("<text x=\"{:.1f}\" y=\"{}\" class=\"ax\" text-anchor=\"middle\">{}</text>\n",
                         left + (double(g) + 0.5) * group_w, top + plot_height + 16,
                         escape_html(c.groups[g]));
  }
  svg += fmt::format("<line x1=\"{0}\" y1=\"{1}\" x2=\"{0}\" y2=\"{2}\" stroke=\"#333\"/>\n", left,
                     top, top + plot_height);
  svg += fmt::format("<line x1=\"{0}\" y1=\"{1}\" x2=\"{2}\" y2=\"{1}\" stroke=\"#333\"/>\n", left,
                     top + plot_height, width - right);
  svg += fmt::format(
      "<text x=\"{:.1f}\" y=\"{}\" class=\"ax\" text-anchor=\"middle\">{}</text>\n"
      "<text x=\"16\" y=\"{:.1f}\" class=\"ax\" text-anchor=\"middle\" transform=\"rotate(-90 16 "
      "{:.1f})\">{}</text>\n",
      left + plot_w / 2, height - 14, escape_html(c.x_label), top + plot_height / 2.0,
      top + plot_height / 2.0, escape_html(c.y_label));
  return svg + "</svg>\n";
}

std::string svg_line_chart(const LineChart& c, const std::string& aria_label) {
  const int left = 80, right = 40, top = 36, bottom = 56;
  const double pw = c.width - left - right, ph = c.height - top - bottom;
  auto tx = [&](double x) { return c.log_x ? std::log10(x) : x; };
  double xlo = INFINITY, xhi = -INFINITY, yhi = 0;
  auto take = [&](const ChartPoint& p) {
    if (!std::isfinite(p.x) || (c.log_x && p.x <= 0)) return;
    xlo = std::min(xlo, p.x);
    xhi = std::max(xhi, p.x);
    if (std::isfinite(p.y)) yhi = std::max(yhi, p.y);
  };
  for (const ChartPoint& p : c.points) take(p);
  if (c.marked) take(*c.marked);
  if (c.target_x && std::isfinite(*c.target_x) && (!c.log_x || *c.target_x > 0)) {
    xlo = std::min(xlo, *c.target_x);
    xhi = std::max(xhi, *c.target_x);
  }
  if (!std::isfinite(xlo)) xlo = xhi = 1;
  if (xhi <= xlo) {
    xlo = c.log_x ? xlo / 2 : xlo - 1;
    xhi = c.log_x ? xhi * 2 : xhi + 1;
  }
  const double pad = (tx(xhi) - tx(xlo)) * 0.03;
  const double a = tx(xlo) - pad, b = tx(xhi) + pad;
  const double ystep = nice_step(yhi > 0 ? yhi : 1, 5);
  const double ymax = std::ceil((yhi > 0 ? yhi * 1.08 : 1) / ystep) * ystep;
  auto X = [&](double x) { return left + (tx(x) - a) / (b - a) * pw; };
  auto Y = [&](double y) { return top + ph - std::clamp(y / ymax, 0.0, 1.0) * ph; };

  std::string svg = fmt::format(
      "<svg width=\"{}\" height=\"{}\" role=\"img\" aria-label=\"{}\">\n", c.width, c.height,
      escape_html(aria_label));
  for (double y = 0; y <= ymax * (1 + 1e-9); y += ystep)
    svg += fmt::format(
        "<line x1=\"{}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#e4e4e4\"/><text "
        "x=\"{}\" y=\"{:.1f}\" class=\"ax\" text-anchor=\"end\">{:.3g}</text>\n",
        left, Y(y), left + pw, Y(y), left - 6, Y(y) + 4, y);
  std::vector<double> xt;
  if (c.log_x) {
    xt = log_ticks(std::pow(10.0, a), std::pow(10.0, b));
  } else {
    const double s = nice_step(b - a, 8);
    for (double x = std::ceil(a / s) * s; x <= b; x += s) xt.push_back(x);
  }
  for (double x : xt)
    svg += fmt::format(
        "<line x1=\"{0:.1f}\" y1=\"{1}\" x2=\"{0:.1f}\" y2=\"{2:.1f}\" stroke=\"#e4e4e4\"/><text "
        "x=\"{0:.1f}\" y=\"{3:.1f}\" class=\"ax\" text-anchor=\"middle\">{4:.3g}</text>\n",
        X(x), top, top + ph, top + ph + 18, x);
  svg += fmt::format("<line x1=\"{0}\" y1=\"{1}\" x2=\"{0}\" y2=\"{2:.1f}\" stroke=\"#333\"/>\n",
                     left, top, top + ph);
  svg += fmt::format("<line x1=\"{0}\" y1=\"{1:.1f}\" x2=\"{2:.1f}\" y2=\"{1:.1f}\" stroke=\"#333\"/>\n",
                     left, top + ph, left + pw);

  if (c.target_x && std::isfinite(*c.target_x) && (!c.log_x || *c.target_x > 0)) {
    const double x = X(*c.target_x);
    const bool right_half = x > left + pw * 0.6;
    svg += fmt::format(
        "<line x1=\"{0:.1f}\" y1=\"{1}\" x2=\"{0:.1f}\" y2=\"{2:.1f}\" stroke=\"#555\" "
        "stroke-width=\"1.5\" stroke-dasharray=\"6 4\" class=\"target\"/>\n<text x=\"{3:.1f}\" "
        "y=\"{4}\" class=\"tg\" text-anchor=\"{5}\">{6}</text>\n",
        x, top - 8, top + ph, right_half ? x - 6 : x + 6, top - 12, right_half ? "end" : "start",
        escape_html(c.target_label));
  }
  std::string path;
  for (const ChartPoint& p : c.points) {
    if (!std::isfinite(p.x) || !std::isfinite(p.y) || (c.log_x && p.x <= 0)) continue;
    path += fmt::format("{:.1f},{:.1f} ", X(p.x), Y(p.y));
  }
  if (!path.empty())
    svg += "<polyline points=\"" + path + "\" fill=\"none\" stroke=\"#4e79a7\" stroke-width=\"2\"/>\n";
  for (const ChartPoint& p : c.points) {
    if (!std::isfinite(p.x) || !std::isfinite(p.y) || (c.log_x && p.x <= 0)) continue;
    svg += fmt::format(
        "<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"3.5\" fill=\"#4e79a7\"><title>{}</title></circle>\n",
        X(p.x), Y(p.y), escape_html(p.title));
  }
  if (c.marked && std::isfinite(c.marked->x) && std::isfinite(c.marked->y)) {
    const double x = X(c.marked->x), y = Y(c.marked->y);
    const bool right_half = x > left + pw * 0.6;
    svg += fmt::format(
        "<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"7\" fill=\"#c0392b\" stroke=\"#fff\" "
        "stroke-width=\"2\" class=\"chosen\"><title>{}</title></circle>\n<text x=\"{:.1f}\" "
        "y=\"{:.1f}\" class=\"mk\" text-anchor=\"{}\">{}</text>\n",
        x, y, escape_html(c.marked->title), right_half ? x - 12 : x + 12, y - 10,
        right_half ? "end" : "start", escape_html(c.marked_label));
  }
  svg += fmt::format(
      "<text x=\"{:.1f}\" y=\"{}\" class=\"ax\" text-anchor=\"middle\">{}</text>\n"
      "<text x=\"16\" y=\"{:.1f}\" class=\"ax\" text-anchor=\"middle\" transform=\"rotate(-90 16 "
      "{:.1f})\">{}</text>\n",
      left + pw / 2, c.height - 12, escape_html(c.x_label), top + ph / 2, top + ph / 2,
      escape_html(c.y_label));
  return svg + "</svg>\n";
}

}  // namespace qf

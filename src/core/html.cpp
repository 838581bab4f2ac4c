#include "core/html.h"

namespace qf {

std::string escape_html(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string html_page(const std::string& title, const std::string& body) {
  std::string html = "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n";
  html += "<title>" + escape_html(title) + "</title>\n";
  // Chart text sizes are in SVG user units and the SVGs are drawn at their natural size, so
  // 12-13 px text stays 12-13 px on screen.
  html +=
      "<style>\n"
      "body{font-family:system-ui,sans-serif;margin:2em;color:#222;max-width:1400px}\n"
      "h2{margin-top:1.6em}\n"
      "table{border-collapse:collapse;font-size:14px}\n"
      "th,td{border:1px solid #ccc;padding:3px 10px}\n"
      "th{background:#f0f0f0;text-align:left}\n"
      "td.n{text-align:right;font-family:monospace}\n"
      "tr.keep td{color:#666}\n"
      "table.settings th{width:14em}\n"
      "svg{display:block;margin:0.5em 0}\n"
      ".ax{font-size:12px;fill:#444}\n"
      ".lb{font-size:12px;fill:#1f77b4}\n"
      ".bl{font-size:12px;font-family:monospace;fill:#222}\n"
      ".bv{font-size:11px;font-family:monospace;fill:#444}\n"
      ".mk{font-size:13px;font-weight:bold;fill:#c0392b}\n"
      ".tg{font-size:13px;fill:#555}\n"
      ".key{margin-right:1.5em;font-size:14px}\n"
      ".sw{display:inline-block;width:14px;height:14px;margin-right:5px;vertical-align:middle}\n"
      "</style>\n</head>\n<body>\n";
  html += body;
  html += "</body>\n</html>\n";
  return html;
}

std::string html_settings_table(const std::vector<std::pair<std::string, std::string>>& rows) {
  std::string out = "<table class=\"settings\">\n<tbody>\n";
  for (const auto& [name, value] : rows)
    out += "<tr><th>" + escape_html(name) + "</th><td>" + value + "</td></tr>\n";
  out += "</tbody>\n</table>\n";
  return out;
}

}  // namespace qf

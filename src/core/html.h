// Text and page scaffolding for the HTML reports (sensitivity, --auto plan, compare): every page
// is one self-contained file with inline CSS and SVG, no scripts and no external references.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace qf {

// `s` with & < > " ' replaced by their character references, safe in element text and in
// quoted attribute values.
std::string escape_html(const std::string& s);

// A complete UTF-8 HTML document: `title` (escaped) as its title, the reports' shared stylesheet,
// and `body` (HTML, inserted as given) as its body.
std::string html_page(const std::string& title, const std::string& body);

// A two-column table of settings: each name (escaped) with its value (HTML, inserted as given:
// escape text with escape_html first).
std::string html_settings_table(const std::vector<std::pair<std::string, std::string>>& rows);

}  // namespace qf

// Text for HTML reports.
#pragma once

#include <string>

namespace qf {

// `s` with & < > " ' replaced by their character references, safe in element text and in
// quoted attribute values.
std::string escape_html(const std::string& s);

}  // namespace qf

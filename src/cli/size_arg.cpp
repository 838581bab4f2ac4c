// Human size arguments ("5GB", "512MiB") for --max-shard-size and friends.
#include "cli/commands.h"
#include "core/error.h"

#include <cctype>
#include <cmath>

namespace qf::cli {

uint64_t parse_size(const std::string& text) {
  size_t pos = 0;
  double value = 0;
  try {
    value = std::stod(text, &pos);
  } catch (const std::exception&) {
    fail("'{}' is not a size (examples: 5GB, 500MB, 2GiB, 1000000)", text);
  }
  std::string unit;
  for (char c : text.substr(pos))
    if (!std::isspace(static_cast<unsigned char>(c))) unit += char(std::toupper(c));
  double mult = 0;
  if (unit.empty() || unit == "B") mult = 1;
  else if (unit == "KB" || unit == "K") mult = 1e3;
  else if (unit == "MB" || unit == "M") mult = 1e6;
  else if (unit == "GB" || unit == "G") mult = 1e9;
  else if (unit == "TB" || unit == "T") mult = 1e12;
  else if (unit == "KIB") mult = 1024.0;
  else if (unit == "MIB") mult = 1024.0 * 1024;
  else if (unit == "GIB") mult = 1024.0 * 1024 * 1024;
  else if (unit == "TIB") mult = 1024.0 * 1024 * 1024 * 1024;
  else fail("'{}' has an unknown size unit '{}' (use B, KB, MB, GB, TB, KiB, MiB, GiB, TiB)", text, unit);
  const double bytes = value * mult;
  if (!(bytes > 0) || !std::isfinite(bytes) || bytes > 1e18) fail("'{}' is not a positive size", text);
  // A fraction of a byte would round to 0, which callers take as a size to divide by.
  if (bytes < 0.5) fail("'{}' is less than one byte", text);
  return uint64_t(std::llround(bytes));
}

}  // namespace qf::cli

// A range check for floating-point flags that also refuses NaN and infinities: CLI11's Range
// compares with < and >, which NaN passes, so `--temp nan` once sampled garbage.
#include "cli/commands.h"

#include <fmt/format.h>

#include <cmath>
#include <cstdlib>

namespace qf::cli {

CLI::Validator finite_range(double lo, double hi) {
  return CLI::Validator(
      [lo, hi](std::string& value) {
        char* end = nullptr;
        const double v = std::strtod(value.c_str(), &end);
        if (value.empty() || *end != '\0' || !std::isfinite(v) || v < lo || v > hi)
          return fmt::format("'{}' is not a number from {} to {}", value, lo, hi);
        return std::string();
      },
      fmt::format("NUMBER in [{} - {}]", lo, hi));
}

}  // namespace qf::cli

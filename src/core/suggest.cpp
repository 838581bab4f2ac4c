#include "core/suggest.h"

#include <algorithm>
#include <cctype>

namespace qf {

size_t edit_distance(std::string_view a, std::string_view b) {
  auto lower = [](char c) { return char(std::tolower(static_cast<unsigned char>(c))); };
  // Optimal string alignment: a swap of two neighbours ("gtpq") is one typo, not two.
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i)
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t cost = lower(a[i - 1]) == lower(b[j - 1]) ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && lower(a[i - 1]) == lower(b[j - 2]) && lower(a[i - 2]) == lower(b[j - 1]))
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  return d[a.size()][b.size()];
}

std::string closest_name(std::string_view given, std::span<const std::string> choices) {
  // A third of the name: "nvfp5" -> nvfp4, "quantise" -> quantize, but "x" suggests nothing.
  const size_t limit = std::max<size_t>(1, given.size() / 3);
  std::string best;
  size_t best_distance = limit + 1;
  for (const std::string& c : choices) {
    const size_t d = edit_distance(given, c);
    if (d < best_distance) {
      best = c;
      best_distance = d;
    }
  }
  return best;
}

std::string unknown_name_message(std::string_view what, std::string_view given,
                                 std::span<const std::string> choices) {
  std::string m = "unknown " + std::string(what) + " '" + std::string(given) + "'";
  if (const std::string c = closest_name(given, choices); !c.empty())
    m += "; did you mean '" + c + "'?";
  m += " (choices: ";
  for (size_t i = 0; i < choices.size(); ++i) m += (i ? ", " : "") + choices[i];
  return m + ")";
}

}  // namespace qf

// Module-name patterns as checkpoint configs and qforge recipes write them: an exact name, a
// shell glob (fnmatch: '*' crosses dots), or "re:" followed by a regular expression.
//
// Regexes run on PCRE2 (Perl syntax, which is what Python's `re` accepts for every pattern a
// config plausibly holds) with a backtracking budget: a pattern such as "(a+)+$" taken from
// an untrusted config cannot hang the program (std::regex could, on "re:.**ate.*").
#pragma once

#include <memory>
#include <string>
#include <string_view>

namespace qf {

class NamePattern {
 public:
  // How a "re:" pattern is anchored: `prefix` as Python's re.match (compressed-tensors and
  // vLLM match `ignore` / `targets` this way), `whole` as re.fullmatch (qforge recipes).
  enum class Anchor { prefix, whole };

  // Throws qf::Error "<context>: invalid regex \"P\": <reason> at offset N" when a "re:"
  // pattern does not compile. Globs and names are accepted as written.
  NamePattern(std::string text, Anchor anchor, std::string_view context);

  // True when `name` matches: equal to the text, or the glob matches, or the regex matches
  // (anchored as constructed). Throws qf::Error "<context>: regex \"P\" exceeds its
  // backtracking budget on \"NAME\"" rather than running for minutes. Thread-safe.
  bool matches(std::string_view name) const;

  const std::string& text() const { return text_; }
  bool is_regex() const { return regex_ != nullptr; }

 private:
  std::string text_;
  std::string context_;
  std::shared_ptr<const void> regex_;  // pcre2_code_8, kept out of this header; null for globs
};

}  // namespace qf

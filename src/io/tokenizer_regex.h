// The regular expressions of tokenizer pre-tokenizers (private to src/io/tokenizer*.cpp):
// PCRE2 in UTF mode with Unicode properties, JIT-compiled.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace qf::tok {

class Regex {
 public:
  // Compiles `pattern` with \s, \w, \d and \p{..} by Unicode properties, \s and \w as
  // Oniguruma (the regex engine of Hugging Face tokenizers) defines them: White_Space, and
  // letters, marks, decimal digits and connector punctuation. Throws qf::Error
  // "<context>: ..." if it does not compile.
  Regex(std::string_view pattern, std::string context);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // The [begin, end) byte ranges of the successive non-overlapping matches in `s` (valid
  // UTF-8), leftmost first with Perl's alternation order. An empty match makes the search
  // resume one code point later. Safe to call from several threads.
  std::vector<std::pair<size_t, size_t>> find_all(std::string_view s) const;

 private:
  void* code_ = nullptr;  // pcre2_code_8 (kept out of this header)
  std::string context_;
};

}  // namespace qf::tok

// PCRE2 wrapper for pre-tokenizer regexes.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "io/tokenizer_regex.h"

#include "core/error.h"
#include "io/tokenizer_text.h"

#include <pcre2.h>

#include <memory>

namespace qf::tok {
namespace {

std::string pcre2_message(int code) {
  PCRE2_UCHAR buffer[256];
  const int n = pcre2_get_error_message(code, buffer, sizeof buffer);
  return n < 0 ? fmt::format("PCRE2 error {}", code) : std::string(reinterpret_cast<char*>(buffer));
}

struct MatchData {
  pcre2_match_data* data;
  pcre2_match_context* context = nullptr;
  pcre2_jit_stack* stack = nullptr;
  ~MatchData() {
    pcre2_match_data_free(data);
    pcre2_match_context_free(context);
    pcre2_jit_stack_free(stack);
  }
};

// Oniguruma's (and so Hugging Face's) classes, spelled out: PCRE2's UCP \s also takes U+180E,
// and its \w takes all numbers (\p{N}) but no marks.
constexpr std::string_view kSpace =
    R"(\t\n\x0B\f\r \x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000})";
constexpr std::string_view kWord = R"(\p{L}\p{M}\p{Nd}\p{Pc})";

// `pattern` with \s, \S, \w and \W replaced by explicit classes. Inside a bracket class the
// members are inserted (a negated \S or \W there cannot be, and is left to PCRE2).
std::string translate_classes(std::string_view pattern) {
  std::string out;
  out.reserve(pattern.size() + 64);
  bool in_class = false;
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      const char e = pattern[++i];
      const std::string_view members = e == 's' || e == 'S' ? kSpace : kWord;
      if (e == 's' || e == 'w') {
        if (in_class) out.append(members);
        else out.append("[").append(members).append("]");
      } else if ((e == 'S' || e == 'W') && !in_class) {
        out.append("[^").append(members).append("]");
      } else {
        out += c;
        out += e;
      }
      continue;
    }
    out += c;
    if (!in_class && c == '[') {
      in_class = true;
      // A ']' right after '[' or '[^' is a literal member.
      if (i + 1 < pattern.size() && pattern[i + 1] == '^') out += pattern[++i];
      if (i + 1 < pattern.size() && pattern[i + 1] == ']') out += pattern[++i];
    } else if (in_class && c == '[' && i + 1 < pattern.size() && pattern[i + 1] == ':') {
      // A POSIX class such as [:alpha:] inside a bracket class.
      const size_t end = pattern.find(":]", i + 2);
      if (end != std::string_view::npos) {
        out.append(pattern.substr(i + 1, end + 2 - (i + 1)));
        i = end + 1;
      }
    } else if (in_class && c == ']') {
      in_class = false;
    }
  }
  return out;
}

}  // namespace

Regex::Regex(std::string_view pattern, std::string context) : context_(std::move(context)) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  const std::string translated = translate_classes(pattern);
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()),
                                   translated.size(), PCRE2_UTF | PCRE2_UCP, &error, &offset,
                                   nullptr);
  if (!code) fail("{}: regex does not compile: {}", context_, pcre2_message(error));
  // Without JIT (an unsupported CPU) matching still works, only slower.
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  code_ = code;
}

Regex::~Regex() { pcre2_code_free(static_cast<pcre2_code*>(code_)); }

std::vector<std::pair<size_t, size_t>> Regex::find_all(std::string_view s) const {
  const auto* code = static_cast<const pcre2_code*>(code_);
  MatchData md{pcre2_match_data_create_from_pattern(code, nullptr)};
  if (!md.data) throw std::bad_alloc();
  std::vector<std::pair<size_t, size_t>> matches;
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(s.data());
  size_t start = 0;
  while (start <= s.size()) {
    // The text was validated once; checking it again at every match would be quadratic.
    int rc = pcre2_match(code, subject, s.size(), start, PCRE2_NO_UTF_CHECK, md.data, md.context);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT && !md.stack) {
      // Long runs under a look-ahead can outgrow the default 32 KiB JIT stack.
      md.context = pcre2_match_context_create(nullptr);
      md.stack = pcre2_jit_stack_create(32 * 1024, 64 * 1024 * 1024, nullptr);
      if (!md.context || !md.stack) throw std::bad_alloc();
      pcre2_jit_stack_assign(md.context, nullptr, md.stack);
      rc = pcre2_match(code, subject, s.size(), start, PCRE2_NO_UTF_CHECK, md.data, md.context);
    }
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) fail("{}: regex match failed: {}", context_, pcre2_message(rc));
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(md.data);
    const size_t begin = ovector[0], end = ovector[1];
    if (end > begin) {
      matches.emplace_back(begin, end);
      start = end;
    } else {
      if (begin >= s.size()) break;
      start = begin + utf8_length(static_cast<unsigned char>(s[begin]));
    }
  }
  return matches;
}

}  // namespace qf::tok

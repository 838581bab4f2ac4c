// PCRE2-backed module-name patterns.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "core/name_pattern.h"

#include "core/error.h"

#include <fnmatch.h>
#include <pcre2.h>

namespace qf {
namespace {

// Module names are at most a few hundred bytes; a legitimate pattern needs a few thousand
// backtracking steps on them. The budget stops catastrophic patterns within milliseconds.
constexpr uint32_t kMatchLimit = 200'000;
constexpr uint32_t kDepthLimit = 10'000;

std::string pcre2_message(int code) {
  PCRE2_UCHAR buffer[256];
  const int n = pcre2_get_error_message(code, buffer, sizeof buffer);
  return n < 0 ? fmt::format("PCRE2 error {}", code) : std::string(reinterpret_cast<char*>(buffer));
}

}  // namespace

NamePattern::NamePattern(std::string text, Anchor anchor, std::string_view context)
    : text_(std::move(text)), context_(context) {
  if (text_.rfind("re:", 0) != 0) return;
  const std::string_view body = std::string_view(text_).substr(3);
  int error = 0;
  PCRE2_SIZE offset = 0;
  const uint32_t options = PCRE2_ANCHORED | (anchor == Anchor::whole ? PCRE2_ENDANCHORED : 0);
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(body.data()), body.size(),
                                   options, &error, &offset, nullptr);
  if (!code)
    fail("{}: invalid regex \"{}\": {} at offset {}", context_, body, pcre2_message(error),
         size_t(offset));
  regex_ = std::shared_ptr<const void>(code, [](const void* p) {
    pcre2_code_free(static_cast<pcre2_code*>(const_cast<void*>(p)));
  });
}

bool NamePattern::matches(std::string_view name) const {
  if (name == text_) return true;
  if (!regex_) return fnmatch(text_.c_str(), std::string(name).c_str(), 0) == 0;
  const auto* code = static_cast<const pcre2_code*>(regex_.get());
  struct Scratch {
    pcre2_match_data* data;
    pcre2_match_context* context;
    ~Scratch() {
      pcre2_match_data_free(data);
      pcre2_match_context_free(context);
    }
  } scratch{pcre2_match_data_create_from_pattern(code, nullptr), pcre2_match_context_create(nullptr)};
  if (!scratch.data || !scratch.context) fail("{}: out of memory matching a regex", context_);
  pcre2_set_match_limit(scratch.context, kMatchLimit);
  pcre2_set_depth_limit(scratch.context, kDepthLimit);
  const int rc = pcre2_match(code, reinterpret_cast<PCRE2_SPTR>(name.data()), name.size(), 0, 0,
                             scratch.data, scratch.context);
  if (rc >= 0) return true;
  if (rc == PCRE2_ERROR_NOMATCH) return false;
  if (rc == PCRE2_ERROR_MATCHLIMIT || rc == PCRE2_ERROR_DEPTHLIMIT || rc == PCRE2_ERROR_HEAPLIMIT)
    fail("{}: regex \"{}\" exceeds its backtracking budget on \"{}\"", context_,
         std::string_view(text_).substr(3), name);
  fail("{}: regex \"{}\" failed on \"{}\": {}", context_, std::string_view(text_).substr(3), name,
       pcre2_message(rc));
}

}  // namespace qf

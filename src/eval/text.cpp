// Reading evaluation text with UTF-8 validation and truncation by code points.
#include "eval/text.h"

#include "core/error.h"

#include "core/mapped_file.h"
#include "io/tokenizer.h"

namespace qf {
namespace {

// Length of the well-formed UTF-8 sequence at s[i], or 0 (overlong, surrogate, > U+10FFFF,
// truncated).
size_t utf8_sequence(const std::string& s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = b(i);
  if (c < 0x80) return 1;
  size_t n;
  uint32_t cp;
  if (c >= 0xC2 && c <= 0xDF) n = 2, cp = c & 0x1F;
  else if (c >= 0xE0 && c <= 0xEF) n = 3, cp = c & 0x0F;
  else if (c >= 0xF0 && c <= 0xF4) n = 4, cp = c & 0x07;
  else return 0;
  if (i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    if ((b(i + k) & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (b(i + k) & 0x3F);
  }
  if ((n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 || cp > 0x10FFFF)) ||
      (cp >= 0xD800 && cp <= 0xDFFF))
    return 0;
  return n;
}

}  // namespace

std::string read_eval_text(const std::filesystem::path& path, int64_t max_chars) {
  std::string text = read_regular_file(path, "the evaluation text", uint64_t(1) << 30);
  int64_t chars = 0;
  size_t i = 0;
  while (i < text.size()) {
    if (max_chars > 0 && chars == max_chars) {
      text.resize(i);
      break;
    }
    const size_t n = utf8_sequence(text, i);
    if (n == 0)
      fail("{}: not valid UTF-8 (byte 0x{:02X} at offset {})", path.string(),
           static_cast<unsigned char>(text[i]), i);
    i += n;
    ++chars;
  }
  return text;
}

std::vector<int32_t> eval_text_ids(const std::filesystem::path& path, int64_t max_chars,
                                   const Tokenizer& tokenizer) {
  return tokenizer.encode(read_eval_text(path, max_chars), tokenizer.bos_id() >= 0);
}

}  // namespace qf

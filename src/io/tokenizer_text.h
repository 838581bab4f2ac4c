// UTF-8 and Unicode helpers of the tokenizers (private to src/io/tokenizer*.cpp): validation,
// code points, normalization forms, GPT-2's byte-level alphabet, whitespace and word classes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace qf::tok {

inline constexpr size_t kValidUtf8 = std::string_view::npos;

// Offset of the first byte of `s` that does not start a well-formed UTF-8 sequence (overlong
// forms, surrogates and values above U+10FFFF are ill-formed), or kValidUtf8.
size_t invalid_utf8_offset(std::string_view s);

// Byte length of the sequence that starts with `lead` in valid UTF-8.
inline size_t utf8_length(unsigned char lead) {
  return lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;
}
// The code point at s[i] of valid UTF-8; advances i past it.
char32_t next_code_point(std::string_view s, size_t& i);
void append_utf8(std::string& out, char32_t cp);

// `s` with each maximal ill-formed subsequence replaced by U+FFFD (Rust's from_utf8_lossy,
// which Hugging Face decoders use).
std::string utf8_lossy(std::string_view s);

enum class NormalForm { kNFC, kNFD, kNFKC, kNFKD };
// `s` (valid UTF-8) in the given normalization form.
std::string normalize_unicode(std::string_view s, NormalForm form);
// `s` (valid UTF-8) with each code point mapped to its simple lowercase.
std::string lowercase(std::string_view s);

// Unicode White_Space (what regex \s matches).
bool is_whitespace(char32_t cp);
// Regex \w: letters, marks, decimal digits, connector punctuation.
bool is_word_char(char32_t cp);

// GPT-2's byte-level alphabet: every byte as a printable code point ('Ġ' for the space).
char32_t byte_to_unicode(uint8_t b);
// The byte a code point of that alphabet stands for, or -1.
int unicode_to_byte(char32_t cp);

// All non-overlapping occurrences of `from` (non-empty) in `s` replaced by `to`.
std::string replace_all(std::string_view s, std::string_view from, std::string_view to);

}  // namespace qf::tok

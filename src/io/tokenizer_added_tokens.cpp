// Added-token matching (a byte trie, leftmost-longest) and the decoding shared by every
// tokenizer kind.
#include "core/error.h"
#include "io/io_util.h"
#include "io/tokenizer_internal.h"
#include "io/tokenizer_text.h"

#include <algorithm>

namespace qf::tok {
namespace {

bool get_flag(const nlohmann::json& j, const char* key, bool fallback, const std::string& context) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) fail("{}: added token field \"{}\" is not a boolean", context, key);
  return it->get<bool>();
}

// The code point that ends s[..end) (valid UTF-8), or 0 at the start.
char32_t code_point_before(std::string_view s, size_t end) {
  if (end == 0) return 0;
  size_t i = end - 1;
  while (i > 0 && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80) --i;
  return next_code_point(s, i);
}

}  // namespace

AddedToken parse_added_token(const nlohmann::json& j, int32_t id, const std::string& context) {
  if (!j.is_object()) fail("{}: an added token is not an object", context);
  AddedToken t;
  const auto content = j.find("content");
  if (content == j.end() || !content->is_string() || content->get<std::string>().empty())
    fail("{}: an added token has no \"content\" string", context);
  t.content = content->get<std::string>();
  if (invalid_utf8_offset(t.content) != kValidUtf8)
    fail("{}: added token {} is not valid UTF-8", context, quote_name(t.content));
  if (id < 0) {
    const auto it = j.find("id");
    if (it == j.end() || !it->is_number_integer() || it->get<int64_t>() < 0 ||
        it->get<int64_t>() > kMaxTokenId)
      fail("{}: added token {} has no valid \"id\" (0 to {})", context, quote_name(t.content),
           kMaxTokenId);
    id = static_cast<int32_t>(it->get<int64_t>());
  }
  t.id = id;
  t.single_word = get_flag(j, "single_word", false, context);
  t.lstrip = get_flag(j, "lstrip", false, context);
  t.rstrip = get_flag(j, "rstrip", false, context);
  t.normalized = get_flag(j, "normalized", !get_flag(j, "special", false, context), context);
  t.special = get_flag(j, "special", false, context);
  return t;
}

int32_t AddedTokenMatcher::child(int32_t node, unsigned char byte) const {
  const auto& c = nodes_[size_t(node)].children;
  const auto it = std::lower_bound(c.begin(), c.end(), std::make_pair(byte, int32_t(-1)));
  return it != c.end() && it->first == byte ? it->second : -1;
}

void AddedTokenMatcher::add(std::string_view pattern, const AddedToken& token) {
  if (pattern.empty()) return;
  int32_t node = 0;
  for (const char ch : pattern) {
    const auto byte = static_cast<unsigned char>(ch);
    int32_t next = child(node, byte);
    if (next < 0) {
      next = static_cast<int32_t>(nodes_.size());
      nodes_.emplace_back();
      auto& c = nodes_[size_t(node)].children;
      c.insert(std::lower_bound(c.begin(), c.end(), std::make_pair(byte, int32_t(-1))),
               {byte, next});
    }
    node = next;
  }
  // The same pattern twice keeps the later token, as a map insertion would.
  nodes_[size_t(node)].token = static_cast<int32_t>(tokens_.size());
  tokens_.push_back(token);
  first_byte_[static_cast<unsigned char>(pattern[0])] = true;
}

void AddedTokenMatcher::split(std::string_view s, std::vector<Segment>& out) const {
  size_t done = 0;  // end of the last token segment
  size_t pos = 0;   // where the search resumes
  while (pos < s.size()) {
    if (!first_byte_[static_cast<unsigned char>(s[pos])]) {
      ++pos;
      continue;
    }
    // Longest token starting at pos.
    int32_t node = 0, found = -1;
    size_t found_end = 0;
    for (size_t i = pos; i < s.size(); ++i) {
      node = child(node, static_cast<unsigned char>(s[i]));
      if (node < 0) break;
      if (nodes_[size_t(node)].token >= 0) {
        found = nodes_[size_t(node)].token;
        found_end = i + 1;
      }
    }
    if (found < 0) {
      ++pos;
      continue;
    }
    const AddedToken& t = tokens_[size_t(found)];
    size_t start = pos, stop = found_end;
    pos = found_end;
    if (t.single_word) {
      const bool word_before = start > 0 && is_word_char(code_point_before(s, start));
      size_t after = stop;
      const bool word_after = stop < s.size() && is_word_char(next_code_point(s, after));
      if (word_before || word_after) continue;
    }
    if (t.lstrip) {
      while (start > done) {
        size_t b = start - 1;
        while (b > done && (static_cast<unsigned char>(s[b]) & 0xC0) == 0x80) --b;
        size_t k = b;
        if (!is_whitespace(next_code_point(s, k))) break;
        start = b;
      }
    }
    if (t.rstrip) {
      while (stop < s.size()) {
        size_t k = stop;
        if (!is_whitespace(next_code_point(s, k))) break;
        stop = k;
      }
      pos = stop;
    }
    if (done < start) out.push_back({done, start, -1});
    out.push_back({start, stop, t.id});
    done = stop;
  }
  if (done < s.size()) out.push_back({done, s.size(), -1});
}

void TokenizerBase::require_input_utf8(std::string_view text) const {
  const size_t bad = invalid_utf8_offset(text);
  if (bad != kValidUtf8)
    fail("{}: cannot encode text that is not valid UTF-8 (byte 0x{:02x} at offset {})", source_,
         static_cast<unsigned char>(text[bad]), bad);
}

void TokenizerBase::check_id(int32_t id) const {
  if (id < 0 || id >= vocab_size())
    fail("{}: token id {} is outside the vocabulary (0..{})", source_, id, vocab_size() - 1);
}

std::string TokenizerBase::piece(int32_t id) const {
  check_id(id);
  return pieces_[size_t(id)];
}

std::string TokenizerBase::decode_next(int32_t previous, int32_t id) const {
  check_id(id);
  const std::string& b = bytes_[size_t(id)];
  if (previous >= 0 && previous != bos_) return b;
  size_t skip = 0;
  while (skip < b.size() && int(skip) < leading_spaces_to_strip_ && b[skip] == ' ') ++skip;
  return b.substr(skip);
}

std::string TokenizerBase::decode(std::span<const int32_t> ids) const {
  std::string out;
  int32_t previous = -1;
  for (const int32_t id : ids) {
    out += decode_next(previous, id);
    previous = id;
  }
  return utf8_lossy(out);
}

}  // namespace qf::tok

namespace qf {

void Tokenizer::require_utf8(std::string_view text, std::string_view source) {
  const size_t bad = tok::invalid_utf8_offset(text);
  if (bad != tok::kValidUtf8)
    fail("{}: not valid UTF-8 (byte 0x{:02x} at offset {})", source,
         static_cast<unsigned char>(text[bad]), bad);
}

}  // namespace qf

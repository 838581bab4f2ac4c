// Hugging Face `tokenizer.json` BPE tokenizers (sentencepiece-style with byte fallback, and
// byte-level with regex pre-tokenizers) and GPT-2 `vocab.json` + `merges.txt`: the
// normalizers, pre-tokenizers and decoders those files use, applied as the `tokenizers`
// library applies them.
#include "core/error.h"
#include "core/mapped_file.h"
#include "io/checkpoint.h"
#include "io/io_util.h"
#include "io/tokenizer_bpe.h"
#include "io/tokenizer_internal.h"
#include "io/tokenizer_regex.h"
#include "io/tokenizer_text.h"

#include <utf8proc.h>

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <memory>
#include <optional>

namespace qf::tok {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

// The pre-tokenizer regex of GPT-2 (and of ByteLevel with use_regex).
constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

struct Normalizer {
  enum class Kind { kUnicode, kPrepend, kReplace, kLowercase, kStrip } kind;
  NormalForm form = NormalForm::kNFC;
  std::string text, content;     // Prepend: text; Replace: text (a literal) -> content
  std::shared_ptr<Regex> regex;  // Replace with a regex pattern
  bool left = false, right = false;
};

enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };
enum class PrependScheme { kAlways, kFirst, kNever };

struct PreTokenizer {
  enum class Kind { kSplit, kByteLevel, kMetaspace, kDigits, kWhitespaceSplit } kind;
  std::shared_ptr<Regex> regex;  // Split with a regex pattern, Whitespace, ByteLevel use_regex
  std::string literal;           // Split with a string pattern
  SplitBehavior behavior = SplitBehavior::kIsolated;
  bool invert = false;
  bool add_prefix_space = false;  // ByteLevel
  std::string replacement;        // Metaspace
  PrependScheme prepend = PrependScheme::kAlways;
  bool split = true;               // Metaspace
  bool individual_digits = false;  // Digits
};

struct DecodeStep {
  enum class Kind { kReplace, kByteFallback, kByteLevel, kStrip } kind;
  std::string from, to;  // Replace
  std::string strip;     // Strip: the character
  int start = 0, stop = 0;
};

// A tokenizer.json (or vocab.json + merges.txt) read into parts.
struct HfSpec {
  std::vector<Normalizer> normalizers;
  std::vector<PreTokenizer> pre_tokenizers;
  std::vector<DecodeStep> per_token_decoders;
  int leading_spaces_to_strip = 0;
  Vocab vocab;
  std::vector<std::pair<std::string, std::string>> merges;
  BpeOptions options;
  std::vector<AddedToken> added_tokens;
  std::optional<std::string> template_bos;  // the SpecialToken a TemplateProcessing starts with
};

// Pieces of text during pre-tokenization; `first` marks the one at the start of the input
// (Metaspace's prepend_scheme "first").
struct Piece {
  std::string text;
  bool first;
};

// One interval of a piece and whether the pattern matched it.
struct Part {
  size_t begin, end;
  bool match;
};

// Cuts `text` per Hugging Face's SplitDelimiterBehavior (normalizer.rs `split`).
void split_piece(const Piece& piece, const std::vector<Part>& parts, SplitBehavior behavior,
                 std::vector<Piece>& out) {
  std::vector<std::pair<size_t, size_t>> kept;
  bool previous_match = false;
  switch (behavior) {
    case SplitBehavior::kIsolated:
      for (const Part& p : parts) kept.emplace_back(p.begin, p.end);
      break;
    case SplitBehavior::kRemoved:
      for (const Part& p : parts)
        if (!p.match) kept.emplace_back(p.begin, p.end);
      break;
    case SplitBehavior::kMergedWithPrevious:
      for (const Part& p : parts) {
        if (p.match && !previous_match && !kept.empty())
          kept.back().second = p.end;
        else
          kept.emplace_back(p.begin, p.end);
        previous_match = p.match;
      }
      break;
    case SplitBehavior::kMergedWithNext:
      for (auto it = parts.rbegin(); it != parts.rend(); ++it) {
        if (it->match && !previous_match && !kept.empty())
          kept.back().first = it->begin;
        else
          kept.emplace_back(it->begin, it->end);
        previous_match = it->match;
      }
      std::reverse(kept.begin(), kept.end());
      break;
    case SplitBehavior::kContiguous:
      for (size_t i = 0; i < parts.size(); ++i) {
        if (i > 0 && parts[i].match == previous_match)
          kept.back().second = parts[i].end;
        else
          kept.emplace_back(parts[i].begin, parts[i].end);
        previous_match = parts[i].match;
      }
      break;
  }
  for (const auto& [b, e] : kept)
    if (e > b) out.push_back({piece.text.substr(b, e - b), piece.first && b == 0});
}

// Matches and the gaps between them, covering `text`.
std::vector<Part> parts_of(size_t size, const std::vector<std::pair<size_t, size_t>>& matches,
                           bool invert) {
  std::vector<Part> parts;
  parts.reserve(2 * matches.size() + 1);
  size_t prev = 0;
  for (const auto& [b, e] : matches) {
    if (prev < b) parts.push_back({prev, b, invert});
    parts.push_back({b, e, !invert});
    prev = e;
  }
  if (prev < size) parts.push_back({prev, size, invert});
  return parts;
}

// Each character for which `pred` holds is a match of its own (HF's char patterns).
template <typename Pred>
std::vector<std::pair<size_t, size_t>> char_matches(std::string_view s, Pred pred) {
  std::vector<std::pair<size_t, size_t>> m;
  for (size_t i = 0; i < s.size();) {
    const size_t b = i;
    if (pred(next_code_point(s, i))) m.emplace_back(b, i);
  }
  return m;
}

std::vector<std::pair<size_t, size_t>> literal_matches(std::string_view s, std::string_view lit) {
  std::vector<std::pair<size_t, size_t>> m;
  if (lit.empty()) return m;
  for (size_t i = 0; (i = s.find(lit, i)) != std::string_view::npos; i += lit.size())
    m.emplace_back(i, i + lit.size());
  return m;
}

bool is_numeric(char32_t cp) {
  const auto c = utf8proc_category(utf8proc_int32_t(cp));
  return c == UTF8PROC_CATEGORY_ND || c == UTF8PROC_CATEGORY_NL || c == UTF8PROC_CATEGORY_NO;
}

class HfTokenizer final : public TokenizerBase {
 public:
  HfTokenizer(std::string source, HfSpec spec) : TokenizerBase(std::move(source)) {
    normalizers_ = std::move(spec.normalizers);
    pre_tokenizers_ = std::move(spec.pre_tokenizers);
    leading_spaces_to_strip_ = spec.leading_spaces_to_strip;
    for (size_t i = 0; i < pre_tokenizers_.size(); ++i)
      if (pre_tokenizers_[i].kind == PreTokenizer::Kind::kByteLevel) {
        // Later steps would see the byte-level alphabet; no known tokenizer does that.
        if (i + 1 != pre_tokenizers_.size())
          fail("{}: a ByteLevel pre-tokenizer before other pre-tokenizers is not supported",
               source_);
        spec.options.byte_level = true;
      }

    int32_t size = 0;
    for (const auto& [token, id] : spec.vocab) size = std::max(size, id + 1);
    for (const AddedToken& t : spec.added_tokens) size = std::max(size, t.id + 1);
    // Every id is at most kMaxTokenId (checked where it was read): `id + 1` cannot overflow.
    pieces_.assign(size_t(size), std::string());
    bytes_.assign(size_t(size), std::string());
    for (const auto& [token, id] : spec.vocab) {
      pieces_[size_t(id)] = token;
      bytes_[size_t(id)] = decode_token(token, spec.per_token_decoders);
    }
    bpe_ = std::make_unique<BpeModel>(std::move(spec.vocab), spec.merges, spec.options, source_);

    for (const AddedToken& t : spec.added_tokens) {
      pieces_[size_t(t.id)] = t.content;
      bytes_[size_t(t.id)] = t.content;
      added_ids_[t.content] = t.id;
      if (t.normalized) {
        const std::string pattern = normalize(t.content);
        normalized_matcher_.add(pattern, t);
      } else {
        raw_matcher_.add(t.content, t);
      }
    }
    int32_t bos = -1;
    if (spec.template_bos) bos = token_id(*spec.template_bos);
    set_specials(bos, -1, /*add_bos=*/bos >= 0);
  }

  void encode_text(std::string_view text, std::vector<int32_t>& out) const override {
    out.reserve(out.size() + text.size() / 3 + 1);
    // Tokens matched in the raw text first, then in each normalized stretch between them
    // (Hugging Face's AddedVocabulary::extract_and_normalize).
    std::vector<AddedTokenMatcher::Segment> raw, normalized;
    raw_matcher_.split(text, raw);
    for (const auto& seg : raw) {
      if (seg.id >= 0) {
        out.push_back(seg.id);
        continue;
      }
      const std::string norm = normalize(text.substr(seg.begin, seg.end - seg.begin));
      normalized.clear();
      normalized_matcher_.split(norm, normalized);
      for (const auto& part : normalized) {
        if (part.id >= 0)
          out.push_back(part.id);
        else
          encode_normalized(std::string_view(norm).substr(part.begin, part.end - part.begin),
                            seg.begin == 0 && part.begin == 0, out);
      }
    }
  }

  int32_t token_id(std::string_view piece) const override {
    if (const auto it = added_ids_.find(piece); it != added_ids_.end()) return it->second;
    return bpe_->id(piece);
  }

 private:
  static std::string decode_token(const std::string& token, const std::vector<DecodeStep>& steps) {
    std::string t = token;
    for (const DecodeStep& s : steps) {
      switch (s.kind) {
        case DecodeStep::Kind::kReplace:
          t = replace_all(t, s.from, s.to);
          break;
        case DecodeStep::Kind::kByteFallback:
          if (t.size() == 6 && t.starts_with("<0x") && t.back() == '>' &&
              std::isxdigit(static_cast<unsigned char>(t[3])) &&
              std::isxdigit(static_cast<unsigned char>(t[4])))
            t = std::string(1, char(std::strtol(t.substr(3, 2).c_str(), nullptr, 16)));
          break;
        case DecodeStep::Kind::kByteLevel: {
          if (invalid_utf8_offset(t) != kValidUtf8) break;
          std::string bytes;
          bool all = true;
          for (size_t i = 0; i < t.size() && all;) {
            const int b = unicode_to_byte(next_code_point(t, i));
            all = b >= 0;
            bytes += char(b);
          }
          // A token outside the alphabet (an added token) stays as written, as in HF.
          if (all) t = std::move(bytes);
          break;
        }
        case DecodeStep::Kind::kStrip: {
          size_t b = 0, e = t.size();
          for (int k = 0; k < s.start && t.compare(b, s.strip.size(), s.strip) == 0; ++k)
            b += s.strip.size();
          for (int k = 0; k < s.stop && e >= b + s.strip.size() &&
                          t.compare(e - s.strip.size(), s.strip.size(), s.strip) == 0;
               ++k)
            e -= s.strip.size();
          t = t.substr(b, e - b);
          break;
        }
      }
    }
    return t;
  }

  std::string normalize(std::string_view text) const {
    std::string s(text);
    for (const Normalizer& n : normalizers_) {
      switch (n.kind) {
        case Normalizer::Kind::kUnicode:
          s = normalize_unicode(s, n.form);
          break;
        case Normalizer::Kind::kPrepend:
          if (!s.empty()) s = n.text + s;
          break;
        case Normalizer::Kind::kReplace:
          if (n.regex) {
            std::string r;
            size_t prev = 0;
            for (const auto& [b, e] : n.regex->find_all(s)) {
              r.append(s, prev, b - prev);
              r += n.content;
              prev = e;
            }
            r.append(s, prev);
            s = std::move(r);
          } else {
            s = replace_all(s, n.text, n.content);
          }
          break;
        case Normalizer::Kind::kLowercase:
          s = lowercase(s);
          break;
        case Normalizer::Kind::kStrip: {
          size_t b = 0, e = s.size();
          if (n.left)
            for (size_t i = 0; i < e;) {
              if (!is_whitespace(next_code_point(s, i))) break;
              b = i;
            }
          if (n.right)
            while (e > b) {
              size_t k = e - 1;
              while (k > b && (static_cast<unsigned char>(s[k]) & 0xC0) == 0x80) --k;
              size_t j = k;
              if (!is_whitespace(next_code_point(s, j))) break;
              e = k;
            }
          s = s.substr(b, e - b);
          break;
        }
      }
    }
    return s;
  }

  void encode_normalized(std::string_view text, bool first, std::vector<int32_t>& out) const {
    std::vector<Piece> pieces{{std::string(text), first}}, next;
    for (const PreTokenizer& p : pre_tokenizers_) {
      next.clear();
      for (Piece& piece : pieces) apply(p, piece, next);
      pieces.swap(next);
    }
    for (const Piece& piece : pieces) bpe_->encode_word(piece.text, out);
  }

  static void apply(const PreTokenizer& p, Piece& piece, std::vector<Piece>& out) {
    using Kind = PreTokenizer::Kind;
    switch (p.kind) {
      case Kind::kSplit: {
        const auto matches =
            p.regex ? p.regex->find_all(piece.text) : literal_matches(piece.text, p.literal);
        split_piece(piece, parts_of(piece.text.size(), matches, p.invert), p.behavior, out);
        break;
      }
      case Kind::kByteLevel:
        // The mapping to the byte-level alphabet is left to the BPE model (byte_level).
        if (p.add_prefix_space && !piece.text.starts_with(' ')) piece.text = " " + piece.text;
        if (p.regex)
          split_piece(piece, parts_of(piece.text.size(), p.regex->find_all(piece.text), false),
                      SplitBehavior::kIsolated, out);
        else
          out.push_back(std::move(piece));
        break;
      case Kind::kMetaspace: {
        piece.text = replace_all(piece.text, " ", p.replacement);
        const bool prepend = p.prepend == PrependScheme::kAlways ||
                             (p.prepend == PrependScheme::kFirst && piece.first);
        if (prepend && !piece.text.starts_with(p.replacement)) piece.text = p.replacement + piece.text;
        if (p.split)
          split_piece(piece,
                      parts_of(piece.text.size(), literal_matches(piece.text, p.replacement), false),
                      SplitBehavior::kMergedWithNext, out);
        else
          out.push_back(std::move(piece));
        break;
      }
      case Kind::kDigits:
        split_piece(piece, parts_of(piece.text.size(), char_matches(piece.text, is_numeric), false),
                    p.individual_digits ? SplitBehavior::kIsolated : SplitBehavior::kContiguous,
                    out);
        break;
      case Kind::kWhitespaceSplit:
        split_piece(piece,
                    parts_of(piece.text.size(), char_matches(piece.text, is_whitespace), false),
                    SplitBehavior::kRemoved, out);
        break;
    }
  }

  std::vector<Normalizer> normalizers_;
  std::vector<PreTokenizer> pre_tokenizers_;
  std::unique_ptr<BpeModel> bpe_;
  AddedTokenMatcher raw_matcher_, normalized_matcher_;
  Vocab added_ids_;
};

// ---- tokenizer.json parsing ----

class JsonReader {
 public:
  explicit JsonReader(std::string source) : source_(std::move(source)) {}

  [[noreturn]] void error(const std::string& what) const { fail("{}: {}", source_, what); }

  const json& object(const json& j, const char* what) const {
    if (!j.is_object()) error(fmt::format("{} is not an object", what));
    return j;
  }
  std::string type(const json& j, const char* what) const {
    object(j, what);
    const auto it = j.find("type");
    if (it == j.end() || !it->is_string()) error(fmt::format("{} has no \"type\"", what));
    return it->get<std::string>();
  }
  std::string string(const json& j, const char* key, const char* what) const {
    const auto it = j.find(key);
    if (it == j.end() || !it->is_string())
      error(fmt::format("{} has no \"{}\" string", what, key));
    return it->get<std::string>();
  }
  std::optional<std::string> opt_string(const json& j, const char* key, const char* what) const {
    const auto it = j.find(key);
    if (it == j.end() || it->is_null()) return std::nullopt;
    if (!it->is_string()) error(fmt::format("{} field \"{}\" is not a string", what, key));
    return it->get<std::string>();
  }
  bool flag(const json& j, const char* key, bool fallback, const char* what) const {
    const auto it = j.find(key);
    if (it == j.end() || it->is_null()) return fallback;
    if (!it->is_boolean()) error(fmt::format("{} field \"{}\" is not a boolean", what, key));
    return it->get<bool>();
  }
  int integer(const json& j, const char* key, int fallback, const char* what) const {
    const auto it = j.find(key);
    if (it == j.end() || it->is_null()) return fallback;
    if (!it->is_number_integer() || it->get<int64_t>() < 0 || it->get<int64_t>() > 1'000'000)
      error(fmt::format("{} field \"{}\" is not a small non-negative integer", what, key));
    return it->get<int>();
  }
  // A "pattern": {"String": s} or {"Regex": r}.
  std::pair<std::string, bool> pattern(const json& j, const char* what) const {
    const auto it = j.find("pattern");
    if (it == j.end() || !it->is_object()) error(fmt::format("{} has no \"pattern\"", what));
    if (const auto s = it->find("String"); s != it->end() && s->is_string())
      return {s->get<std::string>(), false};
    if (const auto r = it->find("Regex"); r != it->end() && r->is_string())
      return {r->get<std::string>(), true};
    error(fmt::format("{} pattern is neither {{\"String\": ...}} nor {{\"Regex\": ...}}", what));
  }
  std::shared_ptr<Regex> regex(const std::string& pattern, const char* what) const {
    if (invalid_utf8_offset(pattern) != kValidUtf8)
      error(fmt::format("{} regex is not valid UTF-8", what));
    return std::make_shared<Regex>(pattern, fmt::format("{}: {}", source_, what));
  }
  [[noreturn]] void unsupported(const char* what, const std::string& type) const {
    error(fmt::format("{} type \"{}\" is not supported", what, one_line(type)));
  }

  void normalizer(const json& j, std::vector<Normalizer>& out) const {
    if (j.is_null()) return;
    const std::string t = type(j, "normalizer");
    using Kind = Normalizer::Kind;
    if (t == "Sequence") {
      const auto it = j.find("normalizers");
      if (it == j.end() || !it->is_array()) error("Sequence normalizer has no \"normalizers\"");
      for (const json& n : *it) normalizer(n, out);
    } else if (t == "NFC" || t == "NFD" || t == "NFKC" || t == "NFKD") {
      const NormalForm f = t == "NFC" ? NormalForm::kNFC : t == "NFD" ? NormalForm::kNFD
                           : t == "NFKC" ? NormalForm::kNFKC : NormalForm::kNFKD;
      out.push_back({Kind::kUnicode, f});
    } else if (t == "Prepend") {
      out.push_back({Kind::kPrepend, {}, string(j, "prepend", "Prepend normalizer")});
    } else if (t == "Replace") {
      const auto [p, is_regex] = pattern(j, "Replace normalizer");
      Normalizer n{Kind::kReplace, {}, p, string(j, "content", "Replace normalizer")};
      if (is_regex) n.regex = regex(p, "Replace normalizer");
      else if (p.empty()) error("Replace normalizer has an empty pattern");
      out.push_back(std::move(n));
    } else if (t == "Lowercase") {
      out.push_back({Kind::kLowercase});
    } else if (t == "Strip") {
      Normalizer n{Kind::kStrip};
      n.left = flag(j, "strip_left", false, "Strip normalizer");
      n.right = flag(j, "strip_right", false, "Strip normalizer");
      out.push_back(std::move(n));
    } else {
      unsupported("normalizer", t);
    }
  }

  SplitBehavior behavior(const json& j, const char* what) const {
    const std::string b = string(j, "behavior", what);
    if (b == "Removed") return SplitBehavior::kRemoved;
    if (b == "Isolated") return SplitBehavior::kIsolated;
    if (b == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
    if (b == "MergedWithNext") return SplitBehavior::kMergedWithNext;
    if (b == "Contiguous") return SplitBehavior::kContiguous;
    error(fmt::format("{} behavior \"{}\" is unknown", what, one_line(b)));
  }

  void pre_tokenizer(const json& j, std::vector<PreTokenizer>& out) const {
    if (j.is_null()) return;
    const std::string t = type(j, "pre_tokenizer");
    using Kind = PreTokenizer::Kind;
    if (t == "Sequence") {
      const auto it = j.find("pretokenizers");
      if (it == j.end() || !it->is_array()) error("Sequence pre_tokenizer has no \"pretokenizers\"");
      for (const json& p : *it) pre_tokenizer(p, out);
    } else if (t == "Split") {
      PreTokenizer p{Kind::kSplit};
      const auto [pat, is_regex] = pattern(j, "Split pre_tokenizer");
      if (is_regex) p.regex = regex(pat, "Split pre_tokenizer");
      else p.literal = pat;
      p.behavior = behavior(j, "Split pre_tokenizer");
      p.invert = flag(j, "invert", false, "Split pre_tokenizer");
      out.push_back(std::move(p));
    } else if (t == "ByteLevel") {
      PreTokenizer p{Kind::kByteLevel};
      p.add_prefix_space = flag(j, "add_prefix_space", true, "ByteLevel pre_tokenizer");
      if (flag(j, "use_regex", true, "ByteLevel pre_tokenizer"))
        p.regex = regex(std::string(kGpt2Pattern), "ByteLevel pre_tokenizer");
      out.push_back(std::move(p));
    } else if (t == "Metaspace") {
      PreTokenizer p{Kind::kMetaspace};
      p.replacement = string(j, "replacement", "Metaspace pre_tokenizer");
      p.prepend = prepend_scheme(j, "Metaspace pre_tokenizer");
      p.split = flag(j, "split", true, "Metaspace pre_tokenizer");
      if (p.replacement.empty()) error("Metaspace pre_tokenizer has an empty replacement");
      out.push_back(std::move(p));
    } else if (t == "Digits") {
      PreTokenizer p{Kind::kDigits};
      p.individual_digits = flag(j, "individual_digits", false, "Digits pre_tokenizer");
      out.push_back(std::move(p));
    } else if (t == "Whitespace") {
      PreTokenizer p{Kind::kSplit};
      p.regex = regex(R"(\w+|[^\w\s]+)", "Whitespace pre_tokenizer");
      p.behavior = SplitBehavior::kRemoved;
      p.invert = true;
      out.push_back(std::move(p));
    } else if (t == "WhitespaceSplit") {
      out.push_back({Kind::kWhitespaceSplit});
    } else {
      unsupported("pre_tokenizer", t);
    }
  }

  PrependScheme prepend_scheme(const json& j, const char* what) const {
    // Older files carry add_prefix_space instead of prepend_scheme.
    if (!flag(j, "add_prefix_space", true, what)) return PrependScheme::kNever;
    const auto s = opt_string(j, "prepend_scheme", what);
    if (!s || *s == "always") return PrependScheme::kAlways;
    if (*s == "first") return PrependScheme::kFirst;
    if (*s == "never") return PrependScheme::kNever;
    error(fmt::format("{} prepend_scheme \"{}\" is unknown", what, one_line(*s)));
  }

  void decoder(const json& j, HfSpec& spec, bool& fused) const {
    if (j.is_null()) return;
    const std::string t = type(j, "decoder");
    using Kind = DecodeStep::Kind;
    auto& steps = spec.per_token_decoders;
    if (t == "Sequence") {
      const auto it = j.find("decoders");
      if (it == j.end() || !it->is_array()) error("Sequence decoder has no \"decoders\"");
      for (const json& d : *it) decoder(d, spec, fused);
    } else if (t == "Replace") {
      const auto [p, is_regex] = pattern(j, "Replace decoder");
      if (is_regex || p.empty()) error("Replace decoder with a regex or empty pattern is not supported");
      steps.push_back({Kind::kReplace, p, string(j, "content", "Replace decoder")});
    } else if (t == "ByteFallback") {
      steps.push_back({Kind::kByteFallback});
    } else if (t == "ByteLevel") {
      steps.push_back({Kind::kByteLevel});
    } else if (t == "Fuse") {
      // Later steps see the whole text at once.
      fused = true;
    } else if (t == "Strip") {
      DecodeStep s{Kind::kStrip};
      s.strip = string(j, "content", "Strip decoder");
      s.start = integer(j, "start", 0, "Strip decoder");
      s.stop = integer(j, "stop", 0, "Strip decoder");
      if (fused) {
        // On the whole text only a leading space can be honoured token by token.
        if (s.strip != " " || s.stop != 0)
          error("Strip decoder after Fuse is supported only for leading spaces");
        spec.leading_spaces_to_strip = s.start;
      } else {
        steps.push_back(std::move(s));
      }
    } else if (t == "Metaspace") {
      const std::string r = string(j, "replacement", "Metaspace decoder");
      if (r.empty()) error("Metaspace decoder has an empty replacement");
      steps.push_back({Kind::kReplace, r, " "});
      if (prepend_scheme(j, "Metaspace decoder") != PrependScheme::kNever)
        spec.leading_spaces_to_strip = 1;
    } else {
      unsupported("decoder", t);
    }
  }

  // The BOS a TemplateProcessing (alone or in a Sequence) puts before a single sequence.
  std::optional<std::string> template_bos(const json& j) const {
    if (!j.is_object()) return std::nullopt;
    const auto t = j.find("type");
    if (t == j.end() || !t->is_string()) return std::nullopt;
    if (*t == "Sequence") {
      if (const auto it = j.find("processors"); it != j.end() && it->is_array())
        for (const json& p : *it)
          if (auto b = template_bos(p)) return b;
      return std::nullopt;
    }
    if (*t != "TemplateProcessing") return std::nullopt;
    const auto single = j.find("single");
    if (single == j.end() || !single->is_array() || single->empty()) return std::nullopt;
    const json& first = (*single)[0];
    if (!first.is_object() || !first.contains("SpecialToken")) return std::nullopt;
    const json& st = first["SpecialToken"];
    if (!st.is_object() || !st.contains("id") || !st["id"].is_string()) return std::nullopt;
    return st["id"].get<std::string>();
  }

  void vocab(const json& j, Vocab& out) const {
    if (!j.is_object()) error("model.vocab is not an object");
    out.reserve(j.size());
    for (const auto& [token, id] : j.items()) {
      if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > kMaxTokenId)
        error(fmt::format("vocabulary id of {} is not an integer from 0 to {}", quote_name(token),
                          kMaxTokenId));
      if (invalid_utf8_offset(token) != kValidUtf8)
        error(fmt::format("vocabulary token {} is not valid UTF-8", quote_name(token)));
      out.emplace(token, static_cast<int32_t>(id.get<int64_t>()));
    }
  }

  void merges(const json& j, std::vector<std::pair<std::string, std::string>>& out) const {
    if (j.is_null()) return;
    if (!j.is_array()) error("model.merges is not an array");
    out.reserve(j.size());
    for (const json& m : j) {
      if (m.is_string()) {
        // The older form "a b": tokens cannot hold spaces.
        const std::string s = m.get<std::string>();
        const size_t sp = s.find(' ');
        if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos)
          error(fmt::format("merge {} is not two tokens separated by a space", quote_name(s)));
        out.emplace_back(s.substr(0, sp), s.substr(sp + 1));
      } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
        out.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
      } else {
        error("a merge is neither \"a b\" nor [\"a\", \"b\"]");
      }
    }
  }

  void model(const json& j, HfSpec& spec) const {
    object(j, "model");
    const auto t = j.find("type");
    // Files written before "type" existed are BPE when they have merges.
    if (t != j.end() && !(t->is_string() && *t == "BPE"))
      unsupported("model", t->is_string() ? t->get<std::string>() : t->dump());
    if (t == j.end() && !j.contains("merges")) error("model has no \"type\"");
    const auto v = j.find("vocab");
    if (v == j.end()) error("model has no \"vocab\"");
    vocab(*v, spec.vocab);
    if (const auto m = j.find("merges"); m != j.end()) merges(*m, spec.merges);
    BpeOptions& o = spec.options;
    o.byte_fallback = flag(j, "byte_fallback", false, "model");
    o.fuse_unk = flag(j, "fuse_unk", false, "model");
    o.ignore_merges = flag(j, "ignore_merges", false, "model");
    o.continuing_subword_prefix = opt_string(j, "continuing_subword_prefix", "model").value_or("");
    o.end_of_word_suffix = opt_string(j, "end_of_word_suffix", "model").value_or("");
    if (const auto unk = opt_string(j, "unk_token", "model")) {
      const auto it = spec.vocab.find(*unk);
      if (it == spec.vocab.end())
        error(fmt::format("model.unk_token {} is not in the vocabulary", quote_name(*unk)));
      o.unk_id = it->second;
    }
    // BPE dropout is a training-time regularizer; inference encodes deterministically.
  }

 private:
  std::string source_;
};

std::string read_text_file(const fs::path& path) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) fail("{}: not found", path.string());
  const MappedFile f = MappedFile::open(path);
  return std::string(reinterpret_cast<const char*>(f.data()), f.size());
}

}  // namespace

std::unique_ptr<TokenizerBase> load_hf_json(const fs::path& json_file) {
  const std::string source = json_file.string();
  const json root = read_json_file(json_file);
  const JsonReader r(source);
  r.object(root, "the file");
  HfSpec spec;
  const auto model = root.find("model");
  if (model == root.end()) r.error("no \"model\"");
  r.model(*model, spec);
  if (const auto it = root.find("added_tokens"); it != root.end() && !it->is_null()) {
    if (!it->is_array()) r.error("added_tokens is not an array");
    for (const json& t : *it) spec.added_tokens.push_back(parse_added_token(t, -1, source));
  }
  if (const auto it = root.find("normalizer"); it != root.end()) r.normalizer(*it, spec.normalizers);
  if (const auto it = root.find("pre_tokenizer"); it != root.end())
    r.pre_tokenizer(*it, spec.pre_tokenizers);
  bool fused = false;
  if (const auto it = root.find("decoder"); it != root.end()) r.decoder(*it, spec, fused);
  if (const auto it = root.find("post_processor"); it != root.end())
    spec.template_bos = r.template_bos(*it);
  return std::make_unique<HfTokenizer>(source, std::move(spec));
}

std::unique_ptr<TokenizerBase> load_vocab_merges(const fs::path& vocab_file,
                                                 const fs::path& merges_file,
                                                 std::vector<AddedToken> added_tokens) {
  HfSpec spec;
  JsonReader(vocab_file.string()).vocab(read_json_file(vocab_file), spec.vocab);
  const std::string text = read_text_file(merges_file);
  if (invalid_utf8_offset(text) != kValidUtf8) fail("{}: not valid UTF-8", merges_file.string());
  size_t line_no = 0;
  for (size_t pos = 0; pos < text.size();) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    std::string_view line(text.data() + pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (line.ends_with('\r')) line.remove_suffix(1);
    if (line.empty() || (line_no == 1 && line.starts_with("#version"))) continue;
    const size_t sp = line.find(' ');
    if (sp == std::string_view::npos || line.find(' ', sp + 1) != std::string_view::npos)
      fail("{}: line {} is not two tokens separated by a space", merges_file.string(), line_no);
    spec.merges.emplace_back(std::string(line.substr(0, sp)), std::string(line.substr(sp + 1)));
  }
  PreTokenizer byte_level{PreTokenizer::Kind::kByteLevel};
  byte_level.regex = std::make_shared<Regex>(kGpt2Pattern, vocab_file.string());
  spec.pre_tokenizers.push_back(std::move(byte_level));
  spec.per_token_decoders.push_back({DecodeStep::Kind::kByteLevel});
  if (added_tokens.empty()) {
    if (const auto it = spec.vocab.find("<|endoftext|>"); it != spec.vocab.end()) {
      AddedToken eot;
      eot.content = it->first;
      eot.id = it->second;
      eot.normalized = false;
      eot.special = true;
      added_tokens.push_back(eot);
    }
  }
  spec.added_tokens = std::move(added_tokens);
  auto tok = std::make_unique<HfTokenizer>(vocab_file.string(), std::move(spec));
  tok->set_specials(-1, tok->token_id("<|endoftext|>"), false);
  return tok;
}

}  // namespace qf::tok

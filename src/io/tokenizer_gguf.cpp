// Tokenizers read from a GGUF file's `tokenizer.*` metadata, encoding as llama.cpp's vocabulary
// does (src/llama-vocab.cpp):
//   "llama" (SPM): tokens with scores and token types; the text gets a leading space (the dummy
//     prefix, `tokenizer.ggml.add_space_prefix`, default true) at its start and after each
//     special token, spaces become U+2581, then adjacent pieces merge highest score first
//     (leftmost among equal scores) while the merged text is a token; a character left that is
//     no token becomes its <0xXX> byte tokens. These are sentencepiece's BPE merges, but not its
//     normalizer: a model trained with remove_extra_whitespaces (llama2.c's) gets runs of spaces
//     and spaces at the ends as llama.cpp encodes them, not merged or dropped as libsentencepiece
//     does (the GGUF does not record the setting).
//   "gpt2" (byte-level BPE): tokens and ranked merges; `tokenizer.ggml.pre` names the
//     pre-tokenizer regex, only the names whose regex qforge implements are accepted.
// Before either, the text is cut at the special tokens (types control, user-defined and
// unknown), longest first, which are encoded as themselves (llama.cpp's tokenizer_st_partition
// with parse_special, and what Hugging Face tokenizers do with added tokens).
#include "core/error.h"
#include "io/gguf_file.h"
#include "io/gguf_vocab.h"
#include "io/io_util.h"
#include "io/tokenizer_bpe.h"
#include "io/tokenizer_internal.h"
#include "io/tokenizer_regex.h"
#include "io/tokenizer_text.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <memory>
#include <queue>

namespace qf::tok {
namespace {

constexpr std::string_view kMetaSpace = "\xE2\x96\x81";  // U+2581, sentencepiece's space

// The pre-tokenizer regexes of llama.cpp's `tokenizer.ggml.pre` names that qforge implements,
// in Hugging Face's spelling (llama.cpp rewrites (?i:...) as explicit classes; same matches).
struct PreTokenizerRow {
  std::array<std::string_view, 6> names;
  GgufPreTokenizer pre;
};

constexpr std::string_view kGpt2Regex =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
constexpr std::string_view kLlama3Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kQwen2Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

constexpr PreTokenizerRow kPreTokenizers[] = {
    {{"gpt-2", "phi-2", "mpt", "olmo"}, {kGpt2Regex, false, false}},
    {{"llama3", "llama-v3", "llama-bpe", "falcon3"}, {kLlama3Regex, true, true}},
    {{"dbrx", "smaug-bpe"}, {kLlama3Regex, false, false}},
    {{"qwen2", "deepseek-r1-qwen", "stablelm2"}, {kQwen2Regex, false, false}},
};

const GgufPreTokenizer* find_pre_tokenizer(std::string_view name) {
  for (const PreTokenizerRow& row : kPreTokenizers)
    for (std::string_view n : row.names)
      if (!n.empty() && n == name) return &row.pre;
  return nullptr;
}

std::string supported_pre_names() {
  std::string out;
  for (const PreTokenizerRow& row : kPreTokenizers)
    for (std::string_view n : row.names)
      if (!n.empty()) out += (out.empty() ? "" : ", ") + std::string(n);
  return out;
}

bool is_byte_token(std::string_view s) {
  return s.size() == 6 && s.starts_with("<0x") && s.back() == '>' &&
         std::isxdigit(static_cast<unsigned char>(s[3])) &&
         std::isxdigit(static_cast<unsigned char>(s[4]));
}

// What both kinds read: the token list with types, the special-token cut and the specials.
class GgufTokenizer : public TokenizerBase {
 public:
  GgufTokenizer(const GgufFile& f, std::string_view model) : TokenizerBase(f.path().string()) {
    const std::vector<std::string_view> tokens = f.get_string_array("tokenizer.ggml.tokens");
    if (tokens.empty()) fail("{}: tokenizer.ggml.tokens is empty", source_);
    if (int64_t(tokens.size()) > kMaxTokenId + 1)
      fail("{}: tokenizer.ggml.tokens has {} entries, more than the {} qforge accepts", source_,
           tokens.size(), kMaxTokenId + 1);
    const size_t n = tokens.size();
    types_.assign(n, kGgufTokenNormal);
    if (f.find("tokenizer.ggml.token_type")) {
      const std::vector<int32_t> t = f.get_i32_array("tokenizer.ggml.token_type");
      if (t.size() < n)
        fail("{}: tokenizer.ggml.token_type has {} entries for {} tokens", source_, t.size(), n);
      std::copy_n(t.begin(), n, types_.begin());
    }
    pieces_.resize(n);
    bytes_.resize(n);
    vocab_.reserve(n);
    for (size_t id = 0; id < n; ++id) {
      // llama.cpp names an empty token so that it can still be looked up.
      std::string text = tokens[id].empty() ? fmt::format("[EMPTY_{}]", id) : std::string(tokens[id]);
      if (invalid_utf8_offset(text) != kValidUtf8)
        fail("{}: token {} is not valid UTF-8", source_, id);
      if (!vocab_.emplace(text, int32_t(id)).second)
        fail("{}: token {} ({}) appears twice in tokenizer.ggml.tokens", source_, id,
             quote_name(text));
      pieces_[id] = std::move(text);
      const int32_t type = types_[id];
      if (type == kGgufTokenControl || type == kGgufTokenUserDefined || type == kGgufTokenUnknown)
        specials_.push_back(int32_t(id));
    }
    // Longest first (llama.cpp sorts by length; ties by id here, so the order is defined).
    std::stable_sort(specials_.begin(), specials_.end(), [&](int32_t a, int32_t b) {
      return pieces_[size_t(a)].size() > pieces_[size_t(b)].size();
    });

    const bool spm = model == "llama";
    const int32_t bos = special_id(f, "tokenizer.ggml.bos_token_id", spm ? 1 : -1);
    const int32_t eos = special_id(f, "tokenizer.ggml.eos_token_id", spm ? 2 : -1);
    unk_ = special_id(f, "tokenizer.ggml.unknown_token_id", spm ? 0 : -1);
    bool add_bos = spm;
    if (!spm)
      if (const GgufPreTokenizer* row = find_pre_tokenizer(pre_name(f))) add_bos = row->add_bos;
    if (f.find("tokenizer.ggml.add_bos_token")) add_bos = f.get_bool("tokenizer.ggml.add_bos_token");
    // add_eos_token is not applied: encode() takes only add_bos, and the Hugging Face path
    // ignores tokenizer_config.json's add_eos_token alike.
    set_specials(bos, eos, add_bos);
  }

  int32_t token_id(std::string_view piece) const override {
    const auto it = vocab_.find(piece);
    return it == vocab_.end() ? -1 : it->second;
  }

  static std::string pre_name(const GgufFile& f) {
    return f.find("tokenizer.ggml.pre") ? std::string(f.get_string("tokenizer.ggml.pre")) : "";
  }

 protected:
  struct Fragment {
    size_t begin, end;
    int32_t id;  // -1: text
  };

  // Cuts `text` at the special tokens, one token at a time from the longest, each at all its
  // occurrences in the text fragments left (llama.cpp's order, so overlaps resolve alike).
  void partition(std::string_view text, std::vector<Fragment>& out) const {
    out.clear();
    if (text.empty()) return;
    out.push_back({0, text.size(), -1});
    std::vector<Fragment> next;
    for (const int32_t id : specials_) {
      const std::string& s = pieces_[size_t(id)];
      if (text.find(s) == std::string_view::npos) continue;
      next.clear();
      for (const Fragment& frag : out) {
        if (frag.id >= 0) {
          next.push_back(frag);
          continue;
        }
        size_t pos = frag.begin;
        for (size_t hit; (hit = text.substr(0, frag.end).find(s, pos)) != std::string_view::npos;
             pos = hit + s.size()) {
          if (hit > pos) next.push_back({pos, hit, -1});
          next.push_back({hit, hit + s.size(), id});
        }
        if (pos < frag.end) next.push_back({pos, frag.end, -1});
      }
      out.swap(next);
    }
  }

  int32_t special_id(const GgufFile& f, const char* key, int32_t fallback) const {
    if (!f.find(key)) return fallback;
    const uint32_t id = f.get_u32(key);
    // convert scripts write 0xFFFFFFFF for "none"; llama.cpp ignores ids outside the vocabulary.
    return id < pieces_.size() ? int32_t(id) : -1;
  }

  Vocab vocab_;
  std::vector<int32_t> types_;
  std::vector<int32_t> specials_;
  int32_t unk_ = -1;
};

class GgufSpmTokenizer final : public GgufTokenizer {
 public:
  explicit GgufSpmTokenizer(const GgufFile& f) : GgufTokenizer(f, "llama") {
    const size_t n = pieces_.size();
    scores_.assign(n, 0.f);
    if (f.find("tokenizer.ggml.scores")) {
      const std::vector<float> s = f.get_f32_array("tokenizer.ggml.scores");
      if (s.size() < n)
        fail("{}: tokenizer.ggml.scores has {} entries for {} tokens", source_, s.size(), n);
      std::copy_n(s.begin(), n, scores_.begin());
    }
    byte_ids_.fill(-1);
    for (size_t id = 0; id < n; ++id) {
      const std::string& p = pieces_[id];
      const int32_t type = types_[id];
      if (type == kGgufTokenByte && is_byte_token(p)) {
        const int b = std::stoi(p.substr(3, 2), nullptr, 16);
        bytes_[id] = std::string(1, char(b));
        byte_ids_[size_t(b)] = int32_t(id);
      } else if (type == kGgufTokenControl || type == kGgufTokenUnknown ||
                 type == kGgufTokenUserDefined) {
        bytes_[id] = p;  // decode() promises special tokens as their text
      } else {
        bytes_[id] = replace_all(p, kMetaSpace, " ");
      }
    }
    add_space_prefix_ = f.find("tokenizer.ggml.add_space_prefix")
                            ? f.get_bool("tokenizer.ggml.add_space_prefix") : true;
    leading_spaces_to_strip_ = add_space_prefix_ ? 1 : 0;
  }

  void encode_text(std::string_view text, std::vector<int32_t>& out) const override {
    std::vector<Fragment> fragments;
    partition(text, fragments);
    bool after_special = true;  // the start counts as after a special token
    for (const Fragment& frag : fragments) {
      if (frag.id >= 0) {
        out.push_back(frag.id);
        after_special = true;
        continue;
      }
      std::string piece = add_space_prefix_ && after_special ? " " : "";
      piece.append(text.substr(frag.begin, frag.end - frag.begin));
      encode_piece(replace_all(piece, " ", kMetaSpace), out);
      after_special = false;
    }
  }

 private:
  struct Symbol {
    size_t begin, size;
    int32_t prev, next;
  };
  struct Bigram {
    float score;
    int32_t left, right;
    size_t size;
  };
  // Highest score first, then the leftmost.
  struct BigramOrder {
    bool operator()(const Bigram& a, const Bigram& b) const {
      return a.score < b.score || (a.score == b.score && a.left > b.left);
    }
  };

  void encode_piece(std::string_view s, std::vector<int32_t>& out) const {
    std::vector<Symbol> symbols;
    for (size_t i = 0; i < s.size();) {
      const size_t len = std::min(utf8_length(static_cast<unsigned char>(s[i])), s.size() - i);
      const int32_t index = int32_t(symbols.size());
      symbols.push_back({i, len, index - 1, i + len == s.size() ? -1 : index + 1});
      i += len;
    }
    std::priority_queue<Bigram, std::vector<Bigram>, BigramOrder> queue;
    auto try_pair = [&](int32_t left, int32_t right) {
      if (left < 0 || right < 0) return;
      const size_t size = symbols[size_t(left)].size + symbols[size_t(right)].size;
      const int32_t id = token_id(s.substr(symbols[size_t(left)].begin, size));
      if (id >= 0) queue.push({scores_[size_t(id)], left, right, size});
    };
    for (int32_t i = 1; i < int32_t(symbols.size()); ++i) try_pair(i - 1, i);
    while (!queue.empty()) {
      const Bigram b = queue.top();
      queue.pop();
      Symbol& left = symbols[size_t(b.left)];
      Symbol& right = symbols[size_t(b.right)];
      // Stale: one side has been merged into something else since the pair was queued.
      if (left.size == 0 || right.size == 0 || left.size + right.size != b.size) continue;
      left.size += right.size;
      right.size = 0;
      left.next = right.next;
      if (right.next >= 0) symbols[size_t(right.next)].prev = b.left;
      try_pair(left.prev, b.left);
      try_pair(b.left, left.next);
    }
    // A symbol is a token unless it is a single character the vocabulary lacks (merges only
    // make tokens), so llama.cpp's re-segmentation of merged symbols never applies: what is
    // left becomes byte tokens.
    for (int32_t i = symbols.empty() ? -1 : 0; i >= 0; i = symbols[size_t(i)].next) {
      const Symbol& sym = symbols[size_t(i)];
      const std::string_view text = s.substr(sym.begin, sym.size);
      if (const int32_t id = token_id(text); id >= 0) {
        out.push_back(id);
        continue;
      }
      for (const char c : text) {
        const int32_t id = byte_ids_[static_cast<unsigned char>(c)];
        if (id >= 0) out.push_back(id);
        else if (unk_ >= 0) out.push_back(unk_);
        else fail("{}: no byte token <0x{:02X}> and no unknown token for text the vocabulary "
                  "lacks", source_, static_cast<unsigned char>(c));
      }
    }
  }

  std::vector<float> scores_;
  std::array<int32_t, 256> byte_ids_;
  bool add_space_prefix_ = true;
};

class GgufBpeTokenizer final : public GgufTokenizer {
 public:
  GgufBpeTokenizer(const GgufFile& f, const GgufPreTokenizer& pre) : GgufTokenizer(f, "gpt2") {
    regex_ = std::make_unique<Regex>(pre.regex, source_ + ": tokenizer.ggml.pre");
    std::vector<std::pair<std::string, std::string>> merges;
    if (!f.find("tokenizer.ggml.merges")) fail("{}: tokenizer.ggml.merges is missing", source_);
    for (std::string_view m : f.get_string_array("tokenizer.ggml.merges")) {
      // llama.cpp splits at the first space after the first byte.
      const size_t sp = m.find(' ', 1);
      if (sp == std::string_view::npos)
        fail("{}: tokenizer.ggml.merges entry {} is not two tokens separated by a space",
             source_, quote_name(std::string(m)));
      merges.emplace_back(std::string(m.substr(0, sp)), std::string(m.substr(sp + 1)));
    }
    for (size_t id = 0; id < pieces_.size(); ++id) {
      const int32_t type = types_[id];
      const std::string& p = pieces_[id];
      std::string b;
      bool all = type != kGgufTokenControl && type != kGgufTokenUserDefined;
      for (size_t i = 0; i < p.size() && all;) {
        const int byte = unicode_to_byte(next_code_point(p, i));
        all = byte >= 0;
        b += char(byte);
      }
      // Special tokens, and tokens outside the byte alphabet, decode as written.
      bytes_[id] = all ? std::move(b) : p;
    }
    BpeOptions options;
    options.byte_level = true;
    options.ignore_merges = pre.ignore_merges;
    bpe_ = std::make_unique<BpeModel>(vocab_, merges, options, source_ + ": tokenizer.ggml.merges");
  }

  void encode_text(std::string_view text, std::vector<int32_t>& out) const override {
    std::vector<Fragment> fragments;
    partition(text, fragments);
    for (const Fragment& frag : fragments) {
      if (frag.id >= 0) {
        out.push_back(frag.id);
        continue;
      }
      const std::string_view piece = text.substr(frag.begin, frag.end - frag.begin);
      // Matches are words, and so is any text between them.
      size_t prev = 0;
      for (const auto& [b, e] : regex_->find_all(piece)) {
        if (b > prev) bpe_->encode_word(piece.substr(prev, b - prev), out);
        bpe_->encode_word(piece.substr(b, e - b), out);
        prev = e;
      }
      if (prev < piece.size()) bpe_->encode_word(piece.substr(prev), out);
    }
  }

 private:
  std::unique_ptr<Regex> regex_;
  std::unique_ptr<BpeModel> bpe_;
};

}  // namespace

const GgufPreTokenizer* gguf_pre_tokenizer(std::string_view name) { return find_pre_tokenizer(name); }

std::string gguf_pre_tokenizer_names() { return supported_pre_names(); }

std::unique_ptr<TokenizerBase> load_gguf_tokenizer(const GgufFile& f) {
  const std::string label = f.path().string();
  if (!f.find("tokenizer.ggml.model"))
    fail("{}: no tokenizer (tokenizer.ggml.model is missing); pass --tokenizer DIR", label);
  const std::string model(f.get_string("tokenizer.ggml.model"));
  if (model == "llama") return std::make_unique<GgufSpmTokenizer>(f);
  if (model == "gpt2") {
    const std::string pre = GgufTokenizer::pre_name(f);
    const GgufPreTokenizer* row = find_pre_tokenizer(pre);
    if (!row)
      fail("{}: tokenizer.ggml.pre '{}' is not supported (qforge implements {}); pass "
           "--tokenizer DIR", label, one_line(pre.empty() ? "(missing: llama.cpp's default)" : pre),
           gguf_pre_tokenizer_names());
    return std::make_unique<GgufBpeTokenizer>(f, *row);
  }
  fail("{}: tokenizer.ggml.model '{}' is not supported (qforge reads 'llama' and 'gpt2'); pass "
       "--tokenizer DIR", label, one_line(model));
}

}  // namespace qf::tok

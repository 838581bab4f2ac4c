// Sentencepiece `tokenizer.model` through libsentencepiece, which encodes exactly as the
// reference (Llama 1/2, llama2.c's TinyStories models).
#include "core/error.h"
#include "io/io_util.h"
#include "io/tokenizer_internal.h"
#include "io/tokenizer_text.h"

#include <sentencepiece_processor.h>

#include <fmt/format.h>

#include <cstdlib>

namespace qf::tok {
namespace {

constexpr std::string_view kMetaSpace = "\xE2\x96\x81";  // U+2581, sentencepiece's space

class SentencePieceTokenizer final : public TokenizerBase {
 public:
  explicit SentencePieceTokenizer(const std::filesystem::path& file) : TokenizerBase(file.string()) {
    std::error_code ec;
    if (!std::filesystem::is_regular_file(file, ec)) fail("{}: not found", source_);
    const auto status = sp_.Load(file.string());
    if (!status.ok())
      fail("{}: not a sentencepiece model: {}", source_, one_line(status.ToString()));
    const int n = sp_.GetPieceSize();
    pieces_.resize(size_t(n));
    bytes_.resize(size_t(n));
    for (int id = 0; id < n; ++id) {
      const std::string& p = sp_.IdToPiece(id);
      pieces_[size_t(id)] = p;
      // Control and unknown pieces are kept as their text (sentencepiece would drop them or
      // write " ⁇ "): decode() promises special tokens as text.
      if (sp_.IsByte(id) && p.size() == 6 && p.starts_with("<0x")) {
        bytes_[size_t(id)] = std::string(1, char(std::strtol(p.substr(3, 2).c_str(), nullptr, 16)));
      } else if (sp_.IsControl(id) || sp_.IsUnknown(id)) {
        bytes_[size_t(id)] = p;
      } else {
        bytes_[size_t(id)] = replace_all(p, kMetaSpace, " ");
      }
    }
    // The model's normalizer spec is not exposed by the library; whether it adds a dummy
    // prefix shows in how it encodes one letter.
    std::vector<std::string> probe;
    if (sp_.Encode("a", &probe).ok() && !probe.empty() && probe[0].starts_with(kMetaSpace))
      leading_spaces_to_strip_ = 1;
    set_specials(sp_.bos_id(), sp_.eos_id(), /*add_bos=*/true);
  }

  std::vector<int32_t> encode(std::string_view text, bool add_bos) const override {
    require_input_utf8(text);
    std::vector<int32_t> out;
    if (add_bos && bos_ >= 0) out.push_back(bos_);
    // libsentencepiece holds ~150 bytes per input byte while it encodes, so a long text is
    // encoded in pieces cut at spaces, where the result provably does not change (checked
    // around each cut); short texts, the common case, go whole.
    size_t start = 0;
    while (text.size() - start > kChunkBytes) {
      const size_t cut = find_cut(text, start + kChunkBytes / 2);
      if (cut == std::string_view::npos) break;
      append(text.substr(start, cut - start), out);
      start = cut + size_t(leading_spaces_to_strip_);
    }
    append(text.substr(start), out);
    return out;
  }

  int32_t token_id(std::string_view piece) const override {
    const int id = sp_.PieceToId(piece);
    // PieceToId answers unk for pieces it does not know.
    return id >= 0 && id < vocab_size() && pieces_[size_t(id)] == piece ? id : -1;
  }

 private:
  static constexpr size_t kChunkBytes = size_t(1) << 20;
  static constexpr size_t kCheckBytes = 256;  // context encoded both ways around a cut

  void append(std::string_view text, std::vector<int32_t>& out) const {
    std::vector<int> ids;
    const auto status = sp_.Encode(text, &ids);
    if (!status.ok()) fail("{}: encode failed: {}", source_, one_line(status.ToString()));
    out.insert(out.end(), ids.begin(), ids.end());
  }

  std::vector<int> encode_plain(std::string_view text) const {
    std::vector<int> ids;
    if (!sp_.Encode(text, &ids).ok()) ids.clear();
    return ids;
  }

  // A space at or after `from` (and within the next chunk) where encoding the text before it and
  // the text from it (the space itself dropped when the model adds a dummy prefix, which stands
  // for it) gives the same ids as encoding across it; npos if none is found.
  size_t find_cut(std::string_view text, size_t from) const {
    const size_t limit = std::min(text.size(), from + kChunkBytes / 2);
    for (int tries = 0; tries < 64 && from < limit; ++tries) {
      const size_t cut = text.find(' ', from);
      if (cut == std::string_view::npos || cut >= limit) return std::string_view::npos;
      from = cut + 1;
      // Both sides need enough context, and a run of spaces is no place to cut.
      if (cut < kCheckBytes || cut + kCheckBytes >= text.size() || text[cut + 1] == ' ' ||
          text[cut - 1] == ' ')
        continue;
      size_t lo = cut - kCheckBytes, hi = cut + kCheckBytes;
      while (lo > 0 && (static_cast<unsigned char>(text[lo]) & 0xC0) == 0x80) --lo;
      while (hi < text.size() && (static_cast<unsigned char>(text[hi]) & 0xC0) == 0x80) ++hi;
      // Start the context at a space too, so its own dummy prefix matches the text's.
      const size_t ctx = text.find(' ', lo);
      if (ctx == std::string_view::npos || ctx >= cut) continue;
      const size_t ctx_start = ctx + size_t(leading_spaces_to_strip_);
      std::vector<int> whole = encode_plain(text.substr(ctx_start, hi - ctx_start));
      std::vector<int> left = encode_plain(text.substr(ctx_start, cut - ctx_start));
      const size_t right_start = cut + size_t(leading_spaces_to_strip_);
      const std::vector<int> right = encode_plain(text.substr(right_start, hi - right_start));
      left.insert(left.end(), right.begin(), right.end());
      if (!whole.empty() && left == whole) return cut;
    }
    return std::string_view::npos;
  }

  sentencepiece::SentencePieceProcessor sp_;
};

}  // namespace

std::unique_ptr<TokenizerBase> load_sentencepiece(const std::filesystem::path& model_file) {
  return std::make_unique<SentencePieceTokenizer>(model_file);
}

}  // namespace qf::tok

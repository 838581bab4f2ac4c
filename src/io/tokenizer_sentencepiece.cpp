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

  void encode_text(std::string_view text, std::vector<int32_t>& out) const override {
    std::vector<int> ids;
    const auto status = sp_.Encode(text, &ids);
    if (!status.ok()) fail("{}: encode failed: {}", source_, one_line(status.ToString()));
    out.insert(out.end(), ids.begin(), ids.end());
  }

  int32_t token_id(std::string_view piece) const override {
    const int id = sp_.PieceToId(piece);
    // PieceToId answers unk for pieces it does not know.
    return id >= 0 && id < vocab_size() && pieces_[size_t(id)] == piece ? id : -1;
  }

 private:
  sentencepiece::SentencePieceProcessor sp_;
};

}  // namespace

std::unique_ptr<TokenizerBase> load_sentencepiece(const std::filesystem::path& model_file) {
  return std::make_unique<SentencePieceTokenizer>(model_file);
}

}  // namespace qf::tok

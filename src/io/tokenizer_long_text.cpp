// Encoding long texts in pieces. libsentencepiece holds ~150 bytes per input byte while it
// encodes, the Hugging Face path ~20, so a calibration or evaluation file of hundreds of MB would
// take gigabytes if encoded in one call. A long text is cut at spaces where the ids provably do
// not change: around each candidate cut, a window is encoded whole and in two parts, and the cut
// is used only if both give the same ids. Tokenizers whose pieces may cross a space (or that
// treat a piece's start specially) fail that check and get no cut there; short texts, the
// common case, are encoded whole.
#include "core/error.h"
#include "io/tokenizer_internal.h"

#include <algorithm>

namespace qf::tok {
namespace {

constexpr size_t kCheckBytes = 256;  // context encoded both ways on each side of a cut

bool continuation_byte(char c) { return (static_cast<unsigned char>(c) & 0xC0) == 0x80; }

}  // namespace

size_t& long_text_chunk_bytes() {
  static size_t bytes = size_t(1) << 20;
  return bytes;
}

std::vector<int32_t> TokenizerBase::encode(std::string_view text, bool add_bos) const {
  require_input_utf8(text);
  std::vector<int32_t> out;
  if (add_bos && bos_ >= 0) out.push_back(bos_);
  const size_t chunk = long_text_chunk_bytes();
  size_t start = 0;
  while (text.size() - start > chunk) {
    const size_t cut = find_cut(text, start + chunk / 2);
    if (cut == std::string_view::npos) break;
    encode_text(text.substr(start, cut - start), out);
    // A tokenizer that puts a space before the first word stands for the space at the cut.
    start = cut + size_t(leading_spaces_to_strip_);
  }
  encode_text(text.substr(start), out);
  return out;
}

// A space at or after `from` (within half a chunk) where encoding the text before it and the
// text from it (the space itself dropped when the tokenizer adds one at the start) gives the
// same ids as encoding across it; npos if none is found.
size_t TokenizerBase::find_cut(std::string_view text, size_t from) const {
  const size_t limit = std::min(text.size(), from + long_text_chunk_bytes() / 2);
  std::vector<int32_t> whole, parts;
  for (int tries = 0; tries < 64 && from < limit; ++tries) {
    const size_t cut = text.find(' ', from);
    if (cut == std::string_view::npos || cut >= limit) return std::string_view::npos;
    from = cut + 1;
    // Both sides need context, and a run of spaces is no place to cut.
    if (cut < kCheckBytes || cut + kCheckBytes >= text.size() || text[cut + 1] == ' ' ||
        text[cut - 1] == ' ')
      continue;
    size_t hi = cut + kCheckBytes;
    while (hi < text.size() && continuation_byte(text[hi])) ++hi;
    // The context starts at a space too, so that it begins the way a piece does.
    const size_t ctx = text.find(' ', cut - kCheckBytes);
    if (ctx == std::string_view::npos || ctx >= cut) continue;
    const size_t ctx_start = ctx + size_t(leading_spaces_to_strip_);
    const size_t right_start = cut + size_t(leading_spaces_to_strip_);
    try {
      whole.clear();
      parts.clear();
      encode_text(text.substr(ctx_start, hi - ctx_start), whole);
      encode_text(text.substr(ctx_start, cut - ctx_start), parts);
      encode_text(text.substr(right_start, hi - right_start), parts);
    } catch (const Error&) {
      continue;
    }
    if (!whole.empty() && parts == whole) return cut;
  }
  return std::string_view::npos;
}

}  // namespace qf::tok

// What the tokenizer harnesses do with a tokenizer that loaded: encode and decode a fixed text
// with special-token look-alikes, multi-byte characters and digits, and look every id up.
#pragma once

#include "io/tokenizer.h"

#include <cstdlib>
#include <string_view>

namespace qf::fuzz {

inline void exercise(const Tokenizer& tok) {
  static constexpr std::string_view kText =
      "Hello, world!  It's 2024:\n\t<s> </s> <|endoftext|> <unk> caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac"
      " \xf0\x9f\x98\x80 a b ab";
  const int32_t n = tok.vocab_size();
  if (n < 0) std::abort();
  for (bool bos : {false, true}) {
    const auto ids = tok.encode(kText, bos);
    for (int32_t id : ids)
      if (id < 0 || id >= n) std::abort();
    (void)tok.decode(ids);
    int32_t prev = -1;
    for (int32_t id : ids) {
      (void)tok.decode_next(prev, id);
      prev = id;
    }
  }
  for (int32_t id = 0; id < n && id < 1024; ++id) (void)tok.token_id(tok.piece(id));
  (void)tok.bos_id();
  (void)tok.eos_id();
  (void)tok.add_bos_by_default();
}

}  // namespace qf::fuzz

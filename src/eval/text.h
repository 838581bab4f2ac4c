// Evaluation text: a UTF-8 file, optionally cut to its first N characters (code points, as
// Python's str slicing counts them, which the fixtures' reference protocol uses).
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace qf {

class Tokenizer;

// Reads `path`; max_chars > 0 keeps only the first max_chars code points. Throws qf::Error naming
// the file for an unreadable file or bytes that are not UTF-8 (with the offset).
std::string read_eval_text(const std::filesystem::path& path, int64_t max_chars);

// The evaluation protocol's token stream (`qforge eval`, `tune --eval-text`): read_eval_text's
// text encoded with BOS once at the start when the tokenizer has one. Throws as read_eval_text.
std::vector<int32_t> eval_text_ids(const std::filesystem::path& path, int64_t max_chars,
                                   const Tokenizer& tokenizer);

}  // namespace qf

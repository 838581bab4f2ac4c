// Calibration text to token windows: plain text or JSON Lines files (several allowed), tokenized
// with the model's tokenizer, cut into fixed-length windows, a deterministic subset chosen by seed.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace qf {

class Tokenizer;

struct CalibrationOptions {
  std::vector<std::filesystem::path> files;  // .jsonl / .json lines with a "text" field, else plain text
  int64_t samples = 128;                     // windows to use (--calib-samples)
  int64_t seq_len = 512;                     // tokens per window, BOS included (--calib-seq)
  uint64_t seed = 0;                         // which windows (--seed)
};

struct CalibrationData {
  std::vector<std::vector<int32_t>> windows;  // each exactly seq_len tokens, starting with BOS
  int64_t tokens_available = 0;               // tokens in all documents
  std::vector<std::string> warnings;          // e.g. fewer windows than asked for

  int64_t tokens() const {
    int64_t n = 0;
    for (const auto& w : windows) n += int64_t(w.size());
    return n;
  }
};

// Reads and tokenizes the files. Each document (a JSON line's "text", or a whole plain-text file)
// is tokenized on its own without BOS and the documents are concatenated; the stream is cut into
// non-overlapping windows of seq_len - 1 tokens, each prefixed with BOS (when the tokenizer has
// one); a seeded shuffle picks `samples` of them, kept in stream order. Throws qf::Error naming
// the file for unreadable files, invalid UTF-8, a JSON line without a string "text", or text too
// short for a single window.
CalibrationData load_calibration_data(const CalibrationOptions& options, const Tokenizer& tokenizer);

}  // namespace qf

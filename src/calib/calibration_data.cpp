#include "calib/calibration_data.h"

#include "core/error.h"
#include "core/mapped_file.h"
#include "io/json_file.h"
#include "io/tokenizer.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>
#include <numeric>
#include <random>
#include <sstream>

namespace fs = std::filesystem;

namespace qf {
namespace {

// Offset of the first byte that is not part of valid UTF-8, or npos.
size_t invalid_utf8_offset(const std::string& s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    size_t len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
    if (len == 0 || i + len > s.size()) return i;
    for (size_t k = 1; k < len; ++k)
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return i;
    // Overlong forms and surrogates.
    const uint32_t b1 = static_cast<unsigned char>(len > 1 ? s[i + 1] : 0);
    if ((len == 2 && c < 0xC2) || (len == 3 && c == 0xE0 && b1 < 0xA0) ||
        (len == 3 && c == 0xED && b1 >= 0xA0) || (len == 4 && c == 0xF0 && b1 < 0x90) ||
        (len == 4 && c > 0xF4) || (len == 4 && c == 0xF4 && b1 >= 0x90))
      return i;
    i += len;
  }
  return std::string::npos;
}

std::string read_all(const fs::path& path) {
  return read_regular_file(path, "the calibration file", uint64_t(1) << 30);
}

bool is_json_lines(const fs::path& path, const std::string& text) {
  const std::string ext = path.extension().string();
  if (ext == ".jsonl" || ext == ".json") return true;
  const size_t first = text.find_first_not_of(" \t\r\n");
  return first != std::string::npos && text[first] == '{';
}

std::vector<std::string> documents_of(const fs::path& path) {
  std::string text = read_all(path);
  if (size_t bad = invalid_utf8_offset(text); bad != std::string::npos)
    fail("{}: not UTF-8 text (invalid byte at offset {})", path.string(), bad);
  if (!is_json_lines(path, text)) {
    std::vector<std::string> one;
    one.push_back(std::move(text));  // a copy would double the memory of a large file
    return one;
  }
  std::vector<std::string> docs;
  std::istringstream lines(text);
  std::string line;
  for (int64_t n = 1; std::getline(lines, line); ++n) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const nlohmann::json j = parse_json_text(line, fmt::format("{}:{}", path.string(), n));
    if (!j.is_object() || !j.contains("text") || !j["text"].is_string())
      fail("{}:{}: JSON line has no string field \"text\"", path.string(), n);
    docs.push_back(j["text"].get<std::string>());
  }
  return docs;
}

}  // namespace

CalibrationData load_calibration_data(const CalibrationOptions& o, const Tokenizer& tokenizer) {
  if (o.files.empty()) fail("no calibration files given (--calib FILE)");
  if (o.samples <= 0 || o.seq_len < 2) fail("--calib-samples must be > 0 and --calib-seq >= 2");
  std::vector<int32_t> stream;
  for (const auto& path : o.files)
    for (const auto& doc : documents_of(path)) {
      const auto ids = tokenizer.encode(doc, /*add_bos=*/false);
      stream.insert(stream.end(), ids.begin(), ids.end());
    }
  CalibrationData data;
  data.tokens_available = int64_t(stream.size());
  const int32_t bos = tokenizer.bos_id();
  const int64_t body = bos >= 0 ? o.seq_len - 1 : o.seq_len;
  const int64_t available = int64_t(stream.size()) / body;
  if (available == 0)
    fail("{}: calibration text has {} tokens, fewer than one window of {}", o.files.front().string(),
         stream.size(), o.seq_len);
  std::vector<int64_t> order(static_cast<size_t>(available));
  std::iota(order.begin(), order.end(), 0);
  std::mt19937_64 rng(o.seed);
  // Fisher-Yates with our own index draw: std::shuffle's use of the engine is unspecified, so
  // the selection would differ between standard libraries.
  for (int64_t i = available - 1; i > 0; --i)
    std::swap(order[size_t(i)], order[size_t(rng() % uint64_t(i + 1))]);
  const int64_t take = std::min(o.samples, available);
  if (take < o.samples)
    data.warnings.push_back(fmt::format("calibration text holds {} windows of {} tokens; using all "
                                        "of them instead of {}",
                                        available, o.seq_len, o.samples));
  order.resize(size_t(take));
  std::sort(order.begin(), order.end());
  for (int64_t w : order) {
    std::vector<int32_t> window;
    window.reserve(size_t(o.seq_len));
    if (bos >= 0) window.push_back(bos);
    window.insert(window.end(), stream.begin() + w * body, stream.begin() + (w + 1) * body);
    data.windows.push_back(std::move(window));
  }
  return data;
}

}  // namespace qf

#include "io/json_file.h"

#include "core/error.h"
#include "io/io_util.h"

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace qf {
namespace {

struct TooDeep {};

template <typename Json>
Json parse_bounded(std::string_view text, const std::string& label, int max_depth) {
  try {
    return Json::parse(text.begin(), text.end(),
                       [max_depth](int depth, nlohmann::json::parse_event_t, Json&) {
                         // depth counts from 0 at the top level
                         if (depth >= max_depth) throw TooDeep{};
                         return true;
                       });
  } catch (const TooDeep&) {
    fail("{}: JSON nests deeper than {} levels", label, max_depth);
  } catch (const nlohmann::json::exception& e) {
    fail("{}: invalid JSON: {}", label, json_error_reason(e));
  }
}

}  // namespace

nlohmann::json parse_json_text(std::string_view text, const std::string& label, int max_depth) {
  return parse_bounded<nlohmann::json>(text, label, max_depth);
}

nlohmann::ordered_json parse_ordered_json_text(std::string_view text, const std::string& label,
                                               int max_depth) {
  return parse_bounded<nlohmann::ordered_json>(text, label, max_depth);
}

void write_json_file(const std::filesystem::path& path, const nlohmann::ordered_json& json) {
  const std::string text = json.dump(4) + "\n";
  const std::filesystem::path tmp = path.string() + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) fail("{}: cannot create: {}", tmp.string(), std::strerror(errno));
  const bool written = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  const int write_errno = errno;
  const bool closed = std::fclose(f) == 0;
  if (!written || !closed) {
    const int e = written ? errno : write_errno;
    std::remove(tmp.c_str());
    fail("{}: write failed: {}", path.string(), std::strerror(e));
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) fail("{}: cannot rename into place: {}", path.string(), ec.message());
}

void write_text_file(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) fail("{}: cannot create: {}", tmp, std::strerror(errno));
  const bool written = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  const bool closed = std::fclose(f) == 0;
  if (!written || !closed) {
    std::remove(tmp.c_str());
    fail("{}: write failed", path);
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) fail("{}: cannot rename into place: {}", path, ec.message());
}

}  // namespace qf

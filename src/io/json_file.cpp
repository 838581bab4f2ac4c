#include "io/json_file.h"

#include "core/error.h"

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace qf {

void require_json_depth(std::string_view text, const std::string& label) {
  size_t depth = 0;
  bool in_string = false, escaped = false;
  for (const char c : text) {
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxJsonDepth)
        fail("{}: JSON nested deeper than {} levels", label, kMaxJsonDepth);
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
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

}  // namespace qf

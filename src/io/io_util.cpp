// Helpers shared by the io/ sources: quoting untrusted names, checked size arithmetic, the
// writers' stdio steps.
#include "io/io_util.h"

#include "core/error.h"

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <limits>

#include <unistd.h>

namespace qf {

std::string quote_name(std::string_view s) {
  // Names come from untrusted files: escape control bytes so messages stay on one line, and cut
  // absurdly long names so a fuzzed header cannot produce a megabyte-long message.
  constexpr size_t kMax = 200;
  std::string out = "'";
  for (size_t i = 0; i < s.size() && i < kMax; ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c == 0x7f) out += fmt::format("\\x{:02x}", c);
    else if (c == '\'' || c == '\\') (out += '\\') += char(c);
    else out += char(c);
  }
  if (s.size() > kMax) out += "...";
  out += '\'';
  return out;
}

std::string one_line(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (const char ch : s) {
    const unsigned char c = static_cast<unsigned char>(ch);
    out += (c < 0x20 || c == 0x7f) ? ' ' : ch;
  }
  return out;
}

std::string json_error_reason(const std::exception& e) {
  std::string_view what = e.what();
  if (const size_t p = what.find("] "); what.starts_with("[json.exception.") && p != what.npos)
    what.remove_prefix(p + 2);
  return one_line(what);
}

std::optional<uint64_t> checked_nbytes(const Shape& shape, DType dtype) {
  constexpr uint64_t kLimit = uint64_t(std::numeric_limits<int64_t>::max());
  uint64_t n = 1;
  for (const int64_t d : shape) {
    if (d < 0 || __builtin_mul_overflow(n, uint64_t(d), &n) || n > kLimit) return std::nullopt;
  }
  if (__builtin_mul_overflow(n, uint64_t(dtype_size(dtype)), &n) || n > kLimit)
    return std::nullopt;
  return n;
}

void fwrite_all(std::FILE* f, const void* data, size_t n, const std::filesystem::path& path) {
  if (n == 0) return;
  errno = 0;
  if (std::fwrite(data, 1, n, f) != n) {
    // stdio sets errno on the failing write(2); a short write without one is still a failure.
    const int e = errno ? errno : EIO;
    fail("{}: write failed: {}", path.string(), std::strerror(e));
  }
}

void close_synced(std::FILE* f, const std::filesystem::path& path) {
  int err = 0;
  errno = 0;
  if (std::fflush(f) != 0) err = errno ? errno : EIO;
  // fsync on a pipe or character device fails with EINVAL / EROFS: nothing to sync there.
  if (!err && ::fsync(::fileno(f)) != 0 && errno != EINVAL && errno != EROFS) err = errno;
  if (std::fclose(f) != 0 && !err) err = errno ? errno : EIO;
  if (err) fail("{}: write failed: {}", path.string(), std::strerror(err));
}

}  // namespace qf

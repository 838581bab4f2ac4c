#include "io/staged_directory.h"

#include "core/error.h"

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <string>

namespace fs = std::filesystem;

namespace qf {
namespace {

constexpr std::string_view kTmpTag = ".qforge-tmp-";

// The pid in ".<name>.qforge-tmp-<pid>" or ".<name>.qforge-tmp-<pid>-old", or 0.
pid_t staging_pid(const std::string& name) {
  if (name.empty() || name[0] != '.') return 0;
  const size_t at = name.rfind(kTmpTag);
  if (at == std::string::npos) return 0;
  std::string_view rest = std::string_view(name).substr(at + kTmpTag.size());
  if (rest.ends_with("-old")) rest.remove_suffix(4);
  long pid = 0;
  const auto [end, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), pid);
  if (ec != std::errc() || end != rest.data() + rest.size() || pid <= 0) return 0;
  return pid_t(pid);
}

bool process_alive(pid_t pid) { return ::kill(pid, 0) == 0 || errno == EPERM; }

// true if `inner` is `outer` or lies below it (both made absolute and normalised).
bool is_within(const fs::path& inner, const fs::path& outer) {
  std::error_code ec;
  const fs::path a = fs::weakly_canonical(inner, ec), b = fs::weakly_canonical(outer, ec);
  auto ai = a.begin();
  for (auto bi = b.begin(); bi != b.end(); ++bi, ++ai) {
    if (bi->empty()) continue;  // trailing separator
    if (ai == a.end() || *ai != *bi) return false;
  }
  return true;
}

}  // namespace

StagedDirectory::StagedDirectory(fs::path final_path, bool force, const std::vector<fs::path>& inputs)
    : final_(std::move(final_path)), force_(force) {
  if (final_.filename().empty()) final_ = final_.parent_path();  // "out/" -> "out"
  std::error_code ec;
  if (fs::exists(final_, ec)) {
    if (!force_) fail("{}: output already exists (use --force to replace it)", final_.string());
    check_replaceable(inputs);
  }
  const fs::path parent = final_.has_parent_path() ? final_.parent_path() : fs::path(".");
  if (!fs::is_directory(parent, ec)) fail("{}: parent directory does not exist", final_.string());
  collect_stale(parent);
  tmp_ = parent / fmt::format(".{}{}{}", final_.filename().string(), kTmpTag, ::getpid());
  fs::remove_all(tmp_, ec);
  if (!fs::create_directory(tmp_, ec) || ec)
    fail("{}: cannot create temporary directory: {}", tmp_.string(), ec.message());
}

StagedDirectory::~StagedDirectory() {
  if (!committed_) {
    std::error_code ec;
    fs::remove_all(tmp_, ec);
  }
}

void StagedDirectory::check_replaceable(const std::vector<fs::path>& inputs) const {
  std::error_code ec;
  if (!fs::is_directory(final_, ec))
    fail("{}: exists and is not a directory; --force replaces only a previous output directory",
         final_.string());
  for (const fs::path& in : inputs)
    if (!in.empty() && is_within(in, final_))
      fail("{}: --force would delete the input {}", final_.string(), in.string());
  for (const auto& e : fs::directory_iterator(final_, ec))
    if (e.is_directory(ec) && !e.is_symlink(ec))
      fail("{}: --force replaces only a previous output (a directory of files), but {} is a "
           "directory; remove it yourself if it should go",
           final_.string(), e.path().string());
  if (ec) fail("{}: cannot list the existing output: {}", final_.string(), ec.message());
}

void StagedDirectory::collect_stale(const fs::path& parent) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(parent, ec)) {
    const pid_t pid = staging_pid(e.path().filename().string());
    if (pid == 0 || !e.is_directory(ec) || e.is_symlink(ec)) continue;
    if (pid == ::getpid()) continue;
    if (process_alive(pid)) {
      notes_.push_back(fmt::format("{}: staging directory of a running process (pid {}), left alone",
                                   e.path().string(), pid));
      continue;
    }
    std::error_code rm;
    fs::remove_all(e.path(), rm);
    notes_.push_back(rm ? fmt::format("{}: left by an interrupted run (pid {}); cannot remove it: {}",
                                      e.path().string(), pid, rm.message())
                        : fmt::format("{}: removed, left by an interrupted run (pid {})",
                                      e.path().string(), pid));
  }
}

void StagedDirectory::commit() {
  std::error_code ec;
  if (fs::exists(final_, ec)) {
    if (!force_) fail("{}: output already exists (use --force to replace it)", final_.string());
    // One step: the new output takes the final name and the old one takes the temporary name.
    if (::renameat2(AT_FDCWD, tmp_.c_str(), AT_FDCWD, final_.c_str(), RENAME_EXCHANGE) == 0) {
      committed_ = true;
      fs::remove_all(tmp_, ec);
      return;
    }
    if (errno != EINVAL && errno != ENOSYS && errno != ENOTSUP)
      fail("{}: cannot replace the existing output: {}", final_.string(), std::strerror(errno));
    const fs::path aside = fmt::format("{}-old", tmp_.string());
    fs::rename(final_, aside, ec);
    if (ec) fail("{}: cannot move the existing output aside: {}", final_.string(), ec.message());
    fs::rename(tmp_, final_, ec);
    if (ec) {
      std::error_code ignored;
      fs::rename(aside, final_, ignored);
      fail("{}: cannot rename the finished output into place: {}", final_.string(), ec.message());
    }
    committed_ = true;
    fs::remove_all(aside, ec);
    return;
  }
  fs::rename(tmp_, final_, ec);
  if (ec) fail("{}: cannot rename the finished output into place: {}", final_.string(), ec.message());
  committed_ = true;
}

}  // namespace qf

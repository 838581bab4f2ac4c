#include "io/staged_directory.h"

#include "core/error.h"

#include <unistd.h>

#include <fmt/format.h>

#include <string>

namespace fs = std::filesystem;

namespace qf {

StagedDirectory::StagedDirectory(fs::path final_path, bool force)
    : final_(std::move(final_path)), force_(force) {
  if (final_.filename().empty()) final_ = final_.parent_path();  // "out/" -> "out"
  std::error_code ec;
  if (fs::exists(final_, ec) && !force_)
    fail("{}: output already exists (use --force to replace it)", final_.string());
  const fs::path parent = final_.has_parent_path() ? final_.parent_path() : fs::path(".");
  if (!fs::is_directory(parent, ec)) fail("{}: parent directory does not exist", final_.string());
  tmp_ = parent / fmt::format(".{}.qforge-tmp-{}", final_.filename().string(), ::getpid());
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

void StagedDirectory::commit() {
  std::error_code ec;
  fs::path aside;
  if (fs::exists(final_, ec)) {
    if (!force_) fail("{}: output already exists (use --force to replace it)", final_.string());
    aside = fmt::format("{}-old", tmp_.string());
    fs::rename(final_, aside, ec);
    if (ec) fail("{}: cannot move the existing output aside: {}", final_.string(), ec.message());
  }
  fs::rename(tmp_, final_, ec);
  if (ec) {
    std::error_code ignored;
    if (!aside.empty()) fs::rename(aside, final_, ignored);
    fail("{}: cannot rename the finished output into place: {}", final_.string(), ec.message());
  }
  committed_ = true;
  if (!aside.empty()) fs::remove_all(aside, ec);
}

}  // namespace qf

// An output directory that is built under a temporary name beside its final path and renamed
// into place only when complete, so an interrupted or failed run never leaves a directory that
// looks like a finished checkpoint.
#pragma once

#include <filesystem>

namespace qf {

class StagedDirectory {
 public:
  // Creates `<parent>/.<name>.qforge-tmp-<pid>`. Throws qf::Error if `final_path` exists and
  // `force` is false, or if the temporary directory cannot be created.
  StagedDirectory(std::filesystem::path final_path, bool force);
  // Removes the temporary directory unless commit() succeeded.
  ~StagedDirectory();
  StagedDirectory(const StagedDirectory&) = delete;
  StagedDirectory& operator=(const StagedDirectory&) = delete;

  // Where to write the contents.
  const std::filesystem::path& path() const { return tmp_; }
  const std::filesystem::path& final_path() const { return final_; }

  // Moves the directory into place. With `force`, an existing final directory is replaced
  // (renamed aside first and removed only after the new one is in place).
  void commit();

 private:
  std::filesystem::path final_;
  std::filesystem::path tmp_;
  bool force_;
  bool committed_ = false;
};

}  // namespace qf

// An output directory that is built under a temporary name beside its final path and renamed
// into place only when complete, so an interrupted or failed run never leaves a directory that
// looks like a finished checkpoint.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace qf {

class StagedDirectory {
 public:
  // Creates `<parent>/.<name>.qforge-tmp-<pid>`. Staging directories that earlier runs left in
  // the same parent (interrupted by a signal or a crash) are removed when the process that made
  // them is gone, and reported in notes() either way.
  // Throws qf::Error naming the path if `final_path` exists and `force` is false; if, with
  // `force`, it is not a directory, holds a subdirectory (a previous output is a flat directory
  // of files), or is or contains one of `inputs` (replacing it would delete an input); or if the
  // temporary directory cannot be created.
  StagedDirectory(std::filesystem::path final_path, bool force,
                  const std::vector<std::filesystem::path>& inputs = {});
  // Removes the temporary directory unless commit() succeeded.
  ~StagedDirectory();
  StagedDirectory(const StagedDirectory&) = delete;
  StagedDirectory& operator=(const StagedDirectory&) = delete;

  // Where to write the contents.
  const std::filesystem::path& path() const { return tmp_; }
  const std::filesystem::path& final_path() const { return final_; }
  // One line per stale staging directory found (removed, or still in use by a live process).
  const std::vector<std::string>& notes() const { return notes_; }

  // Moves the directory into place. With `force`, an existing final directory is replaced by an
  // atomic exchange (Linux renameat2), so the path always names either the old or the new
  // output; where the filesystem cannot exchange, the old one is renamed aside first.
  void commit();

 private:
  void check_replaceable(const std::vector<std::filesystem::path>& inputs) const;
  void collect_stale(const std::filesystem::path& parent);

  std::filesystem::path final_;
  std::filesystem::path tmp_;
  bool force_;
  bool committed_ = false;
  std::vector<std::string> notes_;
};

}  // namespace qf

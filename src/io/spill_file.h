// An anonymous scratch file for results that are produced long before they can be written (the
// per-layer output of calibrated algorithms, written later in checkpoint order), so memory holds
// one layer's results instead of the whole model's.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <vector>

namespace qf {

class SpillFile {
 public:
  // Where a blob lives in the file.
  struct Extent {
    uint64_t offset = 0;
    uint64_t size = 0;
  };

  // Creates an unnamed file in `dir` (O_TMPFILE where the filesystem allows it, otherwise a
  // named file unlinked at once), so nothing is left behind whatever happens. Throws qf::Error
  // naming `dir` if it cannot be created.
  explicit SpillFile(const std::filesystem::path& dir);
  ~SpillFile();
  SpillFile(const SpillFile&) = delete;
  SpillFile& operator=(const SpillFile&) = delete;

  // Appends `bytes`. Throws qf::Error naming the directory and the reason (ENOSPC: disk full).
  Extent put(std::span<const uint8_t> bytes);
  // Reads back what put() returned. Throws qf::Error on a short read.
  std::vector<uint8_t> get(Extent e) const;

  // Bytes appended so far.
  uint64_t size() const { return end_; }

 private:
  std::filesystem::path dir_;
  int fd_ = -1;
  uint64_t end_ = 0;
};

}  // namespace qf

// A read-only memory map of a whole file. Pages are never written; `release` tells the kernel
// that a range is done so that resident memory does not grow while a large file is streamed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>

namespace qf {

class MappedFile {
 public:
  // Maps `path` read-only. Throws qf::Error naming the file if it cannot be opened or mapped,
  // or is not a regular file (a FIFO, device or directory is refused without blocking).
  // An empty file maps to size() == 0 and data() == nullptr.
  static MappedFile open(const std::filesystem::path& path);
  // A read-only anonymous mapping holding a copy of `bytes`, named `path` (the file it was
  // derived from, for messages): bytes computed from a file (rows put in another order) that
  // readers take like the file's own. release() keeps its pages (dropping anonymous pages
  // would lose them). Throws qf::Error naming `path` if the memory cannot be mapped.
  static MappedFile copy_of(std::span<const std::byte> bytes, const std::filesystem::path& path);

  MappedFile() = default;
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  ~MappedFile();

  const std::byte* data() const { return data_; }
  size_t size() const { return size_; }
  const std::filesystem::path& path() const { return path_; }

  // Drops the pages covering [offset, offset + length) from this process's resident set
  // (the bytes stay readable and are faulted in again if touched).
  void release(size_t offset, size_t length) const;

 private:
  std::filesystem::path path_;
  std::byte* data_ = nullptr;
  size_t size_ = 0;
  bool anonymous_ = false;  // copy_of: no file behind the pages
};

// The whole of a regular file as bytes (a FIFO or device is refused without blocking, so
// `--calib /dev/zero` fails at once). Throws qf::Error "<path>: <what> is N bytes, more than the
// M this reads" beyond max_bytes.
std::string read_regular_file(const std::filesystem::path& path, std::string_view what,
                              uint64_t max_bytes);

}  // namespace qf

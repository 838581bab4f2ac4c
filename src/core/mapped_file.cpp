#include "core/mapped_file.h"

#include "core/error.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

namespace qf {

MappedFile MappedFile::open(const std::filesystem::path& path) {
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer forever; regular
  // files ignore the flag.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) fail("{}: cannot open: {}", path.string(), std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int e = errno;
    ::close(fd);
    fail("{}: cannot stat: {}", path.string(), std::strerror(e));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    fail("{}: not a regular file", path.string());
  }
  MappedFile f;
  f.path_ = path;
  f.size_ = size_t(st.st_size);
  if (f.size_ > 0) {
    void* p = ::mmap(nullptr, f.size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      const int e = errno;
      ::close(fd);
      fail("{}: cannot map: {}", path.string(), std::strerror(e));
    }
    f.data_ = static_cast<std::byte*>(p);
  }
  ::close(fd);
  return f;
}

MappedFile::MappedFile(MappedFile&& other) noexcept { *this = std::move(other); }

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    if (data_) ::munmap(data_, size_);
    path_ = std::move(other.path_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(data_, size_);
}

void MappedFile::release(size_t offset, size_t length) const {
  if (!data_ || length == 0 || offset >= size_) return;
  const size_t page = size_t(::sysconf(_SC_PAGESIZE));
  // Only whole pages inside the range: neighbours may still be in use.
  size_t begin = (offset + page - 1) / page * page;
  size_t end = std::min(offset + length, size_);
  if (end == size_) end = (size_ + page - 1) / page * page;
  else end = end / page * page;
  if (end > begin) ::madvise(data_ + begin, end - begin, MADV_DONTNEED);
}

std::string read_regular_file(const std::filesystem::path& path, std::string_view what,
                              uint64_t max_bytes) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) fail("{}: cannot open {}: not found", path.string(), what);
  const MappedFile f = MappedFile::open(path);
  if (f.size() > max_bytes)
    fail("{}: {} is {} bytes, more than the {} this reads", path.string(), what, f.size(),
         max_bytes);
  return std::string(reinterpret_cast<const char*>(f.data()), f.size());
}

}  // namespace qf

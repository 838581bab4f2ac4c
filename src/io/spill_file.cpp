#include "io/spill_file.h"

#include "core/error.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <string>
#include <unistd.h>

namespace qf {

SpillFile::SpillFile(const std::filesystem::path& dir) : dir_(dir) {
#ifdef O_TMPFILE
  fd_ = ::open(dir.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
#endif
  if (fd_ < 0) {
    std::string name = (dir / ".qforge-spill-XXXXXX").string();
    fd_ = ::mkstemp(name.data());
    if (fd_ >= 0) ::unlink(name.c_str());
  }
  if (fd_ < 0) fail("{}: cannot create a scratch file: {}", dir.string(), std::strerror(errno));
}

SpillFile::~SpillFile() {
  if (fd_ >= 0) ::close(fd_);
}

SpillFile::Extent SpillFile::put(std::span<const uint8_t> bytes) {
  const Extent e{end_, bytes.size()};
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::pwrite(fd_, bytes.data() + done, bytes.size() - done, off_t(end_ + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      fail("{}: cannot write scratch data ({} bytes): {}", dir_.string(), bytes.size(),
           n < 0 ? std::strerror(errno) : "no space written");
    done += size_t(n);
  }
  end_ += bytes.size();
  return e;
}

std::vector<uint8_t> SpillFile::get(Extent e) const {
  std::vector<uint8_t> out(static_cast<size_t>(e.size));
  size_t done = 0;
  while (done < out.size()) {
    const ssize_t n = ::pread(fd_, out.data() + done, out.size() - done, off_t(e.offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) fail("{}: scratch data cannot be read back", dir_.string());
    done += size_t(n);
  }
  // Written data is needed once; drop its pages so the cache does not hold the model.
  ::posix_fadvise(fd_, off_t(e.offset), off_t(e.size), POSIX_FADV_DONTNEED);
  return out;
}

}  // namespace qf

#include "core/mapped_file.h"

#include "core/error.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <string>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <mutex>
#include <utility>

namespace qf {
namespace {

// A file that shrinks while it is mapped (truncated or rewritten by another program) makes the
// next read of a page past its new end raise SIGBUS. The handler turns that into qforge's
// one-line error naming the file: it finds the mapping in this table with async-signal-safe
// reads only, writes the message and exits.
struct MappedRange {
  std::atomic<uintptr_t> begin{0};
  std::atomic<uintptr_t> end{0};
  char path[480] = {};
};
constexpr size_t kRanges = 256;
MappedRange g_ranges[kRanges];

void write_all(const char* s, size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(STDERR_FILENO, s, n);
    if (w <= 0) return;
    s += w;
    n -= size_t(w);
  }
}

void on_sigbus(int sig, siginfo_t* info, void*) {
  const auto addr = reinterpret_cast<uintptr_t>(info->si_addr);
  for (const MappedRange& r : g_ranges) {
    const uintptr_t b = r.begin.load(std::memory_order_acquire);
    if (b != 0 && addr >= b && addr < r.end.load(std::memory_order_relaxed)) {
      const char head[] = "qforge: error: ";
      const char tail[] = ": the file changed size while it was being read (truncated or "
                          "rewritten by another program?)\n";
      write_all(head, sizeof(head) - 1);
      write_all(r.path, ::strnlen(r.path, sizeof(r.path)));
      write_all(tail, sizeof(tail) - 1);
      ::_exit(1);
    }
  }
  // Not one of our mappings: the default action (a crash with a core), as if unhandled.
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

void register_range(const std::byte* data, size_t size, const std::filesystem::path& path) {
  static std::once_flag installed;
  std::call_once(installed, [] {
    struct sigaction sa {};
    sa.sa_sigaction = on_sigbus;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    ::sigaction(SIGBUS, &sa, nullptr);
  });
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  for (MappedRange& r : g_ranges) {
    if (r.begin.load(std::memory_order_relaxed) != 0) continue;
    const std::string p = path.string();
    const size_t n = std::min(p.size(), sizeof(r.path) - 1);
    std::memcpy(r.path, p.data(), n);
    r.path[n] = '\0';
    r.end.store(reinterpret_cast<uintptr_t>(data) + size, std::memory_order_relaxed);
    r.begin.store(reinterpret_cast<uintptr_t>(data), std::memory_order_release);
    return;
  }
  // More live mappings than slots: such a file still reads correctly; only a truncation of it
  // would end in a plain SIGBUS.
}

void unregister_range(const std::byte* data) {
  for (MappedRange& r : g_ranges)
    if (r.begin.load(std::memory_order_relaxed) == reinterpret_cast<uintptr_t>(data))
      r.begin.store(0, std::memory_order_release);
}

void unmap(std::byte* data, size_t size) {
  unregister_range(data);
  ::munmap(data, size);
}

}  // namespace

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
    register_range(f.data_, f.size_, path);
  }
  ::close(fd);
  return f;
}

MappedFile MappedFile::copy_of(std::span<const std::byte> bytes, const std::filesystem::path& path) {
  MappedFile f;
  f.path_ = path;
  f.size_ = bytes.size();
  f.anonymous_ = true;
  if (f.size_ == 0) return f;
  void* p = ::mmap(nullptr, f.size_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) fail("{}: cannot map {} bytes of memory: {}", path.string(), f.size_, std::strerror(errno));
  std::memcpy(p, bytes.data(), f.size_);
  // Read-only like a file mapping, so a stray write faults instead of changing the model.
  ::mprotect(p, f.size_, PROT_READ);
  f.data_ = static_cast<std::byte*>(p);
  return f;
}

MappedFile::MappedFile(MappedFile&& other) noexcept { *this = std::move(other); }

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    if (data_) unmap(data_, size_);
    path_ = std::move(other.path_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    anonymous_ = std::exchange(other.anonymous_, false);
  }
  return *this;
}

MappedFile::~MappedFile() {
  if (data_) unmap(data_, size_);
}

void MappedFile::release(size_t offset, size_t length) const {
  if (!data_ || anonymous_ || length == 0 || offset >= size_) return;
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

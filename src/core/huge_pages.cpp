#include "core/huge_pages.h"

#include "core/error.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>

namespace qf {

namespace {
constexpr size_t kHugePage = size_t(2) << 20;
}

std::shared_ptr<const void> copy_to_huge_pages(const void* src, size_t n) {
  return fill_huge_pages(n, [&](void* dst) { std::memcpy(dst, src, n); });
}

std::shared_ptr<const void> fill_huge_pages(size_t n, const std::function<void(void*)>& fill) {
  if (n == 0) return nullptr;
  const size_t len = (n + kHugePage - 1) / kHugePage * kHugePage + kHugePage;  // + alignment slack
  void* m = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) fail("cannot allocate {} bytes for the weights (out of memory)", n);
  auto* a = reinterpret_cast<std::byte*>((reinterpret_cast<uintptr_t>(m) + kHugePage - 1) &
                                         ~uintptr_t(kHugePage - 1));
  const size_t used = (n + kHugePage - 1) / kHugePage * kHugePage;
#ifdef MADV_HUGEPAGE
  madvise(a, used, MADV_HUGEPAGE);  // a hint: failure leaves ordinary pages
#endif
  fill(a);
  mprotect(a, used, PROT_READ);
  return std::shared_ptr<const void>(a, [m, len](const void*) { munmap(m, len); });
}

void release_mapped_pages(const void* p, size_t n) {
  const auto page = uintptr_t(sysconf(_SC_PAGESIZE));
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(p) + page - 1) & ~(page - 1);
  const uintptr_t end = (reinterpret_cast<uintptr_t>(p) + n) & ~(page - 1);
  if (end > begin) madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
}

}  // namespace qf

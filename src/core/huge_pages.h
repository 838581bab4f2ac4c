// Weights the decode loop streams every token, moved into memory the kernel may back with 2 MB
// pages (transparent huge pages; Linux's default "madvise" mode grants them to regions that ask).
// With 4 KB pages every 4 KB of a product's weights costs a TLB miss: on a 2-core Zen 4 a
// Llama-1B Q4_0 decode read its weights at 82% of the STREAM figure from file-mapped 4 KB pages
// and at 96% from 2 MB pages (qforge bench, 31.9 -> 36.3 tok/s).
#pragma once

#include <cstddef>
#include <functional>
#include <memory>

namespace qf {

// A read-only copy of src[0, n) in anonymous memory aligned to 2 MB and advised for huge pages
// (where the system grants none it is ordinary memory: the copy is correct either way). The
// memory lives as long as the returned pointer. Throws qf::Error when the memory cannot be had.
std::shared_ptr<const void> copy_to_huge_pages(const void* src, size_t n);
// The same memory with its n bytes written by fill(dst): a layout conversion instead of a copy.
std::shared_ptr<const void> fill_huge_pages(size_t n, const std::function<void(void*)>& fill);

// Drops this process's pages wholly inside [p, p + n) of a read-only file mapping (they are
// read from the file again if touched), so that a copy does not hold the memory twice. Only for
// read-only file mappings: anonymous memory would read back as zeros.
void release_mapped_pages(const void* p, size_t n);

}  // namespace qf

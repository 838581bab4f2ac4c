// Weights copied into 2 MB pages hold the same bytes, and a read-only file mapping whose pages
// were released reads the file's bytes again.
#include "core/huge_pages.h"
#include "core/mapped_file.h"
#include "test_util.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>

namespace qf {
namespace {

TEST(HugePages, CopyHoldsTheSameBytesAlignedTo2MB) {
  std::string src(3 * 1024 * 1024 + 123, '\0');
  for (size_t i = 0; i < src.size(); ++i) src[i] = char(i * 2654435761u >> 13);
  const auto copy = copy_to_huge_pages(src.data(), src.size());
  ASSERT_NE(copy, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(copy.get()) % (2u << 20), 0u);
  EXPECT_EQ(std::memcmp(copy.get(), src.data(), src.size()), 0);
  EXPECT_EQ(copy_to_huge_pages(src.data(), 0), nullptr);
}

TEST(HugePages, ReleasedFilePagesReadTheFileAgain) {
  test::ScratchDir dir;
  const auto path = dir / "weights.bin";
  std::string bytes(1 << 20, '\0');
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = char(i % 251);
  test::write_file(path, bytes);
  const MappedFile f = MappedFile::open(path);
  const auto* p = reinterpret_cast<const char*>(f.data());
  ASSERT_EQ(std::memcmp(p, bytes.data(), bytes.size()), 0);
  release_mapped_pages(p + 100, bytes.size() - 200);  // whole pages inside only
  EXPECT_EQ(std::memcmp(p, bytes.data(), bytes.size()), 0);
}

}  // namespace
}  // namespace qf

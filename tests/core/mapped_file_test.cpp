// MappedFile: non-regular files are refused, and a file that shrinks while mapped ends in an
// error naming it instead of a SIGBUS crash.
#include "core/error.h"
#include "core/mapped_file.h"
#include "test_util.h"

#include <gtest/gtest.h>

#include <unistd.h>

namespace qf {
namespace {

TEST(MappedFile, RefusesWhatIsNotARegularFile) {
  test::ScratchDir dir;
  EXPECT_THROW(MappedFile::open(dir.path()), Error);
  EXPECT_THROW(MappedFile::open("/dev/zero"), Error);
  EXPECT_THROW(MappedFile::open(dir / "missing"), Error);
}

TEST(MappedFile, FileTruncatedWhileMappedIsAnErrorNamingIt) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  test::ScratchDir dir;
  const auto path = dir / "shard.safetensors";
  test::write_file(path, std::string(1 << 20, 'x'));
  const MappedFile f = MappedFile::open(path);
  EXPECT_EQ(char(f.data()[(1 << 20) - 1]), 'x');
  ASSERT_EQ(::truncate(path.c_str(), 4096), 0);
  EXPECT_EXIT(
      {
        volatile char c = char(f.data()[512 * 1024]);
        (void)c;
      },
      ::testing::ExitedWithCode(1), "shard.safetensors: the file changed size while it was being read");
}

}  // namespace
}  // namespace qf

// Size arguments (--max-shard-size, --target-size, --fit-memory): units, and values refused.
#include "cli/commands.h"
#include "core/error.h"

#include <gtest/gtest.h>

namespace qf::cli {
namespace {

TEST(SizeArg, Units) {
  EXPECT_EQ(parse_size("5GB"), 5'000'000'000u);
  EXPECT_EQ(parse_size("1.5 GiB"), 1'610'612'736u);
  EXPECT_EQ(parse_size("512mib"), 536'870'912u);
  EXPECT_EQ(parse_size("123"), 123u);
  EXPECT_EQ(parse_size("0.5"), 1u);
}

// Found by size_arg_fuzz: ".3" rounded to a size of 0 bytes.
TEST(SizeArg, FractionOfAByteIsRefused) {
  for (const char* s : {".3", "0.4B", "1e-300", "0.0001K"})
    EXPECT_THROW(parse_size(s), Error) << s;
  for (const char* s : {"0", "-1GB", "nan", "inf", "1e19", "5 parsecs", "GB", ""})
    EXPECT_THROW(parse_size(s), Error) << s;
}

}  // namespace
}  // namespace qf::cli

#include "io/spill_file.h"

#include "core/error.h"
#include "test_util.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <numeric>

namespace qf {
namespace {
using test::ScratchDir;

TEST(SpillFile, ReadsBackEveryBlobAndLeavesNoFile) {
  ScratchDir dir;
  {
    SpillFile f(dir.path());
    std::vector<uint8_t> a(1000), b(3);
    std::iota(a.begin(), a.end(), uint8_t(7));
    b = {1, 2, 3};
    const auto ea = f.put(a);
    const auto eb = f.put(b);
    const auto ee = f.put({});
    EXPECT_EQ(f.size(), 1003u);
    EXPECT_EQ(f.get(eb), b);
    EXPECT_EQ(f.get(ea), a);
    EXPECT_TRUE(f.get(ee).empty());
    EXPECT_TRUE(std::filesystem::is_empty(dir.path()));  // unnamed while in use
  }
  EXPECT_TRUE(std::filesystem::is_empty(dir.path()));
}

TEST(SpillFile, MissingDirectoryIsNamed) {
  ScratchDir dir;
  try {
    SpillFile f(dir.path() / "absent");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("absent"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace qf

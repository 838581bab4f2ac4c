// StagedDirectory: commit by rename or atomic exchange, refusals of --force that would lose
// data, and stale staging directories from interrupted runs.
#include "core/error.h"
#include "io/staged_directory.h"
#include "test_util.h"

#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <fstream>

namespace fs = std::filesystem;

namespace qf {
namespace {

void touch(const fs::path& p, const std::string& text = "x") {
  std::ofstream(p) << text;
}

TEST(StagedDirectory, CommitRenamesAndFailureLeavesNothing) {
  test::ScratchDir dir;
  {
    StagedDirectory s(dir / "out", false);
    touch(s.path() / "a");
    s.commit();
  }
  EXPECT_TRUE(fs::exists(dir / "out" / "a"));
  {
    StagedDirectory s(dir / "out2", false);
    touch(s.path() / "a");
  }  // not committed
  EXPECT_FALSE(fs::exists(dir / "out2"));
  for (const auto& e : fs::directory_iterator(dir.path()))
    EXPECT_EQ(e.path().filename().string().find("qforge-tmp"), std::string::npos) << e.path();
}

TEST(StagedDirectory, ForceReplacesAtomically) {
  test::ScratchDir dir;
  fs::create_directory(dir / "out");
  touch(dir / "out" / "old");
  EXPECT_THROW(StagedDirectory(dir / "out", false), Error);
  StagedDirectory s(dir / "out", true);
  touch(s.path() / "new");
  s.commit();
  EXPECT_TRUE(fs::exists(dir / "out" / "new"));
  EXPECT_FALSE(fs::exists(dir / "out" / "old"));
  for (const auto& e : fs::directory_iterator(dir.path()))
    EXPECT_EQ(e.path().filename(), "out") << e.path();
}

TEST(StagedDirectory, ForceNeverDeletesAnInputOrADirectoryTree) {
  test::ScratchDir dir;
  fs::create_directories(dir / "p" / "model");
  touch(dir / "p" / "model" / "config.json");
  // The output contains the input, or is the input.
  EXPECT_THROW(StagedDirectory(dir / "p", true, {dir / "p" / "model"}), Error);
  EXPECT_THROW(StagedDirectory(dir / "p" / "model", true, {dir / "p" / "model"}), Error);
  // Through a different spelling of the same path.
  EXPECT_THROW(StagedDirectory(dir / "p" / "." / "model" / "..", true, {dir / "p" / "model"}),
               Error);
  // A directory holding subdirectories is not a previous output.
  EXPECT_THROW(StagedDirectory(dir / "p", true, {}), Error);
  // A file is not replaced.
  touch(dir / "f");
  EXPECT_THROW(StagedDirectory(dir / "f", true, {}), Error);
  EXPECT_TRUE(fs::exists(dir / "p" / "model" / "config.json"));
  EXPECT_TRUE(fs::exists(dir / "f"));
}

TEST(StagedDirectory, StaleStagingFromADeadProcessIsRemovedAndReported) {
  test::ScratchDir dir;
  // A pid that is certainly gone: a child that has exited and been reaped.
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ::waitpid(child, nullptr, 0);
  const fs::path stale = dir / fmt::format(".out.qforge-tmp-{}", child);
  fs::create_directory(stale);
  touch(stale / "model.safetensors");
  const fs::path live = dir / fmt::format(".other.qforge-tmp-{}", ::getppid());
  fs::create_directory(live);
  StagedDirectory s(dir / "out", false);
  EXPECT_FALSE(fs::exists(stale));
  EXPECT_TRUE(fs::exists(live));
  ASSERT_EQ(s.notes().size(), 2u);
  std::string all = s.notes()[0] + "\n" + s.notes()[1];
  EXPECT_NE(all.find("removed, left by an interrupted run"), std::string::npos) << all;
  EXPECT_NE(all.find("running process"), std::string::npos) << all;
}

}  // namespace
}  // namespace qf

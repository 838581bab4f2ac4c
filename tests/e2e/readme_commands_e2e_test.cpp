// The README's commands run as written: scripts/check_readme.sh --fast (every command of the
// README's ```sh blocks that is not marked slow or skipped, and the fast figure and message
// checks) with this build's qforge. The full check (slow commands and figures too) is
// `scripts/check_readme.sh` by hand; see there.
#include "test_util.h"

#include <sys/wait.h>

#include <cstdlib>
#include <string>

namespace qf::test {
namespace {

TEST(ReadmeCommandsE2E, FastCheckPasses) {
  QF_REQUIRE_FIXTURES();
  if (std::system("python3 -c 'import sys; sys.exit(sys.version_info < (3, 8))' >/dev/null 2>&1") !=
      0)
    GTEST_SKIP() << "python3 (>= 3.8) not found; scripts/check_readme.sh needs it";
  ScratchDir io;
  const auto log = io / "check_readme.log";
  const std::string cmd = "cd '" + std::string(QFORGE_SOURCE_DIR) + "' && QFORGE_BINARY='" +
                          std::string(QFORGE_BINARY) + "' scripts/check_readme.sh --fast >'" +
                          log.string() + "' 2>&1 </dev/null";
  const int status = std::system(cmd.c_str());
  const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  const std::string out = read_file(log);
  EXPECT_EQ(code, 0) << out;
  EXPECT_NE(out.find(" 0 failed"), std::string::npos) << out;
  // The check ran commands, not just skips.
  EXPECT_NE(out.find("PASS"), std::string::npos) << out;
}

}  // namespace
}  // namespace qf::test

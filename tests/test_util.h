// Helpers shared by the tests: fixture paths, scratch directories, running the CLI.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <string>

namespace qf::test {

// ../shared/fixtures beside the source tree, or empty if absent (a user's clone).
std::filesystem::path fixtures_dir();

// Skips the current test with a message when the fixtures are absent.
#define QF_REQUIRE_FIXTURES()                                                          \
  do {                                                                                 \
    if (::qf::test::fixtures_dir().empty())                                            \
      GTEST_SKIP() << "../shared/fixtures not found next to the source tree; skipping"; \
  } while (0)

// A fresh, empty scratch directory, removed when the object dies.
class ScratchDir {
 public:
  ScratchDir();
  ~ScratchDir();
  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }

 private:
  std::filesystem::path path_;
};

struct CommandResult {
  int exit_code = -1;
  std::string out;  // stdout
  std::string err;  // stderr
};

// Runs the built qforge binary with `args` (a shell-quoted string), capturing both streams.
// `prefix` is prepended to the shell command line (for example "ulimit -f 100;").
CommandResult run_qforge(const std::string& args, const std::string& prefix = "");

// Writes bytes to a file (creating directories).
void write_file(const std::filesystem::path& path, const std::string& bytes);
std::string read_file(const std::filesystem::path& path);

}  // namespace qf::test

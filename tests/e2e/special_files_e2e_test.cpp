// Inputs that are not regular files (a FIFO, a character device) are refused at once with a
// one-line error naming them, never read until a writer appears or without end.
#include "test_util.h"

#include <gtest/gtest.h>

#include <sys/stat.h>

#include <filesystem>

namespace qf {
namespace {

namespace fs = std::filesystem;
using test::quote;
using test::run_qforge;

void expect_refused(const std::string& args, const std::string& path) {
  // `timeout` turns a hang into exit 124, which the checks below reject.
  const auto r = run_qforge(args, "timeout 60");
  EXPECT_NE(r.exit_code, 0) << args;
  EXPECT_NE(r.exit_code, 124) << "hung: " << args;
  EXPECT_NE(r.err.find(path + ": not a regular file"), std::string::npos) << r.err;
}

TEST(SpecialFilesE2E, FifosAndDevicesAreRefusedWithoutBlocking) {
  QF_REQUIRE_FIXTURES();
  test::ScratchDir dir;
  const fs::path model = test::model_dir("stories260K-hf");
  const fs::path fifo = dir / "fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  fs::create_directories(dir / "m");
  ASSERT_EQ(::mkfifo((dir / "m" / "config.json").c_str(), 0600), 0);
  expect_refused("inspect " + quote(dir / "m"), (dir / "m" / "config.json").string());
  expect_refused("eval ppl " + quote(model) + " --text /dev/zero --max-chars 100", "/dev/zero");
  expect_refused("eval ppl " + quote(model) + " --text " + quote(fifo), fifo.string());
  expect_refused("quantize " + quote(model) + " -o " + quote(dir / "o1") + " --algo gptq --calib " +
                     quote(fifo), fifo.string());
  expect_refused("quantize " + quote(model) + " -o " + quote(dir / "o2") + " --recipe /dev/zero",
                 "/dev/zero");
  EXPECT_FALSE(fs::exists(dir / "o1"));
  EXPECT_FALSE(fs::exists(dir / "o2"));
}

}  // namespace
}  // namespace qf

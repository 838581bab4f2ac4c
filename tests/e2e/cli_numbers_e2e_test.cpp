// Floating-point flags refuse NaN and infinities (CLI11's range checks let NaN through, and
// `generate --temp nan` once printed garbage).
#include "test_util.h"

#include <gtest/gtest.h>

namespace qf {
namespace {

TEST(CliNumbers, NanAndInfinityAreRefusedByName) {
  QF_REQUIRE_FIXTURES();
  const std::string m = test::quote(test::model_dir("stories260K-hf"));
  const struct {
    std::string args, flag;
  } cases[] = {
      {"generate " + m + " -p Once -n 2 --temp nan", "--temp: 'nan' is not a number"},
      {"generate " + m + " -p Once -n 2 --temp 0.5 --top-p nan", "--top-p: 'nan' is not a number"},
      {"generate " + m + " -p Once -n 2 --temp inf", "--temp: 'inf' is not a number"},
      {"quantize " + m + " -o /nonexistent/x --auto --target-bits nan",
       "--target-bits: 'nan' is not a number"},
      {"quantize " + m + " -o /nonexistent/x --auto --min-speedup -inf",
       "--min-speedup: '-inf' is not a number"},
      {"quantize " + m + " -o /nonexistent/x --smoothquant-alpha nan",
       "--smoothquant-alpha: 'nan' is not a number"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.args);
    const test::CommandResult r = test::run_qforge(c.args);
    EXPECT_NE(r.exit_code, 0);
    EXPECT_NE(r.err.find(c.flag), std::string::npos) << r.err;
  }
}

}  // namespace
}  // namespace qf

#include "core/suggest.h"

#include <gtest/gtest.h>

namespace qf {
namespace {

const std::vector<std::string> kFormats = {"nvfp4", "mxfp4", "fp8", "int4", "int8"};

TEST(Suggest, EditDistanceCountsSwapsAsOne) {
  EXPECT_EQ(edit_distance("nvfp5", "nvfp4"), 1u);
  EXPECT_EQ(edit_distance("gtpq", "gptq"), 1u);
  EXPECT_EQ(edit_distance("NVFP4", "nvfp4"), 0u);
  EXPECT_EQ(edit_distance("", "abc"), 3u);
  EXPECT_EQ(edit_distance("quantise", "quantize"), 1u);
}

TEST(Suggest, ClosestNameOnlyForPlausibleTypos) {
  EXPECT_EQ(closest_name("nvfp5", kFormats), "nvfp4");
  EXPECT_EQ(closest_name("int3", kFormats), "int4");  // ties go to the earlier choice
  EXPECT_EQ(closest_name("bananas", kFormats), "");
  EXPECT_EQ(closest_name("x", kFormats), "");
}

TEST(Suggest, MessageNamesTheChoice) {
  EXPECT_EQ(unknown_name_message("format", "nvfp5", kFormats),
            "unknown format 'nvfp5'; did you mean 'nvfp4'? (choices: nvfp4, mxfp4, fp8, int4, int8)");
  EXPECT_EQ(unknown_name_message("format", "zzz", kFormats),
            "unknown format 'zzz' (choices: nvfp4, mxfp4, fp8, int4, int8)");
}

}  // namespace
}  // namespace qf

// The nesting limit of JSON read from files (io/json_file.h).
#include "core/error.h"
#include "io/json_file.h"

#include <gtest/gtest.h>

#include <string>

namespace qf {
namespace {

std::string nested(size_t n) { return std::string(n, '[') + std::string(n, ']'); }

TEST(JsonDepth, LimitIsInclusive) {
  EXPECT_NO_THROW(require_json_depth(nested(kMaxJsonDepth), "f.json"));
  EXPECT_NO_THROW(require_json_depth("{\"a\": " + nested(kMaxJsonDepth - 1) + "}", "f.json"));
  try {
    require_json_depth(nested(kMaxJsonDepth + 1), "f.json");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "f.json: JSON nested deeper than 256 levels");
  }
}

TEST(JsonDepth, BracketsInStringsDoNotCount) {
  const std::string brackets(1000, '[');
  EXPECT_NO_THROW(require_json_depth("{\"" + brackets + "\": \"" + brackets + "\"}", "f.json"));
  // An escaped quote does not end the string.
  EXPECT_NO_THROW(require_json_depth("[\"\\\"" + brackets + "\"]", "f.json"));
  EXPECT_THROW(require_json_depth("[\"\\\\\"" + nested(300) + "]", "f.json"), Error);
}

// Many siblings are not depth.
TEST(JsonDepth, SiblingsAreNotNesting) {
  std::string wide = "[";
  for (int i = 0; i < 10000; ++i) wide += (i ? ",[]" : "[]");
  EXPECT_NO_THROW(require_json_depth(wide + "]", "f.json"));
}

}  // namespace
}  // namespace qf

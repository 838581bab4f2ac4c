// The nesting limit of JSON read from files (io/json_file.h parse_json_text): deep documents are
// refused while they are parsed, before anything that deep is built (a million levels once
// overflowed the stack when the config was dumped).
#include "core/error.h"
#include "io/json_file.h"

#include <gtest/gtest.h>

#include <string>

namespace qf {
namespace {

std::string nested(size_t n) { return std::string(n, '[') + std::string(n, ']'); }

TEST(JsonDepth, LimitIsInclusive) {
  EXPECT_NO_THROW(parse_json_text(nested(kJsonMaxDepth), "f.json"));
  EXPECT_NO_THROW(parse_json_text("{\"a\": " + nested(kJsonMaxDepth - 1) + "}", "f.json"));
  try {
    parse_json_text(nested(kJsonMaxDepth + 1), "f.json");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "f.json: JSON nests deeper than 64 levels");
  }
  // A million levels, unterminated: refused at level 65, quickly.
  EXPECT_THROW(parse_json_text(std::string(1'000'000, '['), "f.json"), Error);
  EXPECT_THROW(parse_ordered_json_text(std::string(1'000'000, '{') , "f.json"), Error);
}

TEST(JsonDepth, BracketsInStringsDoNotCount) {
  const std::string brackets(1000, '[');
  EXPECT_NO_THROW(parse_json_text("{\"" + brackets + "\": \"" + brackets + "\"}", "f.json"));
  // An escaped quote does not end the string.
  EXPECT_NO_THROW(parse_json_text("[\"\\\"" + brackets + "\"]", "f.json"));
  EXPECT_THROW(parse_json_text("[\"\\\\\"" + nested(300) + "]", "f.json"), Error);
}

// Many siblings are not depth.
TEST(JsonDepth, SiblingsAreNotNesting) {
  std::string wide = "[";
  for (int i = 0; i < 10000; ++i) wide += (i ? ",[]" : "[]");
  EXPECT_NO_THROW(parse_json_text(wide + "]", "f.json"));
}

}  // namespace
}  // namespace qf

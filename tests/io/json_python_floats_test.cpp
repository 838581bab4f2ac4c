// Python's json words for non-finite floats (Infinity, -Infinity, NaN): Hugging Face configs
// carry them (Nemotron-H's time_step_limit [0.0, Infinity]); the readers accept them outside
// strings only, json_number reads them, and write_json_file writes them back bare.
#include "core/error.h"
#include "io/json_file.h"
#include "test_util.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <sstream>

namespace qf {
namespace {

TEST(JsonPythonFloats, WordsReadAsNumbers) {
  const auto j = parse_json_text(R"({"limit": [0.0, Infinity], "low": -Infinity, "x": NaN,
                                     "s": "Infinity \" NaN", "n": 2})", "c.json");
  EXPECT_EQ(*json_number(j["limit"][0]), 0.0);
  EXPECT_TRUE(std::isinf(*json_number(j["limit"][1])) && *json_number(j["limit"][1]) > 0);
  EXPECT_TRUE(std::isinf(*json_number(j["low"])) && *json_number(j["low"]) < 0);
  EXPECT_TRUE(std::isnan(*json_number(j["x"])));
  EXPECT_EQ(j["s"], "Infinity \" NaN");  // words inside strings stay text
  EXPECT_FALSE(json_number(j["s"]).has_value());
  EXPECT_EQ(*json_number(j["n"]), 2.0);
}

TEST(JsonPythonFloats, TransformersFloatObject) {
  const auto j = parse_json_text(R"({"l": [0.0, {"__float__": "Infinity"}], "o": {"__float__": "x"}})",
                                 "c.json");
  EXPECT_TRUE(std::isinf(*json_number(j["l"][1])));
  EXPECT_FALSE(json_number(j["o"]).has_value());
}

TEST(JsonPythonFloats, OtherBareWordsStillFail) {
  EXPECT_THROW(parse_json_text("[Inf]", "c.json"), Error);
  EXPECT_THROW(parse_json_text("[nan]", "c.json"), Error);
}

TEST(JsonPythonFloats, WrittenBackBare) {
  const test::ScratchDir dir;
  const auto j = parse_ordered_json_text(R"({"limit": [0.0, Infinity], "x": NaN, "s": "a"})",
                                         "c.json");
  write_json_file(dir.path() / "c.json", j);
  std::ifstream in(dir.path() / "c.json");
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_NE(text.str().find("Infinity\n"), std::string::npos) << text.str();
  EXPECT_NE(text.str().find("\"x\": NaN"), std::string::npos) << text.str();
  EXPECT_EQ(text.str().find("python-float"), std::string::npos) << text.str();
  const auto back = parse_ordered_json_text(text.str(), "c.json");
  EXPECT_TRUE(std::isinf(*json_number(back["limit"][1])));
}

}  // namespace
}  // namespace qf

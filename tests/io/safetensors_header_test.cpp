// Tests of safetensors header validation: every malformed case gives a one-line qf::Error that
// starts with the file label and names the problem.
#include "core/error.h"
#include "io/safetensors.h"
#include "test_util.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>

namespace qf {
namespace {

const std::string kLabel = "dir/test.safetensors";

// A whole file: 8-byte little-endian length, `header`, then `data_bytes` zero bytes.
std::string make_file(const std::string& header, size_t data_bytes) {
  std::string out(8, '\0');
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[size_t(i)] = char((n >> (8 * i)) & 0xff);
  return out + header + std::string(data_bytes, '\0');
}

SafetensorsHeader parse_file(const std::string& bytes) {
  return parse_safetensors_bytes(
      std::span(reinterpret_cast<const std::byte*>(bytes.data()), bytes.size()), kLabel);
}

// Parses and returns the error message; fails the test if no qf::Error is thrown.
std::string error_of(const std::string& header, size_t data_bytes) {
  try {
    parse_file(make_file(header, data_bytes));
  } catch (const Error& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "not a qf::Error: " << e.what();
    return {};
  }
  ADD_FAILURE() << "no error for header " << header;
  return {};
}

// The message starts with the label, is one line, and contains `phrase`.
void expect_error(const std::string& header, size_t data_bytes, const std::string& phrase) {
  const std::string msg = error_of(header, data_bytes);
  EXPECT_EQ(msg.rfind(kLabel + ": ", 0), 0u) << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  EXPECT_NE(msg.find(phrase), std::string::npos) << "message: " << msg << "\nwanted: " << phrase;
}

TEST(SafetensorsHeader, ValidHeaderSortedByOffset) {
  const std::string h =
      R"({"b":{"dtype":"BF16","shape":[2,3],"data_offsets":[16,28]},)"
      R"("__metadata__":{"format":"pt","x":"y"},)"
      R"("a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})";
  const SafetensorsHeader hdr = parse_file(make_file(h, 28));
  ASSERT_EQ(hdr.tensors.size(), 2u);
  EXPECT_EQ(hdr.tensors[0].name, "a");
  EXPECT_EQ(hdr.tensors[0].dtype, DType::F32);
  EXPECT_EQ(hdr.tensors[0].shape, Shape({4}));
  EXPECT_EQ(hdr.tensors[1].name, "b");
  EXPECT_EQ(hdr.tensors[1].dtype, DType::BF16);
  EXPECT_EQ(hdr.tensors[1].shape, Shape({2, 3}));
  EXPECT_EQ(hdr.tensors[1].begin, 16u);
  EXPECT_EQ(hdr.tensors[1].end, 28u);
  EXPECT_EQ(hdr.metadata.at("format"), "pt");
  EXPECT_EQ(hdr.metadata.at("x"), "y");
}

TEST(SafetensorsHeader, ZeroDimAndZeroSizeTensorsAreLegal) {
  const std::string h =
      R"({"scalar":{"dtype":"F32","shape":[],"data_offsets":[0,4]},)"
      R"("empty":{"dtype":"U8","shape":[0,7],"data_offsets":[4,4]},)"
      R"("empty2":{"dtype":"F16","shape":[3,0],"data_offsets":[4,4]},)"
      R"("tail":{"dtype":"I8","shape":[2],"data_offsets":[4,6]}})";
  const SafetensorsHeader hdr = parse_file(make_file(h, 6));
  ASSERT_EQ(hdr.tensors.size(), 4u);
  EXPECT_EQ(hdr.tensors[0].name, "scalar");
  EXPECT_TRUE(hdr.tensors[0].shape.empty());
  EXPECT_EQ(hdr.tensors[1].name, "empty");
  EXPECT_EQ(hdr.tensors[2].name, "empty2");
  EXPECT_EQ(hdr.tensors[3].name, "tail");
}

TEST(SafetensorsHeader, EmptyHeaderIsLegal) {
  EXPECT_TRUE(parse_file(make_file("{}", 0)).tensors.empty());
  EXPECT_TRUE(parse_file(make_file("{}      ", 0)).tensors.empty());  // space padding
}

TEST(SafetensorsHeader, TooShortForLength) {
  try {
    parse_file("abcde");
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(),
                 "dir/test.safetensors: truncated: 5 bytes, too short for the 8-byte header "
                 "length");
  }
}

TEST(SafetensorsHeader, HeaderLengthPastEndOfFile) {
  std::string f = make_file("{}", 0);
  f[0] = char(100);
  try {
    parse_file(f);
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(),
                 "dir/test.safetensors: truncated: header length 100 runs past the end of the "
                 "file (10 bytes)");
  }
}

TEST(SafetensorsHeader, HeaderLengthOverLimit) {
  std::string f = make_file("{}", 0);
  const uint64_t n = kMaxSafetensorsHeader + 1;
  for (int i = 0; i < 8; ++i) f[size_t(i)] = char((n >> (8 * i)) & 0xff);
  try {
    parse_file(f);
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(),
                 "dir/test.safetensors: header length 100000001 exceeds the limit of 100000000 "
                 "bytes");
  }
  // A length near 2^64 must not wrap around in the range check.
  for (int i = 0; i < 8; ++i) f[size_t(i)] = char(0xff);
  EXPECT_THROW(parse_file(f), Error);
}

TEST(SafetensorsHeader, NotJson) {
  expect_error(R"({"a": nope})", 0, "header is not valid JSON: parse error at line 1, column 8");
  expect_error(R"({"a":)", 0, "header is not valid JSON");
  expect_error(std::string("{\"a\xff\":1}"), 0, "header is not valid JSON");  // bad UTF-8
}

TEST(SafetensorsHeader, NotAnObject) {
  expect_error("[1,2]", 0, "header is not a JSON object");
  expect_error(" {}", 0, "header is not a JSON object (it does not start with '{')");
  expect_error("", 0, "header is not a JSON object");
}

TEST(SafetensorsHeader, EntryNotAnObject) {
  expect_error(R"({"w":[1,2]})", 0, "tensor 'w': entry is not an object (array)");
}

TEST(SafetensorsHeader, BadDtype) {
  expect_error(R"({"w":{"shape":[1],"data_offsets":[0,4]}})", 4, "tensor 'w': missing dtype");
  expect_error(R"({"w":{"dtype":4,"shape":[1],"data_offsets":[0,4]}})", 4,
               "tensor 'w': dtype is not a string (number)");
  expect_error(R"({"w":{"dtype":"F4","shape":[1],"data_offsets":[0,4]}})", 4,
               "tensor 'w': unknown dtype 'F4'");
}

TEST(SafetensorsHeader, BadShape) {
  expect_error(R"({"w":{"dtype":"F32","data_offsets":[0,4]}})", 4, "tensor 'w': missing shape");
  expect_error(R"({"w":{"dtype":"F32","shape":4,"data_offsets":[0,4]}})", 4,
               "tensor 'w': shape is not an array (number)");
  expect_error(R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", 4,
               "tensor 'w': shape dimension 0 is negative (-1)");
  expect_error(R"({"w":{"dtype":"F32","shape":[1,1.5],"data_offsets":[0,4]}})", 4,
               "tensor 'w': shape dimension 1 is not an integer (number)");
  expect_error(R"({"w":{"dtype":"F32","shape":["1"],"data_offsets":[0,4]}})", 4,
               "tensor 'w': shape dimension 0 is not an integer (string)");
}

TEST(SafetensorsHeader, ShapeOverflow) {
  expect_error(R"({"w":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,4]}})",
               4, "tensor 'w': shape overflows: element count exceeds 2^63");
  expect_error(R"({"w":{"dtype":"F32","shape":[18446744073709551615],"data_offsets":[0,4]}})",
               4, "tensor 'w': shape overflows");
  // The reference's checked fold rejects this too, although the product is 0.
  expect_error(
      R"({"w":{"dtype":"F32","shape":[4294967296,4294967296,0],"data_offsets":[0,0]}})", 0,
      "shape overflows");
  expect_error(R"({"w":{"dtype":"F64","shape":[2305843009213693952],"data_offsets":[0,4]}})", 4,
               "tensor 'w': shape [2305843009213693952] of F64 overflows: byte count exceeds 2^63");
}

TEST(SafetensorsHeader, BadDataOffsets) {
  expect_error(R"({"w":{"dtype":"F32","shape":[1]}})", 4, "tensor 'w': missing data_offsets");
  expect_error(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0]}})", 4,
               "tensor 'w': data_offsets is not an array of two integers");
  expect_error(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":{"a":1}}})", 4,
               "tensor 'w': data_offsets is not an array of two integers");
  expect_error(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[-4,0]}})", 4,
               "tensor 'w': data_offsets[0] is negative (-4)");
  expect_error(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,"4"]}})", 4,
               "tensor 'w': data_offsets[1] is not an integer (string)");
  expect_error(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[8,4]}})", 8,
               "tensor 'w': data_offsets [8, 4] end before they begin");
}

TEST(SafetensorsHeader, SizeMismatch) {
  expect_error(R"({"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,20]}})", 20,
               "tensor 'w': shape [2, 3] of F32 needs 24 bytes but data_offsets span 20");
  expect_error(R"({"w":{"dtype":"F32","shape":[],"data_offsets":[0,0]}})", 0,
               "tensor 'w': shape [] of F32 needs 4 bytes but data_offsets span 0");
}

TEST(SafetensorsHeader, OffsetsOutOfRange) {
  expect_error(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 4,
               "tensor 'w': data_offsets [0, 8] out of range: the data section is 4 bytes");
  expect_error(R"({"w":{"dtype":"U8","shape":[0],"data_offsets":[18446744073709551615,)"
               R"(18446744073709551615]}})",
               4, "out of range");
}

TEST(SafetensorsHeader, Overlap) {
  expect_error(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
               R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
               12,
               "tensors 'a' (data_offsets [0, 8]) and 'b' (data_offsets [4, 12]) overlap");
  // The same bytes claimed twice.
  expect_error(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
               R"("b":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
               4, "overlap");
}

TEST(SafetensorsHeader, GapsAndTrailingBytes) {
  expect_error(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
               R"("b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
               12,
               "gap of 4 bytes between tensors 'a' (ends at 4) and 'b' (begins at 8): "
               "data_offsets must be contiguous");
  expect_error(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", 8,
               "gap of 4 bytes before the first tensor 'a': data_offsets must start at 0");
  expect_error(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 10,
               "6 trailing bytes after the last tensor: the data section is 10 bytes but "
               "tensors end at 4");
  expect_error("{}", 3, "3 trailing bytes");
}

TEST(SafetensorsHeader, BadMetadata) {
  expect_error(R"({"__metadata__":["pt"]})", 0,
               "__metadata__ is not a string-to-string map (it is array)");
  expect_error(R"({"__metadata__":{"format":"pt","n":3}})", 0,
               "__metadata__ is not a string-to-string map (value of 'n' is number)");
  expect_error(R"({"__metadata__":{"a":null}})", 0, "value of 'a' is null");
}

TEST(SafetensorsHeader, DuplicateNames) {
  expect_error(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
               R"("a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
               4, "duplicate tensor name 'a'");
  expect_error(R"({"a":{"dtype":"F32","dtype":"F16","shape":[1],"data_offsets":[0,4]}})", 4,
               "duplicate key 'dtype' in the entry of 'a'");
  expect_error(R"({"__metadata__":{},"__metadata__":{}})", 0, "duplicate __metadata__");
  expect_error(R"({"__metadata__":{"k":"1","k":"2"}})", 0,
               "duplicate key 'k' in the entry of '__metadata__'");
  // Same key in different objects is fine.
  EXPECT_NO_THROW(parse_file(make_file(R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},)"
                                       R"("b":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}})",
                                       2)));
}

TEST(SafetensorsHeader, HostileNamesStayOnOneLine) {
  // JSON escapes put a newline and a control byte into the name; the name is also very long.
  const std::string msg = error_of(R"({"evil\nname\u0001)" + std::string(1000, 'x') + R"(":1})", 0);
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  EXPECT_NE(msg.find("'evil\\x0aname\\x01xxx"), std::string::npos) << msg;
  EXPECT_LT(msg.size(), 400u);
}

TEST(SafetensorsHeader, DeepNestingDoesNotExhaustTheStack) {
  // A hostile header can nest arrays as deep as its length allows (10 MB of '[' once took
  // gigabytes and most of a minute): parsing stops at the ninth level, before building it.
  const size_t depth = 300'000;
  const std::string h = R"({"w":)" + std::string(depth, '[') + std::string(depth, ']') + "}";
  expect_error(h, 0, "header nests deeper than 8 levels");
  expect_error(R"({"__metadata__":{"a":)" + std::string(depth, '['), 0,
               "header nests deeper than 8 levels");
  expect_error("{\"a\":" + std::string(10'000'000, '['), 0, "header nests deeper than 8 levels");
  // Shallow arrays where an entry belongs are still named as such.
  expect_error(R"({"w":[[1]]})", 0, "tensor 'w': entry is not an object (array)");
}

TEST(SafetensorsHeader, FileErrorsNameThePath) {
  test::ScratchDir dir;
  const auto missing = dir / "missing.safetensors";
  try {
    SafetensorsFile::open(missing);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind(missing.string() + ": cannot open", 0), 0u) << e.what();
  }
  const auto empty = dir / "empty.safetensors";
  test::write_file(empty, "");
  try {
    SafetensorsFile::open(empty);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              empty.string() + ": truncated: 0 bytes, too short for the 8-byte header length");
  }
  const auto bad = dir / "bad.safetensors";
  test::write_file(bad,
                   make_file(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 4));
  try {
    SafetensorsFile::open(bad);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), bad.string() +
                                         ": tensor 'w': data_offsets [0, 8] out of range: the "
                                         "data section is 4 bytes");
  }
}

TEST(SafetensorsHeader, FileViewFindRelease) {
  test::ScratchDir dir;
  const auto path = dir / "t.safetensors";
  std::string file = make_file(R"({"a":{"dtype":"U8","shape":[2,2],"data_offsets":[0,4]},)"
                               R"("s":{"dtype":"F32","shape":[],"data_offsets":[4,8]}})",
                               0);
  const float one = 1.0f;
  file += std::string("\x01\x02\x03\x04", 4) + std::string(reinterpret_cast<const char*>(&one), 4);
  test::write_file(path, file);
  const SafetensorsFile f = SafetensorsFile::open(path);
  EXPECT_EQ(f.file_size(), file.size());
  EXPECT_EQ(f.find("nope"), nullptr);
  const SafetensorsEntry* a = f.find("a");
  ASSERT_NE(a, nullptr);
  const TensorView va = f.view(*a);
  EXPECT_EQ(va.nbytes, 4u);
  EXPECT_EQ(va.rows(), 2);
  EXPECT_EQ(std::memcmp(va.data, "\x01\x02\x03\x04", 4), 0);
  const SafetensorsEntry* s = f.find("s");
  ASSERT_NE(s, nullptr);
  float v = 0;
  std::memcpy(&v, f.view(*s).data, 4);
  EXPECT_EQ(v, 1.0f);
  f.release(*a);  // the bytes stay readable after release
  EXPECT_EQ(std::memcmp(f.view(*a).data, "\x01\x02\x03\x04", 4), 0);
}

}  // namespace
}  // namespace qf

// llama.cpp importance matrices: both formats normalised as llama-quantize does, and the strict
// parser's refusals (one line, naming the file).
#include "core/error.h"
#include "io/gguf_writer.h"
#include "io/imatrix_file.h"
#include "test_util.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

namespace qf {
namespace {

void put_i32(std::string& s, int32_t v) { s.append(reinterpret_cast<const char*>(&v), 4); }
void put_f32s(std::string& s, const std::vector<float>& v) {
  s.append(reinterpret_cast<const char*>(v.data()), v.size() * 4);
}

// A legacy .dat: entries (name, ncall, values), then optionally the trailer.
std::string legacy(const std::vector<std::pair<std::string, std::vector<float>>>& entries,
                   int32_t ncall, bool trailer) {
  std::string s;
  put_i32(s, int32_t(entries.size()));
  for (const auto& [name, v] : entries) {
    put_i32(s, int32_t(name.size()));
    s += name;
    put_i32(s, ncall);
    put_i32(s, int32_t(v.size()));
    put_f32s(s, v);
  }
  if (trailer) {
    put_i32(s, 7);
    put_i32(s, 9);
    s += "calib.txt";
  }
  return s;
}

ImatrixData parse(const std::string& s) {
  return parse_imatrix(std::as_bytes(std::span(s.data(), s.size())), "m.dat");
}

std::string error_of(const std::string& s) {
  try {
    parse(s);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(ImatrixFile, LegacyValuesAreDividedByNcall) {
  const ImatrixData d = parse(legacy({{"blk.0.attn_q.weight", {2.f, 4.f, 0.f}}}, 2, true));
  EXPECT_TRUE(d.legacy);
  ASSERT_NE(d.find("blk.0.attn_q.weight"), nullptr);
  EXPECT_EQ(*d.find("blk.0.attn_q.weight"), (std::vector<float>{1.f, 2.f, 0.f}));
  EXPECT_EQ(d.chunk_count, 7);
  EXPECT_EQ(d.datasets, std::vector<std::string>{"calib.txt"});
  // Without the trailer, and ncall 0: values as stored.
  const ImatrixData e = parse(legacy({{"a", {3.f}}}, 0, false));
  EXPECT_EQ(*e.find("a"), std::vector<float>{3.f});
}

TEST(ImatrixFile, LegacyRefusals) {
  const std::string good = legacy({{"a", {1.f, 2.f}}}, 1, true);
  EXPECT_NE(error_of(legacy({{"blk.0.attn_q.weight", {1.f, 2.f}}}, 1, false).substr(0, 29))
                .find("m.dat: truncated: ncall needs 4 bytes at offset 27, 2 left"), std::string::npos);
  EXPECT_NE(error_of(good.substr(0, 20)).find("m.dat: a: value count 2 (3 bytes left)"),
            std::string::npos);
  EXPECT_NE(error_of(good + "x").find("after the dataset name"), std::string::npos);
  EXPECT_NE(error_of(legacy({{"a", {NAN}}}, 1, false)).find("a: value 0 is nan"), std::string::npos);
  EXPECT_NE(error_of(legacy({{"a", {-1.f}}}, 1, false)).find("value 0 is -1"), std::string::npos);
  EXPECT_NE(error_of(legacy({{"a", {1.f}}, {"a", {1.f}}}, 1, false)).find("duplicate"),
            std::string::npos);
  EXPECT_NE(error_of("").find("empty file"), std::string::npos);
  std::string huge;
  put_i32(huge, 1 << 30);
  EXPECT_NE(error_of(huge).find("entry count"), std::string::npos);
}

TEST(ImatrixFile, GgufSumsAreDividedByRoundedCounts) {
  test::ScratchDir dir;
  GgufMetadata m;
  m.set_string("general.type", "imatrix");
  m.set_string_array("imatrix.datasets", {"calib.txt"});
  m.set_u32("imatrix.chunk_count", 3);
  m.set_u32("imatrix.chunk_size", 512);
  const std::vector<float> sums = {3.f, 6.f, 9.f, 1.f}, counts = {3.f};
  const std::vector<float> sums2 = {5.f, 5.f}, counts2 = {2.f, 0.f};  // two experts, one unseen
  GgufWriter w(dir / "i.gguf", m,
               {{"x.in_sum2", GgmlType::F32, {4, 1}}, {"x.counts", GgmlType::F32, {1, 1}},
                {"e.in_sum2", GgmlType::F32, {1, 2}}, {"e.counts", GgmlType::F32, {1, 2}}});
  w.write("x.in_sum2", std::as_bytes(std::span(sums)));
  w.write("x.counts", std::as_bytes(std::span(counts)));
  w.write("e.in_sum2", std::as_bytes(std::span(sums2)));
  w.write("e.counts", std::as_bytes(std::span(counts2)));
  w.finish();
  const ImatrixData d = load_imatrix(dir / "i.gguf");
  EXPECT_FALSE(d.legacy);
  EXPECT_EQ(*d.find("x"), (std::vector<float>{1.f, 2.f, 3.f, 1.f / 3.f}));
  EXPECT_EQ(*d.find("e"), (std::vector<float>{2.5f, 1.f}));  // count 0: 1, as llama-quantize
  EXPECT_EQ(d.chunk_count, 3);
  EXPECT_EQ(d.chunk_size, 512);
}

TEST(ImatrixFile, GgufRefusals) {
  test::ScratchDir dir;
  auto write = [&](bool metadata, bool counts, GgmlType count_type) {
    GgufMetadata m;
    if (metadata) {
      m.set_string_array("imatrix.datasets", {"c"});
      m.set_u32("imatrix.chunk_count", 1);
      m.set_u32("imatrix.chunk_size", 1);
    }
    std::vector<GgufTensorSpec> specs = {{"x.in_sum2", GgmlType::F32, {32}}};
    if (counts) specs.push_back({"x.counts", count_type, {32}});
    GgufWriter w(dir / "i.gguf", m, specs);
    const std::vector<float> v(32, 1.f);
    const std::vector<uint16_t> h(32, 0x3C00);
    w.write("x.in_sum2", std::as_bytes(std::span(v)));
    if (counts) {
      if (count_type == GgmlType::F32) w.write("x.counts", std::as_bytes(std::span(v)));
      else w.write("x.counts", std::as_bytes(std::span(h)));
    }
    w.finish();
    try {
      load_imatrix(dir / "i.gguf");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(write(false, true, GgmlType::F32).find("not an importance matrix"), std::string::npos);
  EXPECT_NE(write(true, false, GgmlType::F32).find("x has in_sum2 but no counts"), std::string::npos);
  EXPECT_NE(write(true, true, GgmlType::F16).find("expected f32"), std::string::npos);
  // 32 sums over 32 counts: one value per "expert"; fine.
  EXPECT_EQ(write(true, true, GgmlType::F32), "");
}

}  // namespace
}  // namespace qf

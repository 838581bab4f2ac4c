// The GGUF reader and writer: a written file reads back with every metadata type and tensor
// intact, and each kind of bad input gets its own one-line error (one test per error).
#include "core/error.h"
#include "formats/ggml_quants.h"
#include "io/gguf_file.h"
#include "io/gguf_writer.h"
#include "test_util.h"

#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace qf {
namespace {

// A GGUF file assembled field by field, so each test can break exactly one thing.
struct RawTensor {
  std::string name;
  std::vector<int64_t> ne;
  uint32_t type = 0;
  uint64_t offset = 0;
};

struct RawGguf {
  std::string magic = "GGUF";
  uint32_t version = 3;
  std::string kvs;  // serialized pairs
  uint64_t n_kv = 0;
  std::vector<RawTensor> tensors;
  int64_t n_tensors_override = -1;
  uint32_t alignment = 32;
  std::string data;  // the data section

  static void u32(std::string& s, uint32_t v) { s.append(reinterpret_cast<char*>(&v), 4); }
  static void u64(std::string& s, uint64_t v) { s.append(reinterpret_cast<char*>(&v), 8); }
  static void str(std::string& s, std::string_view v) {
    u64(s, v.size());
    s += v;
  }
  void kv_u32(std::string_view key, uint32_t v) {
    str(kvs, key);
    u32(kvs, uint32_t(GgufType::U32));
    u32(kvs, v);
    ++n_kv;
  }
  void kv_string(std::string_view key, std::string_view v) {
    str(kvs, key);
    u32(kvs, uint32_t(GgufType::STRING));
    str(kvs, v);
    ++n_kv;
  }
  std::string build() const {
    std::string s = magic;
    u32(s, version);
    u64(s, n_tensors_override >= 0 ? uint64_t(n_tensors_override) : tensors.size());
    u64(s, n_kv);
    s += kvs;
    for (const RawTensor& t : tensors) {
      str(s, t.name);
      u32(s, uint32_t(t.ne.size()));
      for (int64_t d : t.ne) u64(s, uint64_t(d));
      u32(s, t.type);
      u64(s, t.offset);
    }
    s.append((alignment - s.size() % alignment) % alignment, '\0');
    return s + data;
  }
};

// Two tensors: "a" F32 [4] (16 bytes, padded to 32) and "b" Q8_0 [32, 2] (68 bytes).
RawGguf valid() {
  RawGguf g;
  g.kv_string("general.architecture", "llama");
  g.tensors.push_back({"a", {4}, 0, 0});
  g.tensors.push_back({"b", {32, 2}, 8, 32});
  g.data = std::string(32 + 68 + 28, '\0');
  return g;
}

std::string error_of(const std::string& bytes) {
  try {
    parse_gguf(std::as_bytes(std::span(bytes.data(), bytes.size())), "m.gguf");
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

#define EXPECT_GGUF_ERROR(bytes, text)                              \
  do {                                                              \
    const std::string msg = error_of(bytes);                        \
    EXPECT_NE(msg.find(text), std::string::npos) << msg;            \
    EXPECT_TRUE(msg.starts_with("m.gguf: ")) << msg;                \
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;            \
  } while (0)

TEST(GgufReader, ValidFileParses) {
  const std::string bytes = valid().build();
  const GgufHeader h = parse_gguf(std::as_bytes(std::span(bytes.data(), bytes.size())), "m");
  ASSERT_EQ(h.tensors.size(), 2u);
  EXPECT_EQ(h.tensors[1].nbytes, 68u);
  EXPECT_EQ(h.tensors[1].shape(), (std::vector<int64_t>{2, 32}));
  EXPECT_EQ(h.data_offset % 32, 0u);
  EXPECT_EQ(h.kvs[0].value.str, "llama");
}

TEST(GgufReader, WrongMagic) {
  RawGguf g = valid();
  g.magic = "GGML";
  EXPECT_GGUF_ERROR(g.build(), "not a GGUF file: magic is 0x47474d4c");
}

TEST(GgufReader, VersionOne) {
  RawGguf g = valid();
  g.version = 1;
  EXPECT_GGUF_ERROR(g.build(), "GGUF version 1 is not supported");
}

TEST(GgufReader, VersionTooNew) {
  RawGguf g = valid();
  g.version = 4;
  EXPECT_GGUF_ERROR(g.build(), "GGUF version 4 is newer than 3");
}

TEST(GgufReader, WrongEndianness) {
  RawGguf g = valid();
  g.version = 0x03000000;
  EXPECT_GGUF_ERROR(g.build(), "looks byte-swapped");
}

TEST(GgufReader, TruncatedHeader) {
  EXPECT_GGUF_ERROR(valid().build().substr(0, 10), "truncated: the tensor count");
}

TEST(GgufReader, TruncatedKeyValue) {
  RawGguf g = valid();
  g.tensors.clear();
  g.data.clear();
  const std::string b = g.build();
  // Cut inside the value "llama" of the first pair (header 24 + key 8+20 + type 4 + len 8).
  EXPECT_GGUF_ERROR(b.substr(0, 24 + 28 + 4 + 8 + 2), "the value of key 'general.architecture'");
}

TEST(GgufReader, TruncatedTensorInfo) {
  RawGguf g = valid();
  g.data.clear();
  g.alignment = 1;
  std::string b = g.build();
  b.resize(b.size() - 3);  // into the offset of tensor "b"
  EXPECT_GGUF_ERROR(b, "truncated: the info of tensor 'b'");
}

TEST(GgufReader, TruncatedData) {
  RawGguf g = valid();
  g.data.resize(32 + 60);
  EXPECT_GGUF_ERROR(g.build(), "truncated: tensor 'b' needs 68 bytes at data offset 32");
}

TEST(GgufReader, MisalignedOffset) {
  RawGguf g = valid();
  g.tensors[1].offset = 16;
  EXPECT_GGUF_ERROR(g.build(), "tensor 'b': offset 16 is not a multiple of the alignment 32");
}

TEST(GgufReader, OverlappingOffset) {
  RawGguf g = valid();
  g.tensors[1].offset = 0;
  EXPECT_GGUF_ERROR(g.build(), "tensor 'b': offset 0 overlaps tensor 'a' (which ends at 16)");
}

TEST(GgufReader, GapBetweenTensors) {
  RawGguf g = valid();
  g.tensors[1].offset = 64;
  g.data.append(64, '\0');
  EXPECT_GGUF_ERROR(g.build(), "tensor 'b': offset 64 leaves a gap: expected 32");
}

TEST(GgufReader, UnknownTensorType) {
  RawGguf g = valid();
  g.tensors[1].type = 4;
  EXPECT_GGUF_ERROR(g.build(), "tensor 'b': unknown ggml type 4");
}

TEST(GgufReader, RowNotAMultipleOfTheBlock) {
  RawGguf g = valid();
  g.tensors[1].ne = {16, 4};
  EXPECT_GGUF_ERROR(g.build(), "row length 16 is not a multiple of the q8_0 block size 32");
}

TEST(GgufReader, TooManyDimensions) {
  RawGguf g = valid();
  g.tensors[0].ne = {1, 1, 1, 1, 4};
  EXPECT_GGUF_ERROR(g.build(), "tensor 'a': 5 dimensions, more than ggml's 4");
}

TEST(GgufReader, NonPositiveDimension) {
  RawGguf g = valid();
  g.tensors[0].ne = {-4};
  EXPECT_GGUF_ERROR(g.build(), "tensor 'a': dimension 0 is -4, must be positive");
}

TEST(GgufReader, ElementCountOverflow) {
  RawGguf g = valid();
  g.tensors[0].ne = {int64_t(1) << 40, int64_t(1) << 40};
  EXPECT_GGUF_ERROR(g.build(), "tensor 'a': element count overflows int64");
}

// 2^62 + 1 f32 values fit int64 as a count, but their row's 4 bytes each wrap uint64 to 4: the
// imatrix reader once allocated 2^62 floats for a tensor whose byte size looked like 4.
TEST(GgufReader, RowByteSizeOverflow) {
  RawGguf g = valid();
  g.tensors[0].ne = {(int64_t(1) << 62) + 1};
  EXPECT_GGUF_ERROR(g.build(), "tensor 'a': byte size overflows int64");
}

TEST(GgufReader, TensorNameTooLong) {
  RawGguf g = valid();
  g.tensors[0].name = std::string(64, 'x');
  EXPECT_GGUF_ERROR(g.build(), "name is 64 bytes, longer than ggml's limit of 63");
}

TEST(GgufReader, DuplicateTensorName) {
  RawGguf g = valid();
  g.tensors[1].name = "a";
  EXPECT_GGUF_ERROR(g.build(), "duplicate tensor name 'a'");
}

TEST(GgufReader, DuplicateKey) {
  RawGguf g = valid();
  g.kv_string("general.architecture", "qwen");
  EXPECT_GGUF_ERROR(g.build(), "duplicate key 'general.architecture'");
}

TEST(GgufReader, EmptyKey) {
  RawGguf g = valid();
  g.kv_u32("", 1);
  EXPECT_GGUF_ERROR(g.build(), "key 1 is empty");
}

TEST(GgufReader, UnknownValueType) {
  RawGguf g = valid();
  RawGguf::str(g.kvs, "x");
  RawGguf::u32(g.kvs, 13);
  ++g.n_kv;
  EXPECT_GGUF_ERROR(g.build(), "key 'x': unknown value type 13");
}

TEST(GgufReader, NestedArray) {
  RawGguf g = valid();
  RawGguf::str(g.kvs, "x");
  RawGguf::u32(g.kvs, uint32_t(GgufType::ARRAY));
  RawGguf::u32(g.kvs, uint32_t(GgufType::ARRAY));
  RawGguf::u64(g.kvs, 1);
  ++g.n_kv;
  EXPECT_GGUF_ERROR(g.build(), "key 'x': nested arrays are not allowed");
}

TEST(GgufReader, AbsurdArrayCountRefusedBeforeAllocating) {
  RawGguf g = valid();
  RawGguf::str(g.kvs, "tokenizer.ggml.tokens");
  RawGguf::u32(g.kvs, uint32_t(GgufType::ARRAY));
  RawGguf::u32(g.kvs, uint32_t(GgufType::STRING));
  RawGguf::u64(g.kvs, uint64_t(1) << 60);
  ++g.n_kv;
  EXPECT_GGUF_ERROR(g.build(), "array of 1152921504606846976 strings cannot fit");
}

TEST(GgufReader, AbsurdNumericArrayCount) {
  RawGguf g = valid();
  RawGguf::str(g.kvs, "x");
  RawGguf::u32(g.kvs, uint32_t(GgufType::ARRAY));
  RawGguf::u32(g.kvs, uint32_t(GgufType::F64));
  RawGguf::u64(g.kvs, ~uint64_t(0) / 4);
  ++g.n_kv;
  EXPECT_GGUF_ERROR(g.build(), "float64 values cannot fit");
}

TEST(GgufReader, AbsurdStringLength) {
  RawGguf g = valid();
  RawGguf::str(g.kvs, "x");
  RawGguf::u32(g.kvs, uint32_t(GgufType::STRING));
  RawGguf::u64(g.kvs, ~uint64_t(0));
  ++g.n_kv;
  EXPECT_GGUF_ERROR(g.build(), "the value of key 'x' is 18446744073709551615 bytes");
}

TEST(GgufReader, AbsurdTensorCount) {
  RawGguf g = valid();
  g.n_tensors_override = int64_t(1) << 40;
  EXPECT_GGUF_ERROR(g.build(), "tensor count 1099511627776 is impossible");
}

TEST(GgufReader, NegativeMetadataCount) {
  RawGguf g = valid();
  g.n_kv = ~uint64_t(0);
  EXPECT_GGUF_ERROR(g.build(), "metadata count -1 is impossible");
}

TEST(GgufReader, AlignmentOfTheWrongType) {
  RawGguf g = valid();
  RawGguf::str(g.kvs, "general.alignment");
  RawGguf::u32(g.kvs, uint32_t(GgufType::U64));
  RawGguf::u64(g.kvs, 32);
  ++g.n_kv;
  EXPECT_GGUF_ERROR(g.build(), "general.alignment is uint64, expected uint32");
}

TEST(GgufReader, AlignmentNotAPowerOfTwo) {
  RawGguf g = valid();
  g.kv_u32("general.alignment", 48);
  EXPECT_GGUF_ERROR(g.build(), "general.alignment 48 is not a power of two");
}

TEST(GgufReader, BoolThatIsNotZeroOrOne) {
  RawGguf g = valid();
  RawGguf::str(g.kvs, "x");
  RawGguf::u32(g.kvs, uint32_t(GgufType::BOOL));
  g.kvs += char(2);
  ++g.n_kv;
  EXPECT_GGUF_ERROR(g.build(), "key 'x': bool value is 2, expected 0 or 1");
}

// ---- the writer, and typed access on a file it wrote ---------------------------------------

TEST(GgufWriter, RoundTripOfEveryMetadataTypeAndTensor) {
  test::ScratchDir dir;
  const auto path = dir / "model.gguf";
  GgufMetadata m;
  m.set_string("general.architecture", "llama");
  m.set_u32("general.alignment", 64);
  m.set_u8("t.u8", 200);
  m.set_i8("t.i8", -5);
  m.set_u16("t.u16", 60000);
  m.set_i16("t.i16", -300);
  m.set_u32("llama.block_count", 2);
  m.set_i32("t.i32", -7);
  m.set_f32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
  m.set_bool("tokenizer.ggml.add_bos_token", true);
  m.set_u64("t.u64", uint64_t(1) << 40);
  m.set_i64("t.i64", -(int64_t(1) << 40));
  m.set_f64("t.f64", 0.125);
  m.set_string_array("tokenizer.ggml.tokens", {"<s>", "</s>", "a b"});
  const float scores[] = {0.f, -1.f, -2.5f};
  m.set_f32_array("tokenizer.ggml.scores", scores);
  const int32_t types[] = {3, 3, 1};
  m.set_i32_array("tokenizer.ggml.token_type", types);
  m.set_u32("llama.block_count", 3);  // replaces, keeps the position

  std::vector<float> w(64 * 3);
  for (size_t i = 0; i < w.size(); ++i) w[i] = float(int(i % 13) - 6) * 0.25f;
  std::vector<uint8_t> nv(3 * 36);
  ggml_quantize_nvfp4(w.data(), nv.data(), int64_t(w.size()));
  const float norm[5] = {1, 2, 3, 4, 5};
  {
    GgufWriter wr(path, m,
                  {{"blk.0.attn_q.weight", GgmlType::NVFP4, {64, 3}},
                   {"output_norm.weight", GgmlType::F32, {5}}});
    wr.write("blk.0.attn_q.weight", std::as_bytes(std::span(nv)));
    EXPECT_FALSE(std::filesystem::exists(path));  // only the temporary name so far
    wr.write("output_norm.weight", std::as_bytes(std::span(norm)));
    wr.finish();
    EXPECT_FALSE(std::filesystem::exists(wr.temporary_path()));
  }
  const GgufFile f = GgufFile::open(path);
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.alignment(), 64u);
  EXPECT_EQ(f.data_offset() % 64, 0u);
  EXPECT_EQ(f.get_string("general.architecture"), "llama");
  EXPECT_EQ(f.get_u32("llama.block_count"), 3u);
  EXPECT_EQ(f.metadata()[6].key, "llama.block_count");
  EXPECT_EQ(f.get_i32("t.i32"), -7);
  EXPECT_EQ(f.find("t.i8")->as_i64(), -5);
  EXPECT_EQ(f.find("t.u16")->as_u64(), 60000u);
  EXPECT_EQ(f.find("t.i16")->as_i64(), -300);
  EXPECT_EQ(f.get_u64("t.u64"), uint64_t(1) << 40);
  EXPECT_EQ(f.find("t.i64")->as_i64(), -(int64_t(1) << 40));
  EXPECT_EQ(f.find("t.f64")->as_f64(), 0.125);
  EXPECT_EQ(f.find("t.u8")->as_u64(), 200u);
  EXPECT_EQ(f.get_f32("llama.attention.layer_norm_rms_epsilon"), 1e-5f);
  EXPECT_TRUE(f.get_bool("tokenizer.ggml.add_bos_token"));
  EXPECT_EQ(f.get_string_array("tokenizer.ggml.tokens"),
            (std::vector<std::string_view>{"<s>", "</s>", "a b"}));
  EXPECT_EQ(f.get_f32_array("tokenizer.ggml.scores"), (std::vector<float>{0.f, -1.f, -2.5f}));
  EXPECT_EQ(f.get_i32_array("tokenizer.ggml.token_type"), (std::vector<int32_t>{3, 3, 1}));

  ASSERT_EQ(f.tensors().size(), 2u);
  const GgufTensorInfo* q = f.find_tensor("blk.0.attn_q.weight");
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->type, GgmlType::NVFP4);
  EXPECT_EQ(q->ne, (std::vector<int64_t>{64, 3}));
  const GgufTensorView v = f.view(*q);
  ASSERT_EQ(v.data.size(), nv.size());
  EXPECT_EQ(std::memcmp(v.data.data(), nv.data(), nv.size()), 0);
  const GgufTensorView n = f.view(*f.find_tensor("output_norm.weight"));
  EXPECT_EQ(std::memcmp(n.data.data(), norm, sizeof norm), 0);
  EXPECT_EQ(f.file_size() % 64, 0u);  // the last tensor is padded too
}

TEST(GgufWriter, TypedAccessorsNameTheKeyAndBothTypes) {
  test::ScratchDir dir;
  const auto path = dir / "m.gguf";
  GgufMetadata m;
  m.set_i32("llama.block_count", 2);
  m.set_f32_array("x", std::vector<float>{1.f});
  GgufWriter wr(path, m, {});
  wr.finish();
  const GgufFile f = GgufFile::open(path);
  const auto err = [&](auto fn) -> std::string {
    try {
      fn();
    } catch (const Error& e) {
      return e.what();
    }
    return "(no error)";
  };
  EXPECT_EQ(err([&] { f.get_u32("llama.block_count"); }),
            path.string() + ": metadata 'llama.block_count' is int32, expected uint32");
  EXPECT_EQ(err([&] { f.get_string("general.name"); }),
            path.string() + ": metadata 'general.name' is missing");
  EXPECT_EQ(err([&] { f.get_i32_array("x"); }),
            path.string() + ": metadata 'x' is an array of float32, expected an array of int32");
}

TEST(GgufWriter, RefusesBadSpecsAndOutOfOrderWrites) {
  test::ScratchDir dir;
  const auto path = dir / "m.gguf";
  GgufMetadata m;
  EXPECT_THROW(GgufWriter(path, m, {{"a", GgmlType::Q4_K, {128}}}), Error);  // 128 % 256
  EXPECT_THROW(GgufWriter(path, m, {{"a", GgmlType::F32, {1}}, {"a", GgmlType::F32, {1}}}),
               Error);
  EXPECT_THROW(GgufWriter(path, m, {{std::string(64, 'n'), GgmlType::F32, {1}}}), Error);
  EXPECT_THROW(GgufWriter(path, m, {{"a", GgmlType::F32, {}}}), Error);
  EXPECT_THROW(m.set_u64("general.alignment", 32), Error);
  EXPECT_THROW(m.set_u32("general.alignment", 24), Error);
  {
    GgufWriter wr(path, m, {{"a", GgmlType::F32, {2}}, {"b", GgmlType::F32, {1}}});
    const float x[2] = {1, 2};
    EXPECT_THROW(wr.write("b", std::as_bytes(std::span(x, 1))), Error);
    EXPECT_THROW(wr.write("a", std::as_bytes(std::span(x, 1))), Error);
    wr.write("a", std::as_bytes(std::span(x, 2)));
    EXPECT_THROW(wr.finish(), Error);
  }
  // An unfinished writer leaves neither the file nor its temporary.
  EXPECT_TRUE(std::filesystem::is_empty(dir.path()));
}

}  // namespace
}  // namespace qf

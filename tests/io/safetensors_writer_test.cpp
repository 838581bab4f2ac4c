// Tests of the streaming safetensors writer: round trips through the reader, exact sizes,
// misuse errors, and clean errors on a full disk.
#include "core/error.h"
#include "io/safetensors.h"
#include "io/safetensors_writer.h"
#include "test_util.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace qf {
namespace {

std::vector<std::byte> random_bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<std::byte> out(n);
  for (auto& b : out) b = std::byte(rng() & 0xff);
  return out;
}

// Expects `f` to throw a qf::Error whose message contains `phrase`.
template <typename F>
void expect_error(F&& f, const std::string& phrase) {
  try {
    f();
    ADD_FAILURE() << "no error; wanted: " << phrase;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(phrase), std::string::npos)
        << "message: " << e.what() << "\nwanted: " << phrase;
  }
}

const std::vector<TensorSpec> kSpecs = {
    {"model.embed_tokens.weight", DType::BF16, {5, 7}},
    {"scale", DType::F32, {}},
    {"empty", DType::U8, {0}},
    {"ids", DType::I64, {3}},
    {"codes", DType::U8, {3, 3}},
};

TEST(SafetensorsWriter, RoundTrip) {
  test::ScratchDir dir;
  const auto path = dir / "out.safetensors";
  const std::map<std::string, std::string> meta = {{"format", "pt"}, {"producer", "qforge"}};
  std::vector<std::vector<std::byte>> data;
  {
    SafetensorsWriter w(path, kSpecs, meta);
    for (size_t i = 0; i < kSpecs.size(); ++i) {
      data.push_back(random_bytes(kSpecs[i].nbytes(), uint32_t(i)));
      w.write(kSpecs[i].name, data.back());
    }
    w.finish();
  }
  const std::string bytes = test::read_file(path);
  EXPECT_EQ(bytes.size(), safetensors_file_size(kSpecs, meta));

  // Header: __metadata__ first, padded with spaces so the data starts 8-byte aligned.
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  EXPECT_EQ(n % 8, 0u);
  const std::string header = bytes.substr(8, n);
  EXPECT_EQ(header.rfind(R"({"__metadata__":{"format":"pt","producer":"qforge"},)", 0), 0u)
      << header;
  EXPECT_EQ(header.find(R"("model.embed_tokens.weight":{"dtype":"BF16","shape":[5,7],)"
                        R"("data_offsets":[0,70]})"),
            header.find("},\"model") + 2);
  const size_t close = header.find_last_of('}');
  EXPECT_EQ(header.find_first_not_of(' ', close + 1), std::string::npos);

  const SafetensorsFile f = SafetensorsFile::open(path);
  EXPECT_EQ(f.metadata(), meta);
  ASSERT_EQ(f.tensors().size(), kSpecs.size());
  std::string data_section;
  for (size_t i = 0; i < kSpecs.size(); ++i) {
    const SafetensorsEntry* e = f.find(kSpecs[i].name);
    ASSERT_NE(e, nullptr) << kSpecs[i].name;
    EXPECT_EQ(e->dtype, kSpecs[i].dtype);
    EXPECT_EQ(e->shape, kSpecs[i].shape);
    const TensorView v = f.view(*e);
    ASSERT_EQ(v.nbytes, data[i].size());
    if (v.nbytes) {
      EXPECT_EQ(std::memcmp(v.data, data[i].data(), v.nbytes), 0) << kSpecs[i].name;
    }
    if (!data[i].empty())
      data_section.append(reinterpret_cast<const char*>(data[i].data()), data[i].size());
  }
  EXPECT_EQ(bytes.substr(8 + n), data_section);  // in spec order, contiguous
}

TEST(SafetensorsWriter, ChunkedWriteReportsEveryRangeOnce) {
  test::ScratchDir dir;
  const size_t n = (size_t(64) << 20) * 2 + 12345;  // three chunks, the last one short
  std::vector<std::byte> big(n);
  for (size_t i = 0; i < n; i += 4096) big[i] = std::byte(i >> 12);
  const auto small = random_bytes(24, 7);
  SafetensorsWriter w(dir / "c.safetensors",
                      {{"big", DType::U8, {int64_t(n)}}, {"small", DType::F32, {2, 3}}});
  size_t covered = 0;
  w.write("big", big, [&](size_t offset, size_t length) {
    EXPECT_EQ(offset, covered);
    covered += length;
  });
  EXPECT_EQ(covered, n);
  w.write("small", small, {});
  w.finish();
  const auto f = SafetensorsFile::open(dir / "c.safetensors");
  const TensorView v = f.view(*f.find("big"));
  EXPECT_EQ(0, std::memcmp(v.data, big.data(), n));
  EXPECT_EQ(0, std::memcmp(f.view(*f.find("small")).data, small.data(), small.size()));
}

TEST(SafetensorsWriter, DeterministicAndDefaultMetadata) {
  test::ScratchDir dir;
  const std::vector<TensorSpec> specs = {{"a", DType::F16, {4}}, {"b", DType::F32, {}}};
  for (const char* name : {"1.safetensors", "2.safetensors"}) {
    SafetensorsWriter w(dir / name, specs);
    w.write("a", random_bytes(8, 1));
    w.write("b", random_bytes(4, 2));
    w.finish();
  }
  EXPECT_EQ(test::read_file(dir / "1.safetensors"), test::read_file(dir / "2.safetensors"));
  const SafetensorsFile f = SafetensorsFile::open(dir / "1.safetensors");
  EXPECT_EQ(f.metadata(), (std::map<std::string, std::string>{{"format", "pt"}}));
}

TEST(SafetensorsWriter, NoTensorsNoMetadata) {
  test::ScratchDir dir;
  SafetensorsWriter w(dir / "e.safetensors", {}, {});
  w.finish();
  EXPECT_EQ(test::read_file(dir / "e.safetensors"), std::string("\x08\0\0\0\0\0\0\0{}      ", 16));
  EXPECT_EQ(safetensors_file_size({}, {}), 16u);
  EXPECT_TRUE(SafetensorsFile::open(dir / "e.safetensors").tensors().empty());
}

TEST(SafetensorsWriter, MisuseIsAnError) {
  test::ScratchDir dir;
  const auto path = dir / "m.safetensors";
  const std::vector<TensorSpec> specs = {{"a", DType::F32, {2, 3}}, {"b", DType::U8, {1}}};
  {
    SafetensorsWriter w(path, specs);
    expect_error([&] { w.write("b", random_bytes(1, 0)); },
                 path.string() + ": tensor 'b' written out of order: expected 'a' next");
    expect_error([&] { w.write("a", random_bytes(20, 0)); },
                 path.string() + ": tensor 'a' (F32 [2, 3]) needs 24 bytes but 20 were given");
    w.write("a", random_bytes(24, 0));
    expect_error([&] { w.finish(); },
                 path.string() + ": finish() after 1 of 2 tensors: 'b' was never written");
    w.write("b", random_bytes(1, 0));
    expect_error([&] { w.write("c", random_bytes(1, 0)); },
                 path.string() + ": tensor 'c' written after all 2 tensors");
    w.finish();
    expect_error([&] { w.finish(); }, "finish() called twice");
  }
  expect_error([&] { SafetensorsWriter w(path, {{"a", DType::U8, {1}}, {"a", DType::U8, {1}}}); },
               path.string() + ": duplicate tensor name 'a'");
  expect_error([&] { SafetensorsWriter w(path, {{"a", DType::U8, {2, -1}}}); },
               path.string() + ": tensor 'a': invalid shape [2, -1]");
  expect_error([&] { SafetensorsWriter w(path, {{"a", DType::F32, {1LL << 40, 1LL << 40}}}); },
               "invalid shape");
  expect_error([&] { SafetensorsWriter w(path, {{"__metadata__", DType::U8, {1}}}); },
               "'__metadata__' cannot be a tensor name");
  expect_error([&] { SafetensorsWriter w(path, {{"bad\xff", DType::U8, {1}}}); },
               "not valid UTF-8");
  expect_error([&] { SafetensorsWriter w(dir / "no/such/dir/x.safetensors", {}); },
               "/no/such/dir/x.safetensors: cannot create: No such file or directory");
}

TEST(SafetensorsWriter, DiskFullIsACleanError) {
  if (!std::filesystem::exists("/dev/full")) GTEST_SKIP() << "no /dev/full";
  // A tensor bigger than the stdio buffer fails in write().
  {
    SafetensorsWriter w("/dev/full", {{"big", DType::F32, {1 << 18}}});
    expect_error([&] { w.write("big", random_bytes(1 << 20, 3)); },
                 "/dev/full: write failed: No space left on device");
    expect_error([&] { w.write("big", random_bytes(1 << 20, 3)); }, "earlier write failed");
  }
  // A small file sits in the stdio buffer until finish() flushes it.
  {
    SafetensorsWriter w("/dev/full", {{"small", DType::U8, {4}}});
    w.write("small", random_bytes(4, 4));
    expect_error([&] { w.finish(); }, "/dev/full: write failed: No space left on device");
  }
}

}  // namespace
}  // namespace qf

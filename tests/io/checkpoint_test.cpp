// Tests of checkpoint directories: the real fixtures, sharded checkpoints built from them, and
// broken directories (missing shards, escaping index paths, malformed files).
#include "core/error.h"
#include "io/checkpoint.h"
#include "io/safetensors_writer.h"
#include "test_util.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

namespace fs = std::filesystem;

namespace qf {
namespace {

fs::path fixture(const std::string& name) { return test::fixtures_dir() / "models" / name; }

// Copies a directory's files (contents only, so the copies are writable).
void copy_dir(const fs::path& from, const fs::path& to) {
  for (const auto& de : fs::directory_iterator(from))
    if (de.is_regular_file())
      test::write_file(to / de.path().filename(), test::read_file(de.path()));
}

std::span<const std::byte> bytes_of(const SafetensorsFile& f, const SafetensorsEntry& e) {
  const TensorView v = f.view(e);
  return {v.data, v.nbytes};
}

std::string str_of(const CheckpointTensor& t) {
  const TensorView v = t.file->view(*t.entry);
  return {reinterpret_cast<const char*>(v.data), v.nbytes};
}

// Builds in `out` a checkpoint with the tensors of the fixture `src` split over two shards
// (first half, second half in offset order), an index, and the fixture's other files.
// `shard_metadata` goes into both shards.
void make_sharded(const fs::path& src, const fs::path& out,
                  const std::map<std::string, std::string>& shard_metadata = {{"format", "pt"}}) {
  copy_dir(src, out);
  fs::remove(out / "model.safetensors");
  const SafetensorsFile f = SafetensorsFile::open(src / "model.safetensors");
  const size_t half = f.tensors().size() / 2;
  nlohmann::json weight_map = nlohmann::json::object();
  for (int s = 0; s < 2; ++s) {
    const std::string shard = fmt::format("model-{:05d}-of-00002.safetensors", s + 1);
    const size_t lo = s == 0 ? 0 : half, hi = s == 0 ? half : f.tensors().size();
    std::vector<TensorSpec> specs;
    for (size_t i = lo; i < hi; ++i) {
      const auto& e = f.tensors()[i];
      specs.push_back({e.name, e.dtype, e.shape});
      weight_map[e.name] = shard;
    }
    SafetensorsWriter w(out / shard, specs, shard_metadata);
    for (size_t i = lo; i < hi; ++i) w.write(f.tensors()[i].name, bytes_of(f, f.tensors()[i]));
    w.finish();
  }
  const nlohmann::json index = {{"metadata", {{"total_size", 0}}}, {"weight_map", weight_map}};
  test::write_file(out / "model.safetensors.index.json", index.dump(2));
}

// Opens `dir` expecting a qf::Error whose message starts with `prefix` and contains `phrase`.
void expect_open_error(const fs::path& dir, const std::string& prefix, const std::string& phrase) {
  try {
    Checkpoint::open(dir);
    ADD_FAILURE() << "no error; wanted: " << phrase;
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.rfind(prefix, 0), 0u) << "message: " << msg << "\nwanted prefix: " << prefix;
    EXPECT_NE(msg.find(phrase), std::string::npos) << "message: " << msg << "\nwanted: " << phrase;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  }
}

nlohmann::json index_of(const fs::path& dir) {
  return nlohmann::json::parse(test::read_file(dir / "model.safetensors.index.json"));
}

void write_index(const fs::path& dir, const nlohmann::json& index) {
  test::write_file(dir / "model.safetensors.index.json", index.dump());
}

TEST(Checkpoint, Stories260K) {
  QF_REQUIRE_FIXTURES();
  const Checkpoint c = Checkpoint::open(fixture("stories260K-hf"));
  EXPECT_EQ(c.config().at("hidden_size"), 64);
  ASSERT_EQ(c.shards().size(), 1u);
  EXPECT_EQ(c.tensors().size(), 47u);
  EXPECT_TRUE(c.aliases().empty());
  const CheckpointTensor* emb = c.find("model.embed_tokens.weight");
  ASSERT_NE(emb, nullptr);
  EXPECT_EQ(emb->name, "model.embed_tokens.weight");
  EXPECT_EQ(emb->entry->dtype, DType::F32);
  EXPECT_EQ(emb->entry->shape, Shape({512, 64}));
  const CheckpointTensor* down = c.find("model.layers.4.mlp.down_proj.weight");
  ASSERT_NE(down, nullptr);
  EXPECT_EQ(down->entry->shape, Shape({64, 172}));
  EXPECT_EQ(c.find("lm_head.weight"), nullptr);  // tied, and not stored
  for (const auto& t : c.tensors()) EXPECT_EQ(t.entry->dtype, DType::F32) << t.name;
  EXPECT_EQ(c.extra_files(),
            (std::vector<std::string>{"tokenizer.model", "tokenizer_config.json"}));
  // The data section is exactly the tensors.
  const auto& shard = *c.shards()[0];
  EXPECT_EQ(c.tensor_bytes(), shard.tensors().back().end);
}

TEST(Checkpoint, TinyStoriesAliasResolvesToStoredTensor) {
  QF_REQUIRE_FIXTURES();
  const Checkpoint c = Checkpoint::open(fixture("tinystories-656K-hf"));
  EXPECT_EQ(c.tensors().size(), 20u);
  EXPECT_EQ(c.aliases(), (std::map<std::string, std::string>{
                             {"model.embed_tokens.weight", "lm_head.weight"}}));
  const CheckpointTensor* head = c.find("lm_head.weight");
  const CheckpointTensor* emb = c.find("model.embed_tokens.weight");
  ASSERT_NE(head, nullptr);
  ASSERT_NE(emb, nullptr);
  EXPECT_EQ(emb->name, "model.embed_tokens.weight");
  EXPECT_EQ(head->name, "lm_head.weight");
  EXPECT_EQ(emb->entry, head->entry);
  EXPECT_EQ(emb->file, head->file);
  EXPECT_EQ(emb->entry->name, "lm_head.weight");
  EXPECT_EQ(emb->entry->shape, Shape({2048, 128}));
  // tensors() lists stored tensors only, by stored name.
  for (const auto& t : c.tensors()) EXPECT_NE(t.name, "model.embed_tokens.weight");
  EXPECT_EQ(c.extra_files(),
            (std::vector<std::string>{"generation_config.json", "special_tokens_map.json",
                                      "tokenizer.json", "tokenizer_config.json"}));
}

TEST(Checkpoint, ShardedMatchesSingleFile) {
  QF_REQUIRE_FIXTURES();
  for (const char* name : {"stories260K-hf", "tinystories-656K-hf"}) {
    SCOPED_TRACE(name);
    test::ScratchDir dir;
    const auto tiny = std::string(name) == "tinystories-656K-hf";
    make_sharded(fixture(name), dir.path(),
                 tiny ? std::map<std::string, std::string>{{"format", "pt"},
                                                           {"model.embed_tokens.weight",
                                                            "lm_head.weight"}}
                      : std::map<std::string, std::string>{{"format", "pt"}});
    const Checkpoint single = Checkpoint::open(fixture(name));
    const Checkpoint sharded = Checkpoint::open(dir.path());
    ASSERT_EQ(sharded.shards().size(), 2u);
    EXPECT_EQ(sharded.shards()[0]->path().filename(), "model-00001-of-00002.safetensors");
    EXPECT_EQ(sharded.tensors().size(), single.tensors().size());
    EXPECT_EQ(sharded.tensor_bytes(), single.tensor_bytes());
    EXPECT_EQ(sharded.extra_files(), single.extra_files());
    EXPECT_EQ(sharded.aliases(), single.aliases());
    for (const auto& t : single.tensors()) {
      const CheckpointTensor* s = sharded.find(t.name);
      ASSERT_NE(s, nullptr) << t.name;
      EXPECT_EQ(s->entry->dtype, t.entry->dtype);
      EXPECT_EQ(s->entry->shape, t.entry->shape);
      EXPECT_EQ(str_of(*s), str_of(t)) << t.name;
    }
    for (const auto& [alias, target] : single.aliases())
      EXPECT_EQ(str_of(*sharded.find(alias)), str_of(*single.find(alias)));
  }
}

TEST(Checkpoint, IndexWinsOverSingleFile) {
  QF_REQUIRE_FIXTURES();
  test::ScratchDir dir;
  make_sharded(fixture("stories260K-hf"), dir.path());
  test::write_file(dir / "model.safetensors", "garbage");  // never opened
  const Checkpoint c = Checkpoint::open(dir.path());
  EXPECT_EQ(c.shards().size(), 2u);
  EXPECT_EQ(c.extra_files(),
            (std::vector<std::string>{"tokenizer.model", "tokenizer_config.json"}));
}

TEST(Checkpoint, DeeplyNestedConfigIsRefusedQuickly) {
  QF_REQUIRE_FIXTURES();
  test::ScratchDir dir;
  make_sharded(fixture("stories260K-hf"), dir.path());
  test::write_file(dir / "config.json", "{\"a\": " + std::string(5'000'000, '[') + "}");
  expect_open_error(dir.path(), (dir / "config.json").string() + ": ",
                    "JSON nests deeper than 64 levels");
  test::write_file(dir / "model.safetensors.index.json", std::string(100, '{'));
  test::write_file(dir / "config.json", "{}");
  expect_open_error(dir.path(), (dir / "model.safetensors.index.json").string() + ": ",
                    "invalid JSON");
}

TEST(Checkpoint, MissingShard) {
  QF_REQUIRE_FIXTURES();
  test::ScratchDir dir;
  make_sharded(fixture("stories260K-hf"), dir.path());
  fs::remove(dir / "model-00002-of-00002.safetensors");
  expect_open_error(dir.path(), (dir / "model.safetensors.index.json").string() + ": ",
                    "shard 'model-00002-of-00002.safetensors' named by the index is missing");
}

TEST(Checkpoint, IndexPathEscapingDirectory) {
  QF_REQUIRE_FIXTURES();
  for (const std::string evil :
       {"../evil.safetensors", "/etc/passwd", "sub/../../x.safetensors", "..", ""}) {
    SCOPED_TRACE(evil);
    test::ScratchDir dir;
    make_sharded(fixture("stories260K-hf"), dir.path());
    nlohmann::json index = index_of(dir.path());
    index["weight_map"]["model.norm.weight"] = evil;
    write_index(dir.path(), index);
    expect_open_error(dir.path(), (dir / "model.safetensors.index.json").string() + ": ",
                      "index names shard '" + evil + "' outside the model directory");
  }
}

TEST(Checkpoint, TruncatedShard) {
  QF_REQUIRE_FIXTURES();
  test::ScratchDir dir;
  make_sharded(fixture("stories260K-hf"), dir.path());
  const auto shard = dir / "model-00001-of-00002.safetensors";
  const std::string bytes = test::read_file(shard);
  test::write_file(shard, bytes.substr(0, bytes.size() - 100));
  expect_open_error(dir.path(), shard.string() + ": ", "out of range: the data section is");
  test::write_file(shard, bytes.substr(0, 100));
  expect_open_error(dir.path(), shard.string() + ": ",
                    "truncated: header length");
}

TEST(Checkpoint, MalformedConfig) {
  QF_REQUIRE_FIXTURES();
  test::ScratchDir dir;
  copy_dir(fixture("stories260K-hf"), dir.path());
  test::write_file(dir / "config.json", "{\n  \"hidden_size\": 64,\n  oops\n}\n");
  expect_open_error(dir.path(), (dir / "config.json").string() + ": invalid JSON: ",
                    "parse error at line 3, column 3");
  test::write_file(dir / "config.json", "[1]");
  expect_open_error(dir.path(), (dir / "config.json").string() + ": ", "not a JSON object");
  test::write_file(dir / "config.json", "");
  expect_open_error(dir.path(), (dir / "config.json").string() + ": invalid JSON: ",
                    "unexpected end of input");
  fs::remove(dir / "config.json");
  expect_open_error(dir.path(), (dir / "config.json").string() + ": not found", "");
}

// Found by quant_config_fuzz: a config.json nesting a million arrays parsed, then overflowed
// the stack when the checkpoint copied it (copy and dump recurse).
TEST(Checkpoint, DeeplyNestedJsonIsRefused) {
  test::ScratchDir dir;
  const size_t n = 1'000'000;
  test::write_file(dir / "config.json", "{\"a\": " + std::string(n, '[') + std::string(n, ']') + "}");
  expect_open_error(dir.path(), (dir / "config.json").string() + ": ",
                    "JSON nests deeper than 64 levels");
  // The index is read the same way.
  test::write_file(dir / "config.json", "{}");
  test::write_file(dir / "model.safetensors.index.json",
                   "{\"metadata\": " + std::string(300, '[') + std::string(300, ']') + "}");
  expect_open_error(dir.path(), (dir / "model.safetensors.index.json").string() + ": ",
                    "JSON nests deeper than 64 levels");
}

TEST(Checkpoint, NoWeights) {
  test::ScratchDir dir;
  test::write_file(dir / "config.json", "{}");
  expect_open_error(dir.path(), dir.path().string() + ": ",
                    "no model.safetensors or model.safetensors.index.json");
  expect_open_error(dir / "absent", (dir / "absent").string() + ": not found", "");
  expect_open_error(dir / "config.json", (dir / "config.json").string() + ": not a directory",
                    "");
}

TEST(Checkpoint, IndexNamesTensorMissingFromShard) {
  QF_REQUIRE_FIXTURES();
  test::ScratchDir dir;
  make_sharded(fixture("stories260K-hf"), dir.path());
  nlohmann::json index = index_of(dir.path());
  index["weight_map"]["lm_head.weight"] = "model-00002-of-00002.safetensors";
  write_index(dir.path(), index);
  expect_open_error(dir.path(), (dir / "model.safetensors.index.json").string() + ": ",
                    "tensor 'lm_head.weight' is mapped to shard "
                    "'model-00002-of-00002.safetensors' but that shard does not contain it");
  // A tensor mapped to the wrong shard (it is stored in shard 1).
  index = index_of(dir.path());
  index["weight_map"].erase("lm_head.weight");
  index["weight_map"]["model.embed_tokens.weight"] = "model-00002-of-00002.safetensors";
  write_index(dir.path(), index);
  expect_open_error(dir.path(), (dir / "model.safetensors.index.json").string() + ": ",
                    "tensor 'model.embed_tokens.weight' is mapped to shard "
                    "'model-00002-of-00002.safetensors' but that shard does not contain it");
}

TEST(Checkpoint, MalformedIndex) {
  QF_REQUIRE_FIXTURES();
  test::ScratchDir dir;
  make_sharded(fixture("stories260K-hf"), dir.path());
  const std::string label = (dir / "model.safetensors.index.json").string() + ": ";
  write_index(dir.path(), nlohmann::json{{"metadata", nlohmann::json::object()}});
  expect_open_error(dir.path(), label, "index has no weight_map");
  write_index(dir.path(), nlohmann::json{{"weight_map", {{"a", 1}}}});
  expect_open_error(dir.path(), label, "weight_map entry for 'a' is not a file name (number)");
  test::write_file(dir / "model.safetensors.index.json", "{\"weight_map\": {");
  expect_open_error(dir.path(), label + "invalid JSON: ", "parse error at line 1, column 17");
}

TEST(Checkpoint, TensorInTwoShards) {
  QF_REQUIRE_FIXTURES();
  test::ScratchDir dir;
  make_sharded(fixture("stories260K-hf"), dir.path());
  // A third shard repeats a tensor of the first.
  const Checkpoint ok = Checkpoint::open(dir.path());
  const CheckpointTensor* emb = ok.find("model.embed_tokens.weight");
  ASSERT_NE(emb, nullptr);
  {
    SafetensorsWriter w(dir / "model-extra.safetensors",
                        {{"model.embed_tokens.weight", emb->entry->dtype, emb->entry->shape}});
    w.write("model.embed_tokens.weight", bytes_of(*emb->file, *emb->entry));
    w.finish();
  }
  nlohmann::json index = index_of(dir.path());
  index["weight_map"]["extra"] = "model-extra.safetensors";
  write_index(dir.path(), index);
  expect_open_error(dir.path(), dir.path().string() + ": ",
                    "tensor 'model.embed_tokens.weight' is stored in two shards, "
                    "model-00001-of-00002.safetensors and model-extra.safetensors");
}

TEST(Checkpoint, OpeningNeverModifiesInputs) {
  QF_REQUIRE_FIXTURES();
  test::ScratchDir dir;
  copy_dir(fixture("tinystories-656K-hf"), dir.path());
  std::map<std::string, std::pair<fs::file_time_type, std::string>> before;
  const auto old = fs::file_time_type::clock::now() - std::chrono::hours(1);
  for (const auto& de : fs::directory_iterator(dir.path())) {
    fs::last_write_time(de.path(), old);  // so a rewrite within the test's second still shows
    before[de.path().filename().string()] = {old, test::read_file(de.path())};
  }
  {
    const Checkpoint c = Checkpoint::open(dir.path());
    uint64_t sum = 0;
    for (const auto& t : c.tensors()) {
      const TensorView v = t.file->view(*t.entry);
      for (size_t i = 0; i < v.nbytes; i += 997) sum += uint8_t(v.data[i]);
      t.file->release(*t.entry);
    }
    EXPECT_GT(sum, 0u);
  }
  size_t n = 0;
  for (const auto& de : fs::directory_iterator(dir.path())) {
    const auto& [mtime, bytes] = before.at(de.path().filename().string());
    EXPECT_EQ(fs::last_write_time(de.path()), mtime) << de.path();
    EXPECT_EQ(test::read_file(de.path()), bytes) << de.path();
    ++n;
  }
  EXPECT_EQ(n, before.size());  // nothing created
}

}  // namespace
}  // namespace qf

// Opening a Hugging Face checkpoint directory: config, shards, index and aliases.
#include "io/checkpoint.h"

#include "core/error.h"
#include "core/mapped_file.h"
#include "io/io_util.h"
#include "io/json_file.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <set>
#include <system_error>

namespace fs = std::filesystem;

namespace qf {
namespace {

constexpr const char* kConfig = "config.json";
constexpr const char* kSingle = "model.safetensors";
constexpr const char* kIndex = "model.safetensors.index.json";

// A shard must be a plain file name: anything with a separator, "..", or an absolute path
// could make a downloaded index read files outside the model directory. Symlinked shards (the
// Hugging Face cache layout) are fine; only the name is checked.
bool plain_file_name(const std::string& name) {
  if (name.empty() || name == "." || name == "..") return false;
  if (name.find('/') != std::string::npos || name.find('\\') != std::string::npos) return false;
  if (name.find('\0') != std::string::npos) return false;
  return true;
}

struct Index {
  std::vector<std::string> shards;               // sorted, unique
  std::map<std::string, std::string> weight_map;  // tensor -> shard
};

Index read_index(const fs::path& path) {
  const nlohmann::json j = read_json_file(path);
  const std::string label = path.string();
  if (!j.is_object()) fail("{}: index is not a JSON object", label);
  const auto wm = j.find("weight_map");
  if (wm == j.end()) fail("{}: index has no weight_map", label);
  if (!wm->is_object()) fail("{}: weight_map is not an object", label);
  if (const auto md = j.find("metadata"); md != j.end() && !md->is_object() && !md->is_null())
    fail("{}: metadata is not an object", label);
  Index index;
  std::set<std::string> shards;
  for (const auto& [name, file] : wm->items()) {
    if (!file.is_string())
      fail("{}: weight_map entry for {} is not a file name ({})", label, quote_name(name),
           file.type_name());
    const auto& f = file.get_ref<const std::string&>();
    if (!plain_file_name(f))
      fail("{}: index names shard {} outside the model directory (shards must be plain file "
           "names)",
           label, quote_name(f));
    shards.insert(f);
    index.weight_map.emplace(name, f);
  }
  if (index.weight_map.empty()) fail("{}: weight_map is empty", label);
  index.shards.assign(shards.begin(), shards.end());
  return index;
}


// Config, index and tokenizer files: a few MB at most for real models (tokenizer.json of a 256k
// vocabulary ~ 30 MB); the cap keeps a huge or endless file from being read whole.
constexpr uint64_t kMaxJsonFileBytes = uint64_t(1) << 30;

std::string json_file_text(const fs::path& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) fail("{}: not found", path.string());
  return read_regular_file(path, "the JSON file", kMaxJsonFileBytes);
}

// dst [rows, cols] = the transpose of src [cols, rows], in tiles that stay in L1 cache.
template <typename T>
void transpose_elements(const std::byte* src, int64_t rows, int64_t cols, std::byte* dst) {
  constexpr int64_t kTile = 32;
  for (int64_t c0 = 0; c0 < cols; c0 += kTile)
    for (int64_t r0 = 0; r0 < rows; r0 += kTile)
      for (int64_t c = c0; c < std::min(cols, c0 + kTile); ++c)
        for (int64_t r = r0; r < std::min(rows, r0 + kTile); ++r) {
          T v;
          std::memcpy(&v, src + size_t(c * rows + r) * sizeof(T), sizeof(T));
          std::memcpy(dst + size_t(r * cols + c) * sizeof(T), &v, sizeof(T));
        }
}

}  // namespace

nlohmann::json read_json_file(const fs::path& path) {
  return parse_json_text(json_file_text(path), path.string());
}

Checkpoint Checkpoint::open(const fs::path& dir) {
  std::error_code ec;
  if (!fs::exists(dir, ec)) fail("{}: not found", dir.string());
  if (!fs::is_directory(dir, ec)) fail("{}: not a directory", dir.string());

  Checkpoint c;
  c.dir_ = dir;
  c.ordered_config_ = parse_ordered_json_text(json_file_text(dir / kConfig), (dir / kConfig).string());
  if (!c.ordered_config_.is_object()) fail("{}: not a JSON object", (dir / kConfig).string());
  c.config_ = nlohmann::json::parse(c.ordered_config_.dump());

  // The index wins over a lone model.safetensors when both exist, as in vLLM, which filters the
  // directory's *.safetensors through the weight_map.
  std::optional<Index> index;
  if (fs::exists(dir / kIndex, ec)) {
    index = read_index(dir / kIndex);
    for (const auto& shard : index->shards) {
      const fs::path p = dir / shard;
      if (!fs::exists(p, ec))
        fail("{}: shard {} named by the index is missing", (dir / kIndex).string(),
             quote_name(shard));
      c.shards_.push_back(std::make_unique<SafetensorsFile>(SafetensorsFile::open(p)));
    }
  } else if (fs::exists(dir / kSingle, ec)) {
    c.shards_.push_back(std::make_unique<SafetensorsFile>(SafetensorsFile::open(dir / kSingle)));
  } else {
    fail("{}: no {} or {} (not a safetensors checkpoint)", dir.string(), kSingle, kIndex);
  }

  c.index_shards();

  // Aliases: a metadata value naming a tensor stored in the same shard (transformers writes
  // tied weights this way). Stored names win over aliases; the first shard's alias wins.
  for (const auto& shard : c.shards_) {
    for (const auto& [alias, target] : shard->metadata()) {
      if (alias == "format" || c.by_name_.count(alias)) continue;
      const SafetensorsEntry* e = shard->find(target);
      if (!e) continue;
      c.aliases_.emplace(alias, target);
      c.by_name_.emplace(alias, c.tensors_.size() + c.alias_tensors_.size());
      c.alias_tensors_.push_back({alias, shard.get(), e});
    }
  }

  if (index) {
    for (const auto& [name, shard] : index->weight_map) {
      const CheckpointTensor* t = c.find(name);
      if (!t || t->file->path().filename() != shard)
        fail("{}: tensor {} is mapped to shard {} but that shard does not contain it",
             (dir / kIndex).string(), quote_name(name), quote_name(shard));
    }
  }

  // Everything else an exporter should carry over (tokenizer, generation config, ...).
  for (const auto& de : fs::directory_iterator(dir)) {
    if (!de.is_regular_file(ec)) continue;
    const std::string name = de.path().filename().string();
    if (name == kConfig || name == kIndex || de.path().extension() == ".safetensors") continue;
    c.extra_files_.push_back(name);
  }
  std::sort(c.extra_files_.begin(), c.extra_files_.end());
  return c;
}

void Checkpoint::index_shards() {
  // Stored tensors, each in exactly one shard.
  std::map<std::string, size_t> shard_of;  // stored name -> shard index
  for (size_t s = 0; s < shards_.size(); ++s) {
    const SafetensorsFile& f = *shards_[s];
    for (const SafetensorsEntry& e : f.tensors()) {
      const auto [it, inserted] = shard_of.emplace(e.name, s);
      if (!inserted)
        fail("{}: tensor {} is stored in two shards, {} and {}", dir_.string(), quote_name(e.name),
             shards_[it->second]->path().filename().string(), f.path().filename().string());
      by_name_.emplace(e.name, tensors_.size());
      tensors_.push_back({e.name, &f, &e});
    }
  }
}

Checkpoint Checkpoint::from_files(const fs::path& dir, const nlohmann::ordered_json& config,
                                  std::vector<std::unique_ptr<SafetensorsFile>> files) {
  Checkpoint c;
  c.dir_ = dir;
  c.ordered_config_ = config;
  c.config_ = nlohmann::json::parse(config.dump());
  c.shards_ = std::move(files);
  c.index_shards();
  return c;
}

const CheckpointTensor* Checkpoint::find(const std::string& name) const {
  const auto it = by_name_.find(name);
  if (it == by_name_.end()) return nullptr;
  return it->second < tensors_.size() ? &tensors_[it->second]
                                      : &alias_tensors_[it->second - tensors_.size()];
}

void Checkpoint::split_tensor(const std::string& name, const std::vector<Part>& parts) {
  const auto it = by_name_.find(name);
  if (it == by_name_.end() || it->second >= tensors_.size())
    fail("{}: tensor '{}' to split is missing", dir_.string(), name);
  for (const auto& [alias, stored] : aliases_)
    if (stored == name) fail("{}: tensor '{}' to split has the alias '{}'", dir_.string(), name, alias);
  const size_t index = it->second;
  const CheckpointTensor whole = tensors_[index];
  const uint64_t element = dtype_size(whole.entry->dtype);
  std::vector<CheckpointTensor> replaced;
  uint64_t at = whole.entry->begin;
  for (const Part& p : parts) {
    SafetensorsEntry e;
    e.name = p.name;
    e.dtype = whole.entry->dtype;
    e.shape = p.shape;
    e.begin = at;
    e.end = at + uint64_t(shape_numel(p.shape)) * element;
    at = e.end;
    if (p.transposed && p.shape.size() != 2)
      fail("{}: part '{}' of tensor '{}' is transposed but not 2-D", whole.file->path().string(),
           p.name, name);
    part_entries_.push_back(std::move(e));
    replaced.push_back({p.name, whole.file, &part_entries_.back(), p.transposed});
  }
  if (at != whole.entry->end)
    fail("{}: tensor '{}' ({} bytes) does not split into the {} parts expected of it",
         whole.file->path().string(), name, whole.entry->end - whole.entry->begin, parts.size());
  tensors_.erase(tensors_.begin() + int64_t(index));
  tensors_.insert(tensors_.begin() + int64_t(index), replaced.begin(), replaced.end());
  // Positions moved: index by name again (aliases after the stored tensors).
  std::map<std::string, size_t> by_name;
  for (size_t i = 0; i < tensors_.size(); ++i)
    if (!by_name.emplace(tensors_[i].name, i).second)
      fail("{}: split of '{}' gives the name '{}' of another tensor", dir_.string(), name,
           tensors_[i].name);
  for (size_t i = 0; i < alias_tensors_.size(); ++i)
    by_name.emplace(alias_tensors_[i].name, tensors_.size() + i);
  by_name_ = std::move(by_name);
}

void Checkpoint::share_tensor(const std::string& name, const std::vector<std::string>& names) {
  const CheckpointTensor* t = find(name);
  if (!t) fail("{}: tensor '{}' to share is missing", dir_.string(), name);
  const CheckpointTensor whole = *t;  // alias_tensors_ may move
  for (const std::string& n : names) {
    if (by_name_.count(n))
      fail("{}: tensor '{}' cannot also be named '{}', which another tensor has",
           whole.file->path().string(), name, n);
    by_name_.emplace(n, tensors_.size() + alias_tensors_.size());
    alias_tensors_.push_back({n, whole.file, whole.entry, false});
  }
}

TensorData read_tensor(const CheckpointTensor& t) {
  TensorData d;
  d.view = t.file->view(*t.entry);
  if (!t.transposed) return d;
  // Stored [cols, rows], wanted [rows, cols].
  const int64_t rows = d.view.shape[0], cols = d.view.shape[1];
  auto out = std::make_shared<std::vector<std::byte>>(d.view.nbytes);
  switch (dtype_size(d.view.dtype)) {
    case 1: transpose_elements<uint8_t>(d.view.data, rows, cols, out->data()); break;
    case 2: transpose_elements<uint16_t>(d.view.data, rows, cols, out->data()); break;
    case 4: transpose_elements<uint32_t>(d.view.data, rows, cols, out->data()); break;
    case 8: transpose_elements<uint64_t>(d.view.data, rows, cols, out->data()); break;
    default:
      fail("{}: tensor '{}' of dtype {} cannot be transposed", t.file->path().string(), t.name,
           dtype_name(d.view.dtype));
  }
  d.view.data = out->data();
  d.owned = std::move(out);
  return d;
}

uint64_t Checkpoint::tensor_bytes() const {
  uint64_t n = 0;
  for (const auto& t : tensors_) n += t.entry->end - t.entry->begin;
  return n;
}

}  // namespace qf

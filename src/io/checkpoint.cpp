// Opening a Hugging Face checkpoint directory: config, shards, index and aliases.
#include "io/checkpoint.h"

#include "core/error.h"
#include "core/mapped_file.h"
#include "io/io_util.h"
#include "io/json_file.h"

#include <algorithm>
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


template <typename Json>
Json parse_json_file(const fs::path& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) fail("{}: not found", path.string());
  const MappedFile file = MappedFile::open(path);
  const char* p = reinterpret_cast<const char*>(file.data());
  require_json_depth(std::string_view(p, file.size()), path.string());
  try {
    return Json::parse(p, p + file.size());
  } catch (const nlohmann::json::exception& e) {
    fail("{}: invalid JSON: {}", path.string(), json_error_reason(e));
  }
}

}  // namespace

nlohmann::json read_json_file(const fs::path& path) { return parse_json_file<nlohmann::json>(path); }

Checkpoint Checkpoint::open(const fs::path& dir) {
  std::error_code ec;
  if (!fs::exists(dir, ec)) fail("{}: not found", dir.string());
  if (!fs::is_directory(dir, ec)) fail("{}: not a directory", dir.string());

  Checkpoint c;
  c.dir_ = dir;
  c.ordered_config_ = parse_json_file<nlohmann::ordered_json>(dir / kConfig);
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

  // Stored tensors, each in exactly one shard.
  std::map<std::string, size_t> shard_of;  // stored name -> shard index
  for (size_t s = 0; s < c.shards_.size(); ++s) {
    const SafetensorsFile& f = *c.shards_[s];
    for (const SafetensorsEntry& e : f.tensors()) {
      const auto [it, inserted] = shard_of.emplace(e.name, s);
      if (!inserted)
        fail("{}: tensor {} is stored in two shards, {} and {}", dir.string(), quote_name(e.name),
             c.shards_[it->second]->path().filename().string(), f.path().filename().string());
      c.by_name_.emplace(e.name, c.tensors_.size());
      c.tensors_.push_back({e.name, &f, &e});
    }
  }

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

const CheckpointTensor* Checkpoint::find(const std::string& name) const {
  const auto it = by_name_.find(name);
  if (it == by_name_.end()) return nullptr;
  return it->second < tensors_.size() ? &tensors_[it->second]
                                      : &alias_tensors_[it->second - tensors_.size()];
}

uint64_t Checkpoint::tensor_bytes() const {
  uint64_t n = 0;
  for (const auto& t : tensors_) n += t.entry->end - t.entry->begin;
  return n;
}

}  // namespace qf

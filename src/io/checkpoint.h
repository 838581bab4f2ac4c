// A Hugging Face checkpoint directory: config.json, one `model.safetensors` or shards listed by
// `model.safetensors.index.json`, plus tokenizer and generation files. Tensors are looked up by
// their HF names; `__metadata__` aliases (name -> stored name) are resolved, so a tensor stored
// once under another name is found under both. Files are only mapped read-only.
#pragma once

#include "io/safetensors.h"

#include <nlohmann/json.hpp>

#include <deque>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace qf {

struct CheckpointTensor {
  std::string name;                 // HF name as the model refers to it
  const SafetensorsFile* file = nullptr;
  const SafetensorsEntry* entry = nullptr;  // the stored tensor (may be stored under an alias)
  // The entry's bytes hold the transpose of its 2-D shape [r, c]: a [c, r] row-major matrix
  // (a split part of a tensor stored as x @ W, gpt-oss experts). Its data must be read with
  // read_tensor, which makes the [r, c] copy; entry->shape is the shape as the model reads it.
  bool transposed = false;
};

// A tensor's data in the shape and orientation the model reads it: a view of the mapping, or
// for a transposed part a row-major copy owned by `owned` (valid while this lives).
struct TensorData {
  TensorView view;
  std::shared_ptr<const std::vector<std::byte>> owned;  // null for views of the mapping
};
TensorData read_tensor(const CheckpointTensor& t);

class Checkpoint {
 public:
  // Opens `dir`. Throws qf::Error naming the file and problem: missing or malformed
  // config.json, an index naming a missing shard or a path outside `dir`, an invalid shard, a
  // tensor listed in the index but absent from its shard, the same tensor in two shards.
  static Checkpoint open(const std::filesystem::path& dir);
  // A checkpoint made of files opened elsewhere (a GGUF file's tensors under Hugging Face
  // names, model/gguf_checkpoint.h): `config` stands for config.json, `dir` names the input in
  // messages; no aliases, no extra files. Throws qf::Error for a tensor in two files.
  static Checkpoint from_files(const std::filesystem::path& dir,
                               const nlohmann::ordered_json& config,
                               std::vector<std::unique_ptr<SafetensorsFile>> files);

  const std::filesystem::path& dir() const { return dir_; }
  const nlohmann::json& config() const { return config_; }
  // The same config.json with its key order kept, for writing derived configs: outputs are
  // made from what was read at open, never from a second read of a file that may have changed.
  const nlohmann::ordered_json& ordered_config() const { return ordered_config_; }
  // Every stored tensor in a stable order (shard order, then offset order), by stored name.
  const std::vector<CheckpointTensor>& tensors() const { return tensors_; }
  // Looks a tensor up by name, through aliases. nullptr if absent.
  const CheckpointTensor* find(const std::string& name) const;
  // alias name -> stored name, from the shards' __metadata__.
  const std::map<std::string, std::string>& aliases() const { return aliases_; }
  // Shard files in order.
  const std::vector<std::unique_ptr<SafetensorsFile>>& shards() const { return shards_; }
  // Files other than config, index and shards (tokenizer, generation config, ...), relative
  // names, to be copied to an exported checkpoint.
  const std::vector<std::string>& extra_files() const { return extra_files_; }
  // Sum of the stored tensors' bytes.
  uint64_t tensor_bytes() const;

  // Presents stored tensor `name` as `parts` instead: consecutive byte ranges of it, in order,
  // each with its own name, shape and the tensor's dtype (a fused 3-D tensor seen as its 2-D
  // slices). The parts take the tensor's place in tensors(); `name` is no longer found.
  // Throws qf::Error naming the file when the tensor is absent or aliased, or when the parts'
  // sizes do not add up to its bytes. A `transposed` part is 2-D and stored as the transpose
  // of `shape` (see CheckpointTensor::transposed).
  struct Part {
    std::string name;
    Shape shape;
    bool transposed = false;
  };
  void split_tensor(const std::string& name, const std::vector<Part>& parts);
  // Finds stored tensor `name` under each of `names` too (one scalar that several modules read:
  // the tensor scale of a fused expert tensor, per expert). Not listed in aliases(). Throws
  // qf::Error naming the file when `name` is absent or a new name is taken.
  void share_tensor(const std::string& name, const std::vector<std::string>& names);

 private:
  void index_shards();  // tensors_ and by_name_ from shards_

  std::filesystem::path dir_;
  nlohmann::json config_;
  nlohmann::ordered_json ordered_config_;
  std::vector<std::unique_ptr<SafetensorsFile>> shards_;
  std::vector<CheckpointTensor> tensors_;
  // Index into tensors_, or for aliases tensors_.size() + index into alias_tensors_.
  std::map<std::string, size_t> by_name_;
  std::vector<CheckpointTensor> alias_tensors_;  // name = alias, entry = the stored tensor
  std::deque<SafetensorsEntry> part_entries_;    // entries of split_tensor's parts (stable)
  std::map<std::string, std::string> aliases_;
  std::vector<std::string> extra_files_;
};

// Reads and parses a JSON file; throws qf::Error naming the file.
nlohmann::json read_json_file(const std::filesystem::path& path);

}  // namespace qf

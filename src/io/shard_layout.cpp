#include "io/shard_layout.h"

#include "io/json_file.h"

#include <fmt/format.h>

namespace qf {

std::vector<std::vector<size_t>> plan_shards(const std::vector<uint64_t>& sizes,
                                             uint64_t max_bytes) {
  std::vector<std::vector<size_t>> shards(1);
  uint64_t shard_bytes = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (!shards.back().empty() && shard_bytes + sizes[i] > max_bytes) {
      shards.emplace_back();
      shard_bytes = 0;
    }
    shards.back().push_back(i);
    shard_bytes += sizes[i];
  }
  return shards;
}

std::string shard_file_name(size_t index, size_t count) {
  if (count == 1) return "model.safetensors";
  return fmt::format("model-{:05d}-of-{:05d}.safetensors", index + 1, count);
}

void write_shard_index(const std::filesystem::path& dir, uint64_t total_size,
                       const std::map<std::string, std::string>& weight_map) {
  nlohmann::ordered_json index;
  index["metadata"]["total_size"] = total_size;
  index["weight_map"] = weight_map;
  write_json_file(dir / "model.safetensors.index.json", index);
}

}  // namespace qf

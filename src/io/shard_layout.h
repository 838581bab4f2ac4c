// How a checkpoint's tensors are cut into safetensors shards, named, and indexed, the way
// Hugging Face `save_pretrained` does it.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

namespace qf {

// Cuts items of `sizes` bytes, kept in order, into consecutive shards of at most `max_bytes`
// (an item larger than that gets a shard of its own). Always at least one (maybe empty) shard;
// each shard lists item indices.
std::vector<std::vector<size_t>> plan_shards(const std::vector<uint64_t>& sizes,
                                             uint64_t max_bytes);

// "model.safetensors" for a single shard, else "model-00001-of-00003.safetensors".
std::string shard_file_name(size_t index, size_t count);

// Writes `model.safetensors.index.json` ({"metadata": {"total_size"}, "weight_map"}) into `dir`.
void write_shard_index(const std::filesystem::path& dir, uint64_t total_size,
                       const std::map<std::string, std::string>& weight_map);

}  // namespace qf

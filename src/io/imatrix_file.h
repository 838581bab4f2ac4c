// llama.cpp importance matrices (`llama-imatrix` output), read the way llama-quantize reads
// them (tools/quantize/quantize.cpp load_imatrix over common/imatrix-loader.cpp), both formats:
//   GGUF (the default since 2025): per weight `<name>.in_sum2` F32 [n_per_row, n_mat] (sums of
//     x^2 over the tokens) and `<name>.counts` F32 [1, n_mat] (tokens), metadata
//     imatrix.datasets / imatrix.chunk_count / imatrix.chunk_size (all three required, as
//     llama-quantize requires them). Importance = in_sum2 / float(round(count)), 1 where the
//     count is 0.
//   legacy `.dat`: int32 n_entries; per entry int32 name length, name bytes, int32 ncall, int32
//     nval, float values[nval] (stored as mean x^2 * ncall); then optionally int32 chunk count,
//     int32 dataset name length, dataset name. Importance = value / float(ncall), the value
//     itself when ncall <= 0.
// The result is the per-input-column mean x^2 llama-quantize hands to ggml's quantize_<type>.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <span>
#include <string>
#include <vector>

namespace qf {

struct ImatrixData {
  bool legacy = false;
  std::map<std::string, std::vector<float>> entries;  // llama.cpp tensor name -> importance
  std::vector<std::string> datasets;
  int64_t chunk_count = 0;
  int64_t chunk_size = 0;  // 0 in the legacy format

  // The importance of `name`, or null.
  const std::vector<float>* find(const std::string& name) const {
    auto it = entries.find(name);
    return it == entries.end() ? nullptr : &it->second;
  }
};

// Parses a whole file's bytes (GGUF when they start with the GGUF magic, else legacy). `label`
// starts every error. Strict: throws qf::Error for truncation, trailing bytes that are not the
// optional legacy trailer, non-positive or oversized counts and lengths, duplicate names, an
// in_sum2 without its counts (or the reverse), non-F32 tensors, an in_sum2 whose size is not a
// multiple of its counts', negative counts, NaN/Inf or negative values, an empty file, and a
// GGUF without the imatrix.* metadata. Safe on arbitrary input (fuzzed).
ImatrixData parse_imatrix(std::span<const std::byte> bytes, const std::string& label);

// Reads and parses `path` (errors start with the path).
ImatrixData load_imatrix(const std::filesystem::path& path);

}  // namespace qf

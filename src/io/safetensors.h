// Reading safetensors files: an 8-byte little-endian header length, a JSON header, then the
// tensor data. The header is validated completely before any tensor is handed out: dtypes,
// shapes against byte counts, offsets in range, contiguous and non-overlapping, the data
// section ending exactly at the end of the file.
#pragma once

#include "core/mapped_file.h"
#include "core/tensor.h"

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace qf {

struct SafetensorsEntry {
  std::string name;
  DType dtype = DType::F32;
  Shape shape;
  uint64_t begin = 0;  // byte offsets relative to the start of the data section
  uint64_t end = 0;
};

struct SafetensorsHeader {
  std::vector<SafetensorsEntry> tensors;  // sorted by offset
  std::map<std::string, std::string> metadata;  // "__metadata__", string to string
};

// Largest header the reader accepts (the safetensors reference limit).
inline constexpr uint64_t kMaxSafetensorsHeader = 100'000'000;

// Parses and validates a header. `data_size` is the number of bytes after the header. `label`
// (usually the file path) starts every error message. Throws qf::Error on anything invalid.
// Safe on arbitrary input (fuzzed).
SafetensorsHeader parse_safetensors_header(std::string_view json, uint64_t data_size,
                                           const std::string& label);

// Parses a whole file's bytes: the 8-byte little-endian header length (checked against the
// size and kMaxSafetensorsHeader), then the header via parse_safetensors_header. Sets
// `*data_start` (if given) to the offset of the data section. Throws qf::Error starting with
// `label`. Safe on arbitrary input (this is what the fuzz target drives).
SafetensorsHeader parse_safetensors_bytes(std::span<const std::byte> bytes,
                                          const std::string& label,
                                          uint64_t* data_start = nullptr);

class SafetensorsFile {
 public:
  // Maps and validates the file. Throws qf::Error naming the file and the problem.
  static SafetensorsFile open(const std::filesystem::path& path);
  // Tensors whose bytes lie in a mapping opened elsewhere (a GGUF file's float tensors under
  // Hugging Face names): `entries` with offsets relative to `data_start`. Entries may leave
  // gaps (alignment padding) but must not overlap, and each must hold exactly its shape's bytes
  // inside the mapping; names must be unique. Throws qf::Error naming the mapping's path.
  static SafetensorsFile over(std::shared_ptr<const MappedFile> file, uint64_t data_start,
                              std::vector<SafetensorsEntry> entries);

  const std::filesystem::path& path() const { return file_->path(); }
  const std::vector<SafetensorsEntry>& tensors() const { return header_.tensors; }
  const std::map<std::string, std::string>& metadata() const { return header_.metadata; }
  // nullptr if absent.
  const SafetensorsEntry* find(std::string_view name) const;
  // A view into the mapping; valid while this object lives.
  TensorView view(const SafetensorsEntry& entry) const;
  // Drops the entry's pages from resident memory once the caller is done with them.
  void release(const SafetensorsEntry& entry) const;
  // The same for `length` bytes starting `offset` bytes into the entry's data.
  void release(const SafetensorsEntry& entry, uint64_t offset, uint64_t length) const;
  uint64_t file_size() const { return file_->size(); }

 private:
  void index_names();

  std::shared_ptr<const MappedFile> file_;  // shared with the GGUF reader for over()
  SafetensorsHeader header_;
  uint64_t data_start_ = 0;
  std::vector<uint32_t> by_name_;  // indices into header_.tensors, sorted by name, for find()
};

}  // namespace qf

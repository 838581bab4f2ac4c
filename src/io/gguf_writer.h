// Writing one GGUF v3 file, streaming: the metadata and the full list of tensors (names, ggml
// types, shapes) are given up front so the header can be written first; each tensor's bytes are
// then appended in that order and padded to the alignment, so only one tensor needs to be in
// memory at a time. The file is written as `.<name>.qforge-tmp-<pid>` beside its final path and
// renamed into place by finish(), so an interrupted run never leaves a file that looks complete
// (the convention of io/staged_directory.h).
#pragma once

#include "formats/ggml_types.h"
#include "io/gguf_file.h"

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace qf {

// Metadata in insertion order, one value per key (setting a key again replaces its value).
class GgufMetadata {
 public:
  void set_u8(std::string_view key, uint8_t v) { set_scalar(key, GgufType::U8, v); }
  void set_i8(std::string_view key, int8_t v) { set_scalar(key, GgufType::I8, uint8_t(v)); }
  void set_u16(std::string_view key, uint16_t v) { set_scalar(key, GgufType::U16, v); }
  void set_i16(std::string_view key, int16_t v) { set_scalar(key, GgufType::I16, uint16_t(v)); }
  void set_u32(std::string_view key, uint32_t v) { set_scalar(key, GgufType::U32, v); }
  void set_i32(std::string_view key, int32_t v) { set_scalar(key, GgufType::I32, uint32_t(v)); }
  void set_u64(std::string_view key, uint64_t v) { set_scalar(key, GgufType::U64, v); }
  void set_i64(std::string_view key, int64_t v) { set_scalar(key, GgufType::I64, uint64_t(v)); }
  void set_f32(std::string_view key, float v);
  void set_f64(std::string_view key, double v);
  void set_bool(std::string_view key, bool v) { set_scalar(key, GgufType::BOOL, v ? 1 : 0); }
  void set_string(std::string_view key, std::string_view v);
  void set_string_array(std::string_view key, const std::vector<std::string>& v);
  void set_f32_array(std::string_view key, std::span<const float> v);
  void set_i32_array(std::string_view key, std::span<const int32_t> v);
  void set_u32_array(std::string_view key, std::span<const uint32_t> v);
  // Any numeric or bool array: `count` elements of `elem`, packed little-endian in `bytes`.
  void set_array(std::string_view key, GgufType elem, uint64_t count,
                 std::span<const std::byte> bytes);

  // The serialized key/value pairs (what follows the header counts in the file).
  const std::string& bytes() const { return bytes_; }
  uint64_t size() const { return uint64_t(offsets_.size()); }
  // The alignment set by "general.alignment" (validated: a uint32 power of two), or 32.
  uint32_t alignment() const { return alignment_; }

 private:
  void set_scalar(std::string_view key, GgufType type, uint64_t bits);
  // Appends (or replaces) the pair whose value bytes (type included) are `value`.
  void put(std::string_view key, const std::string& value);

  std::string bytes_;
  std::vector<std::pair<std::string, size_t>> offsets_;  // key -> start of its pair in bytes_
  uint32_t alignment_ = kGgufDefaultAlignment;
};

struct GgufTensorSpec {
  std::string name;
  GgmlType type = GgmlType::F32;
  std::vector<int64_t> ne;  // ggml order: ne[0] is the row length
};

// Bytes of a tensor of `spec`, or a qf::Error naming `label` and the tensor when the name is
// longer than 63 bytes, there are 0 or more than 4 dimensions, a dimension is not positive,
// ne[0] is not a multiple of the type's block size or the size overflows.
uint64_t gguf_tensor_bytes(const GgufTensorSpec& spec, const std::string& label);

class GgufWriter {
 public:
  // Validates the specs (unique names, gguf_tensor_bytes) and writes the header to the
  // temporary file. Throws qf::Error naming `path` on invalid specs or I/O errors.
  GgufWriter(const std::filesystem::path& path, const GgufMetadata& metadata,
             std::vector<GgufTensorSpec> tensors);
  ~GgufWriter();  // removes the temporary file unless finish() succeeded
  GgufWriter(const GgufWriter&) = delete;
  GgufWriter& operator=(const GgufWriter&) = delete;

  // Appends the next tensor in spec order and its padding; `name` and the byte count must match
  // (qf::Error otherwise). I/O errors throw "<path>: write failed: <reason>".
  void write(std::string_view name, std::span<const std::byte> data);
  // Checks that every tensor was written, flushes, fsyncs and renames the file into place.
  void finish();

  const std::filesystem::path& temporary_path() const { return tmp_; }

 private:
  void write_bytes(const void* data, size_t n);

  std::filesystem::path path_;
  std::filesystem::path tmp_;
  std::vector<GgufTensorSpec> specs_;
  std::vector<uint64_t> nbytes_;
  uint32_t alignment_;
  size_t next_ = 0;
  std::FILE* file_ = nullptr;
  bool failed_ = false;
  bool finished_ = false;
};

}  // namespace qf

// Reading GGUF files (ggml's container, v2 and v3, little-endian): "GGUF", a version, tensor and
// key/value counts, the key/value metadata, the tensor infos, padding to `general.alignment`,
// then the tensor data. Everything is validated before anything is handed out, with ggml's own
// rules (shared/specs/engine-formats.md §3.1) and more: counts and lengths are checked against
// the bytes left before anything is allocated, arithmetic is overflow-checked, keys and tensor
// names are unique, and each tensor's offset must be exactly where ggml's writer puts it (the
// running sum of the aligned sizes before it), so tensors can neither overlap nor leave gaps.
// Errors are one line starting with the file name (qf::Error).
#pragma once

#include "core/mapped_file.h"
#include "formats/ggml_types.h"

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace qf {

// GGUF metadata value types (the numbers stored in the file).
enum class GgufType : uint32_t {
  U8 = 0, I8 = 1, U16 = 2, I16 = 3, U32 = 4, I32 = 5, F32 = 6, BOOL = 7, STRING = 8, ARRAY = 9,
  U64 = 10, I64 = 11, F64 = 12,
};
// "uint32", "string", "array" ...
std::string_view gguf_type_name(GgufType type);
// Bytes of one scalar of a numeric or bool type; 0 for STRING and ARRAY.
size_t gguf_scalar_size(GgufType type);

inline constexpr uint32_t kGgufDefaultAlignment = 32;
// ggml's GGML_MAX_NAME: a tensor name has at most 63 bytes.
inline constexpr size_t kGgufMaxTensorName = 63;
inline constexpr uint32_t kGgufMaxDims = 4;

// One metadata value. Strings and array elements point into the file's bytes (valid while the
// GgufFile, or the span given to parse_gguf, lives).
struct GgufValue {
  GgufType type = GgufType::U8;
  uint64_t bits = 0;      // numeric and bool scalars: the little-endian bytes, zero-extended
  std::string_view str;   // STRING
  // ARRAY: element type (never ARRAY), count, and for numeric/bool elements their packed
  // little-endian bytes; for STRING elements, the strings.
  GgufType elem = GgufType::U8;
  uint64_t count = 0;
  const std::byte* elems = nullptr;
  std::vector<std::string_view> strings;

  // The scalar as the type's C++ value (the caller has checked `type`).
  uint64_t as_u64() const { return bits; }
  int64_t as_i64() const;  // sign-extended from the type's width
  double as_f64() const;   // F32 or F64
  // Element i of a numeric array, widened (the caller has checked `elem` and i < count).
  uint64_t elem_bits(uint64_t i) const;
};

struct GgufKv {
  std::string_view key;
  GgufValue value;
};

struct GgufTensorInfo {
  std::string_view name;
  GgmlType type = GgmlType::F32;
  std::vector<int64_t> ne;  // ggml order: ne[0] is the row length (fastest varying)
  uint64_t offset = 0;      // relative to the start of the data section
  uint64_t nbytes = 0;      // unpadded

  // The shape in row-major order (reversed ne), as safetensors and HF write it.
  std::vector<int64_t> shape() const { return {ne.rbegin(), ne.rend()}; }
  int64_t numel() const;
};

struct GgufHeader {
  uint32_t version = 3;
  uint32_t alignment = kGgufDefaultAlignment;
  std::vector<GgufKv> kvs;              // file order
  std::vector<GgufTensorInfo> tensors;  // file order (which is data order)
  uint64_t data_offset = 0;             // start of the data section in the file
};

// Parses and validates a whole file's bytes. `label` (the path) starts every error message.
// Throws qf::Error on anything invalid; safe on arbitrary input (fuzzed).
GgufHeader parse_gguf(std::span<const std::byte> bytes, const std::string& label);

// A tensor's bytes with its type and shape.
struct GgufTensorView {
  const GgufTensorInfo* info = nullptr;
  std::span<const std::byte> data;
};

// A float32 metadata value as the double its shortest decimal names: GGUF stores
// rms_norm_eps = 1e-05 as float32, whose exact value 9.99999974738e-06 is not the model's.
double gguf_decimal(float v);

// Whether `path` is a regular file that starts with GGUF's magic (false for directories and for
// short or unreadable files): how commands that take a model directory recognise a .gguf file.
bool is_gguf_file(const std::filesystem::path& path);

class GgufFile {
 public:
  // Maps and validates the file. Throws qf::Error naming the file and the problem.
  static GgufFile open(const std::filesystem::path& path);

  const std::filesystem::path& path() const { return file_->path(); }
  uint32_t version() const { return header_.version; }
  uint32_t alignment() const { return header_.alignment; }
  uint64_t data_offset() const { return header_.data_offset; }
  uint64_t file_size() const { return file_->size(); }
  // The mapping the views point into (shared, so views can outlive this object).
  const std::shared_ptr<const MappedFile>& mapping() const { return file_; }
  const std::vector<GgufKv>& metadata() const { return header_.kvs; }
  const std::vector<GgufTensorInfo>& tensors() const { return header_.tensors; }

  // nullptr if absent.
  const GgufValue* find(std::string_view key) const;
  const GgufTensorInfo* find_tensor(std::string_view name) const;
  // Typed metadata: throws "<file>: metadata 'key' is missing" or "<file>: metadata 'key' is
  // int32, expected uint32" (no conversion between types, as llama.cpp's loader).
  std::string_view get_string(std::string_view key) const;
  uint32_t get_u32(std::string_view key) const;
  uint64_t get_u64(std::string_view key) const;
  int32_t get_i32(std::string_view key) const;
  float get_f32(std::string_view key) const;
  bool get_bool(std::string_view key) const;
  // An array whose elements have type `elem`; the same errors, and "is an array of int32,
  // expected an array of float32".
  const GgufValue& get_array(std::string_view key, GgufType elem) const;
  std::vector<std::string_view> get_string_array(std::string_view key) const;
  std::vector<float> get_f32_array(std::string_view key) const;
  std::vector<int32_t> get_i32_array(std::string_view key) const;

  GgufTensorView view(const GgufTensorInfo& tensor) const;

 private:
  const GgufValue& get(std::string_view key, GgufType type) const;

  std::shared_ptr<const MappedFile> file_;
  GgufHeader header_;
};

}  // namespace qf

// Writing one safetensors file, streaming: the full list of tensors (names, dtypes, shapes) is
// given up front so the header can be written first; the data of each tensor is then appended
// in that order, so only one tensor needs to be in memory at a time. Every write is checked
// (disk full gives a qf::Error naming the file); finish() flushes to disk.
#pragma once

#include "core/tensor.h"

#include <cstdio>
#include <filesystem>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <vector>

namespace qf {

struct TensorSpec {
  std::string name;
  DType dtype = DType::F32;
  Shape shape;
  uint64_t nbytes() const { return uint64_t(shape_numel(shape)) * dtype_size(dtype); }
};

// Total file size a writer with these specs produces (header included).
uint64_t safetensors_file_size(const std::vector<TensorSpec>& specs,
                               const std::map<std::string, std::string>& metadata);

class SafetensorsWriter {
 public:
  // Creates (truncates) `path` and writes the header. Names must be unique, shapes valid.
  // Throws qf::Error naming `path` on invalid specs or I/O errors.
  SafetensorsWriter(const std::filesystem::path& path, std::vector<TensorSpec> specs,
                    const std::map<std::string, std::string>& metadata = {{"format", "pt"}});
  ~SafetensorsWriter();  // closes without finishing if finish() was not called
  SafetensorsWriter(const SafetensorsWriter&) = delete;
  SafetensorsWriter& operator=(const SafetensorsWriter&) = delete;

  // Appends the data of the next tensor in spec order; `name` and the byte count must match it
  // (qf::Error otherwise). I/O errors throw "<path>: write failed: <reason>".
  void write(std::string_view name, std::span<const std::byte> data);
  // The same, writing in chunks and calling `written(offset, length)` after each chunk of
  // `data` reaches the file, so a caller streaming from a mapped input can drop those pages.
  void write(std::string_view name, std::span<const std::byte> data,
             const std::function<void(size_t offset, size_t length)>& written);
  // Checks that every tensor was written, flushes and fsyncs, closes; any failure throws.
  void finish();

 private:
  std::filesystem::path path_;
  std::vector<TensorSpec> specs_;
  size_t next_ = 0;
  std::FILE* file_ = nullptr;
  bool failed_ = false;  // a write failed: the file is incomplete, further writes are refused

  void write_bytes(const void* data, size_t n);  // checked fwrite; throws "write failed"
  // Throws unless the next tensor in spec order is `name` with `size` bytes.
  void check_next(std::string_view name, uint64_t size) const;
};

}  // namespace qf

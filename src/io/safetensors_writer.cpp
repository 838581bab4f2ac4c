// Streaming safetensors writer: header first, then each tensor's bytes in spec order.
#include "io/safetensors_writer.h"

#include "core/error.h"
#include "io/io_util.h"
#include "io/safetensors.h"

#include <nlohmann/json.hpp>

#include <cerrno>
#include <cstring>
#include <set>
#include <utility>

namespace qf {
namespace {

// The padded header text (without the 8-byte length) and the data size, for `specs`.
// `label` prefixes errors about invalid specs.
struct HeaderText {
  std::string text;
  uint64_t data_size = 0;
};

HeaderText make_header(const std::vector<TensorSpec>& specs,
                       const std::map<std::string, std::string>& metadata,
                       const std::string& label) {
  // ordered_json keeps insertion order: __metadata__ first, then the tensors in spec order, as
  // readers that stream the header expect and so the output bytes are deterministic.
  nlohmann::ordered_json root = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    auto& m = root["__metadata__"] = nlohmann::ordered_json::object();
    for (const auto& [k, v] : metadata) m[k] = v;
  }
  std::set<std::string_view> names;
  uint64_t offset = 0;
  for (const auto& s : specs) {
    if (s.name == "__metadata__") fail("{}: '__metadata__' cannot be a tensor name", label);
    if (!names.insert(s.name).second)
      fail("{}: duplicate tensor name {}", label, quote_name(s.name));
    const auto nbytes = checked_nbytes(s.shape, s.dtype);
    if (!nbytes)
      fail("{}: tensor {}: invalid shape {} (a negative dimension, or too many elements)", label,
           quote_name(s.name), shape_str(s.shape));
    if (__builtin_add_overflow(offset, *nbytes, &offset))
      fail("{}: total tensor size overflows", label);
    nlohmann::ordered_json e = nlohmann::ordered_json::object();
    e["dtype"] = dtype_name(s.dtype);
    e["shape"] = s.shape;
    e["data_offsets"] = {offset - *nbytes, offset};
    root[s.name] = std::move(e);
  }
  HeaderText h;
  h.data_size = offset;
  try {
    h.text = root.dump();
  } catch (const nlohmann::json::exception&) {
    // dump() refuses invalid UTF-8, which can only come from a name or metadata string.
    fail("{}: a tensor name or metadata string is not valid UTF-8", label);
  }
  // The reference writer pads with spaces so the data section starts 8-byte aligned.
  h.text.append((8 - h.text.size() % 8) % 8, ' ');
  if (h.text.size() > kMaxSafetensorsHeader)
    fail("{}: header of {} bytes exceeds the limit of {} bytes", label, h.text.size(),
         kMaxSafetensorsHeader);
  return h;
}

}  // namespace

uint64_t safetensors_file_size(const std::vector<TensorSpec>& specs,
                               const std::map<std::string, std::string>& metadata) {
  const HeaderText h = make_header(specs, metadata, "safetensors header");
  return 8 + h.text.size() + h.data_size;
}

SafetensorsWriter::SafetensorsWriter(const std::filesystem::path& path,
                                     std::vector<TensorSpec> specs,
                                     const std::map<std::string, std::string>& metadata)
    : path_(path), specs_(std::move(specs)) {
  const HeaderText h = make_header(specs_, metadata, path_.string());
  file_ = std::fopen(path_.c_str(), "wb");
  if (!file_) fail("{}: cannot create: {}", path_.string(), std::strerror(errno));
  unsigned char len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(h.text.size() >> (8 * i));
  try {
    write_bytes(len, sizeof len);
    write_bytes(h.text.data(), h.text.size());
  } catch (...) {
    std::fclose(file_);
    file_ = nullptr;
    throw;
  }
}

SafetensorsWriter::~SafetensorsWriter() {
  if (file_) std::fclose(file_);
}

void SafetensorsWriter::write_bytes(const void* data, size_t n) {
  try {
    fwrite_all(file_, data, n, path_);
  } catch (...) {
    failed_ = true;
    throw;
  }
}

void SafetensorsWriter::check_next(std::string_view name, uint64_t size) const {
  if (!file_) fail("{}: write of {} after the writer was closed", path_.string(), quote_name(name));
  if (failed_) fail("{}: write of {} after an earlier write failed", path_.string(),
                    quote_name(name));
  if (next_ >= specs_.size())
    fail("{}: tensor {} written after all {} tensors", path_.string(), quote_name(name),
         specs_.size());
  const TensorSpec& s = specs_[next_];
  if (name != s.name)
    fail("{}: tensor {} written out of order: expected {} next", path_.string(), quote_name(name),
         quote_name(s.name));
  const uint64_t want = s.nbytes();  // validated in the constructor, cannot overflow
  if (size != want)
    fail("{}: tensor {} ({} {}) needs {} bytes but {} were given", path_.string(),
         quote_name(name), dtype_name(s.dtype), shape_str(s.shape), want, size);
}

void SafetensorsWriter::write(std::string_view name, std::span<const std::byte> data) {
  check_next(name, data.size());
  write_bytes(data.data(), data.size());
  ++next_;
}

void SafetensorsWriter::write(std::string_view name, std::span<const std::byte> data,
                              const std::function<void(size_t, size_t)>& written) {
  // Validate the tensor with an empty first call on a matching size, then stream the bytes.
  constexpr size_t kChunk = size_t(64) << 20;
  if (data.size() <= kChunk) {
    write(name, data);
    if (written) written(0, data.size());
    return;
  }
  check_next(name, data.size());
  for (size_t offset = 0; offset < data.size(); offset += kChunk) {
    const size_t n = std::min(kChunk, data.size() - offset);
    write_bytes(data.data() + offset, n);
    if (written) written(offset, n);
  }
  ++next_;
}

void SafetensorsWriter::finish() {
  if (!file_) fail("{}: finish() called twice", path_.string());
  if (failed_) fail("{}: finish() after an earlier write failed", path_.string());
  if (next_ != specs_.size())
    fail("{}: finish() after {} of {} tensors: {} was never written", path_.string(), next_,
         specs_.size(), quote_name(specs_[next_].name));
  close_synced(std::exchange(file_, nullptr), path_);
}

}  // namespace qf

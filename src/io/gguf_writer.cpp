// Streaming GGUF v3 writer: header, metadata and tensor infos first, then each tensor's bytes in
// info order, each padded with zeros to the alignment (the layout ggml's reader insists on).
#include "io/gguf_writer.h"

#include "core/error.h"
#include "io/io_util.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <limits>
#include <unordered_set>
#include <utility>

namespace qf {
namespace {

void put_uint(std::string& out, uint64_t v, size_t width) {
  for (size_t i = 0; i < width; ++i) out += char(uint8_t(v >> (8 * i)));
}
void put_string(std::string& out, std::string_view s) {
  put_uint(out, s.size(), 8);
  out += s;
}

}  // namespace

void GgufMetadata::put(std::string_view key, const std::string& value) {
  if (key.empty()) fail("GGUF metadata: a key is empty");
  std::string pair;
  put_string(pair, key);
  pair += value;
  for (size_t i = 0; i < offsets_.size(); ++i) {
    if (offsets_[i].first != key) continue;
    // Replace in place: rebuild the bytes, since the old value's length may differ.
    const size_t start = offsets_[i].second;
    const size_t end = i + 1 < offsets_.size() ? offsets_[i + 1].second : bytes_.size();
    const ptrdiff_t delta = ptrdiff_t(pair.size()) - ptrdiff_t(end - start);
    bytes_.replace(start, end - start, pair);
    for (size_t j = i + 1; j < offsets_.size(); ++j)
      offsets_[j].second = size_t(ptrdiff_t(offsets_[j].second) + delta);
    return;
  }
  offsets_.emplace_back(std::string(key), bytes_.size());
  bytes_ += pair;
}

void GgufMetadata::set_scalar(std::string_view key, GgufType type, uint64_t bits) {
  if (key == "general.alignment") {
    if (type != GgufType::U32)
      fail("GGUF metadata: general.alignment must be uint32, not {}", gguf_type_name(type));
    if (bits == 0 || (bits & (bits - 1)) != 0)
      fail("GGUF metadata: general.alignment {} is not a power of two", bits);
    alignment_ = uint32_t(bits);
  }
  std::string v;
  put_uint(v, uint32_t(type), 4);
  put_uint(v, bits, gguf_scalar_size(type));
  put(key, v);
}

void GgufMetadata::set_f32(std::string_view key, float v) {
  set_scalar(key, GgufType::F32, std::bit_cast<uint32_t>(v));
}
void GgufMetadata::set_f64(std::string_view key, double v) {
  set_scalar(key, GgufType::F64, std::bit_cast<uint64_t>(v));
}

void GgufMetadata::set_string(std::string_view key, std::string_view s) {
  if (key == "general.alignment") fail("GGUF metadata: general.alignment must be uint32");
  std::string v;
  put_uint(v, uint32_t(GgufType::STRING), 4);
  put_string(v, s);
  put(key, v);
}

void GgufMetadata::set_string_array(std::string_view key, const std::vector<std::string>& a) {
  if (key == "general.alignment") fail("GGUF metadata: general.alignment must be uint32");
  std::string v;
  put_uint(v, uint32_t(GgufType::ARRAY), 4);
  put_uint(v, uint32_t(GgufType::STRING), 4);
  put_uint(v, a.size(), 8);
  for (const std::string& s : a) put_string(v, s);
  put(key, v);
}

void GgufMetadata::set_array(std::string_view key, GgufType elem, uint64_t count,
                             std::span<const std::byte> bytes) {
  const size_t size = gguf_scalar_size(elem);
  if (size == 0)
    fail("GGUF metadata: key {}: set_array takes numeric or bool elements, not {}",
         quote_name(key), gguf_type_name(elem));
  if (count > bytes.size() / size || count * size != bytes.size())
    fail("GGUF metadata: key {}: {} {} elements need {} bytes, {} given", quote_name(key), count,
         gguf_type_name(elem), count * size, bytes.size());
  if (key == "general.alignment") fail("GGUF metadata: general.alignment must be uint32");
  std::string v;
  put_uint(v, uint32_t(GgufType::ARRAY), 4);
  put_uint(v, uint32_t(elem), 4);
  put_uint(v, count, 8);
  // Stored little-endian; on a little-endian host the bytes are the elements as given.
  static_assert(std::endian::native == std::endian::little);
  v.append(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  put(key, v);
}

void GgufMetadata::set_f32_array(std::string_view key, std::span<const float> v) {
  set_array(key, GgufType::F32, v.size(), std::as_bytes(v));
}
void GgufMetadata::set_i32_array(std::string_view key, std::span<const int32_t> v) {
  set_array(key, GgufType::I32, v.size(), std::as_bytes(v));
}
void GgufMetadata::set_u32_array(std::string_view key, std::span<const uint32_t> v) {
  set_array(key, GgufType::U32, v.size(), std::as_bytes(v));
}

uint64_t gguf_tensor_bytes(const GgufTensorSpec& s, const std::string& label) {
  const std::string qn = quote_name(s.name);
  if (s.name.size() > kGgufMaxTensorName)
    fail("{}: tensor {}: name is {} bytes, longer than ggml's limit of {}", label, qn,
         s.name.size(), kGgufMaxTensorName);
  if (s.ne.empty() || s.ne.size() > kGgufMaxDims)
    fail("{}: tensor {}: {} dimensions, expected 1 to {}", label, qn, s.ne.size(), kGgufMaxDims);
  const GgmlTypeInfo& t = ggml_type_info(s.type);
  uint64_t rows = 1;
  for (size_t d = 0; d < s.ne.size(); ++d) {
    if (s.ne[d] <= 0) fail("{}: tensor {}: dimension {} is {}, must be positive", label, qn, d,
                           s.ne[d]);
    if (d > 0 && __builtin_mul_overflow(rows, uint64_t(s.ne[d]), &rows))
      fail("{}: tensor {}: size overflows", label, qn);
  }
  const auto row = ggml_row_bytes(s.type, s.ne[0]);
  if (!row)
    fail("{}: tensor {}: row length {} is not a multiple of the {} block size {}", label, qn,
         s.ne[0], t.name, t.block_size);
  uint64_t n = 0;
  if (__builtin_mul_overflow(rows, *row, &n) ||
      n > uint64_t(std::numeric_limits<int64_t>::max()) / 2)
    fail("{}: tensor {}: size overflows", label, qn);
  return n;
}

GgufWriter::GgufWriter(const std::filesystem::path& path, const GgufMetadata& metadata,
                       std::vector<GgufTensorSpec> tensors)
    : path_(path), specs_(std::move(tensors)), alignment_(metadata.alignment()) {
  const std::string label = path_.string();
  std::string header = "GGUF";
  put_uint(header, 3, 4);
  put_uint(header, specs_.size(), 8);
  put_uint(header, metadata.size(), 8);
  header += metadata.bytes();
  std::unordered_set<std::string_view> names;
  uint64_t offset = 0;
  for (const GgufTensorSpec& s : specs_) {
    if (!names.insert(s.name).second)
      fail("{}: duplicate tensor name {}", label, quote_name(s.name));
    const uint64_t n = gguf_tensor_bytes(s, label);
    nbytes_.push_back(n);
    put_string(header, s.name);
    put_uint(header, s.ne.size(), 4);
    for (const int64_t d : s.ne) put_uint(header, uint64_t(d), 8);
    put_uint(header, uint32_t(s.type), 4);
    put_uint(header, offset, 8);
    const uint64_t padded = (n + alignment_ - 1) / alignment_ * alignment_;
    if (__builtin_add_overflow(offset, padded, &offset))
      fail("{}: total tensor size overflows", label);
  }
  header.append((alignment_ - header.size() % alignment_) % alignment_, '\0');

  const std::filesystem::path parent = path_.has_parent_path() ? path_.parent_path() : ".";
  tmp_ = parent / fmt::format(".{}.qforge-tmp-{}", path_.filename().string(), ::getpid());
  file_ = std::fopen(tmp_.c_str(), "wb");
  if (!file_) fail("{}: cannot create: {}", tmp_.string(), std::strerror(errno));
  write_bytes(header.data(), header.size());
}

GgufWriter::~GgufWriter() {
  if (file_) std::fclose(file_);
  if (!finished_) {
    std::error_code ec;
    std::filesystem::remove(tmp_, ec);
  }
}

void GgufWriter::write_bytes(const void* data, size_t n) {
  try {
    fwrite_all(file_, data, n, path_);
  } catch (...) {
    failed_ = true;
    throw;
  }
}

void GgufWriter::write(std::string_view name, std::span<const std::byte> data) {
  if (!file_) fail("{}: write of {} after the writer was closed", path_.string(),
                   quote_name(name));
  if (failed_) fail("{}: write of {} after an earlier write failed", path_.string(),
                    quote_name(name));
  if (next_ >= specs_.size())
    fail("{}: tensor {} written after all {} tensors", path_.string(), quote_name(name),
         specs_.size());
  const GgufTensorSpec& s = specs_[next_];
  if (name != s.name)
    fail("{}: tensor {} written out of order: expected {} next", path_.string(),
         quote_name(name), quote_name(s.name));
  if (data.size() != nbytes_[next_])
    fail("{}: tensor {} ({}) needs {} bytes but {} were given", path_.string(), quote_name(name),
         ggml_type_info(s.type).name, nbytes_[next_], data.size());
  write_bytes(data.data(), data.size());
  static const char zeros[256] = {};
  for (uint64_t pad = (alignment_ - data.size() % alignment_) % alignment_; pad > 0;) {
    const size_t k = size_t(std::min<uint64_t>(pad, sizeof zeros));
    write_bytes(zeros, k);
    pad -= k;
  }
  ++next_;
}

void GgufWriter::finish() {
  if (!file_) fail("{}: finish() called twice", path_.string());
  if (failed_) fail("{}: finish() after an earlier write failed", path_.string());
  if (next_ != specs_.size())
    fail("{}: finish() after {} of {} tensors: {} was never written", path_.string(), next_,
         specs_.size(), quote_name(specs_[next_].name));
  close_synced(std::exchange(file_, nullptr), path_);
  std::error_code ec;
  std::filesystem::rename(tmp_, path_, ec);
  if (ec) fail("{}: cannot rename into place: {}", path_.string(), ec.message());
  finished_ = true;
}

}  // namespace qf

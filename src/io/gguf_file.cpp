// Reading and validating GGUF files (see gguf_file.h for the rules enforced).
#include "io/gguf_file.h"

#include "core/error.h"
#include "io/io_util.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <fstream>
#include <limits>
#include <unordered_set>

namespace qf {
namespace {

// The least bytes one key/value pair and one tensor info can take: they bound the counts in the
// header before anything is allocated for them.
constexpr uint64_t kMinKvBytes = 8 + 1 + 4 + 1;     // key length, 1-byte key, type, u8 value
constexpr uint64_t kMinTensorBytes = 8 + 4 + 4 + 8;  // name length, n_dims, type, offset

uint64_t pad_to(uint64_t n, uint64_t align) { return (n + align - 1) / align * align; }

// Reads little-endian fields from the file's bytes; every read is bounds-checked and a short
// read names what was being read.
class Cursor {
 public:
  Cursor(std::span<const std::byte> bytes, const std::string& label)
      : bytes_(bytes), label_(label) {}

  uint64_t pos() const { return pos_; }
  uint64_t remaining() const { return bytes_.size() - pos_; }
  const std::byte* here() const { return bytes_.data() + pos_; }

  const std::byte* take(uint64_t n, std::string_view what) {
    if (n > remaining())
      fail("{}: truncated: {} needs {} bytes at offset {} but the file has {} bytes", label_,
           what, n, pos_, bytes_.size());
    const std::byte* p = here();
    pos_ += n;
    return p;
  }
  uint64_t uint(size_t width, std::string_view what) {
    const std::byte* p = take(width, what);
    uint64_t v = 0;
    for (size_t i = width; i-- > 0;) v = (v << 8) | uint64_t(p[i]);
    return v;
  }
  uint32_t u32(std::string_view what) { return uint32_t(uint(4, what)); }
  uint64_t u64(std::string_view what) { return uint(8, what); }
  std::string_view string(std::string_view what) {
    const uint64_t n = u64(what);
    // Checked against the bytes left before it is used: a length of 2^63 is refused here.
    if (n > remaining())
      fail("{}: truncated: {} is {} bytes at offset {} but only {} bytes remain", label_, what, n,
           pos_, remaining());
    return {reinterpret_cast<const char*>(take(n, what)), size_t(n)};
  }

 private:
  std::span<const std::byte> bytes_;
  const std::string& label_;
  uint64_t pos_ = 0;
};

bool known_value_type(uint32_t t) { return t <= uint32_t(GgufType::F64); }

GgufValue read_value(Cursor& c, GgufType type, std::string_view key, const std::string& label) {
  GgufValue v;
  v.type = type;
  const std::string what = fmt::format("the value of key {}", quote_name(key));
  if (type == GgufType::STRING) {
    v.str = c.string(what);
    return v;
  }
  if (type != GgufType::ARRAY) {
    v.bits = c.uint(gguf_scalar_size(type), what);
    if (type == GgufType::BOOL && v.bits > 1)
      fail("{}: key {}: bool value is {}, expected 0 or 1", label, quote_name(key), v.bits);
    return v;
  }
  const uint32_t elem = c.u32(what);
  if (elem == uint32_t(GgufType::ARRAY))
    fail("{}: key {}: nested arrays are not allowed", label, quote_name(key));
  if (!known_value_type(elem))
    fail("{}: key {}: unknown array element type {}", label, quote_name(key), elem);
  v.elem = GgufType(elem);
  v.count = c.u64(what);
  if (v.elem == GgufType::STRING) {
    // Each string takes at least its 8-byte length: bound the count before reserving.
    if (v.count > c.remaining() / 8)
      fail("{}: key {}: array of {} strings cannot fit in the {} bytes left", label,
           quote_name(key), v.count, c.remaining());
    v.strings.reserve(size_t(v.count));
    for (uint64_t i = 0; i < v.count; ++i) v.strings.push_back(c.string(what));
    return v;
  }
  const size_t size = gguf_scalar_size(v.elem);
  if (v.count > c.remaining() / size)
    fail("{}: key {}: array of {} {} values cannot fit in the {} bytes left", label,
         quote_name(key), v.count, gguf_type_name(v.elem), c.remaining());
  v.elems = c.take(v.count * size, what);
  if (v.elem == GgufType::BOOL)
    for (uint64_t i = 0; i < v.count; ++i)
      if (uint8_t(v.elems[i]) > 1)
        fail("{}: key {}: bool element {} is {}, expected 0 or 1", label, quote_name(key), i,
             uint8_t(v.elems[i]));
  return v;
}

GgufTensorInfo read_tensor_info(Cursor& c, uint64_t index, const std::string& label) {
  GgufTensorInfo t;
  t.name = c.string(fmt::format("the name of tensor {}", index));
  const std::string qn = quote_name(t.name);
  if (t.name.size() > kGgufMaxTensorName)
    fail("{}: tensor {}: name is {} bytes, longer than ggml's limit of {}", label, qn,
         t.name.size(), kGgufMaxTensorName);
  const std::string what = fmt::format("the info of tensor {}", qn);
  const uint32_t n_dims = c.u32(what);
  if (n_dims > kGgufMaxDims)
    fail("{}: tensor {}: {} dimensions, more than ggml's {}", label, qn, n_dims, kGgufMaxDims);
  uint64_t numel = 1;
  for (uint32_t d = 0; d < n_dims; ++d) {
    const int64_t ne = int64_t(c.u64(what));
    if (ne <= 0) fail("{}: tensor {}: dimension {} is {}, must be positive", label, qn, d, ne);
    if (__builtin_mul_overflow(numel, uint64_t(ne), &numel) ||
        numel > uint64_t(std::numeric_limits<int64_t>::max()))
      fail("{}: tensor {}: element count overflows int64", label, qn);
    t.ne.push_back(ne);
  }
  if (t.ne.empty()) t.ne.push_back(1);  // ggml treats a 0-dimensional tensor as one element
  const uint32_t type = c.u32(what);
  const GgmlTypeInfo* info = ggml_type_info(type);
  if (!info) fail("{}: tensor {}: unknown ggml type {}", label, qn, type);
  t.type = info->type;
  if (t.ne[0] % info->block_size != 0)
    fail("{}: tensor {}: row length {} is not a multiple of the {} block size {}", label, qn,
         t.ne[0], info->name, info->block_size);
  // bytes = rows * row bytes; both products are checked (a row of 2^62 f32 values wraps).
  uint64_t rows = uint64_t(numel) / uint64_t(t.ne[0]);
  uint64_t row_bytes = 0;
  if (__builtin_mul_overflow(uint64_t(t.ne[0] / info->block_size), uint64_t(info->block_bytes),
                             &row_bytes) ||
      __builtin_mul_overflow(rows, row_bytes, &t.nbytes) ||
      t.nbytes > uint64_t(std::numeric_limits<int64_t>::max()))
    fail("{}: tensor {}: byte size overflows int64", label, qn);
  t.offset = c.u64(what);
  return t;
}

}  // namespace

std::string_view gguf_type_name(GgufType type) {
  switch (type) {
    case GgufType::U8: return "uint8";
    case GgufType::I8: return "int8";
    case GgufType::U16: return "uint16";
    case GgufType::I16: return "int16";
    case GgufType::U32: return "uint32";
    case GgufType::I32: return "int32";
    case GgufType::F32: return "float32";
    case GgufType::BOOL: return "bool";
    case GgufType::STRING: return "string";
    case GgufType::ARRAY: return "array";
    case GgufType::U64: return "uint64";
    case GgufType::I64: return "int64";
    case GgufType::F64: return "float64";
  }
  return "unknown";
}

size_t gguf_scalar_size(GgufType type) {
  switch (type) {
    case GgufType::U8: case GgufType::I8: case GgufType::BOOL: return 1;
    case GgufType::U16: case GgufType::I16: return 2;
    case GgufType::U32: case GgufType::I32: case GgufType::F32: return 4;
    case GgufType::U64: case GgufType::I64: case GgufType::F64: return 8;
    case GgufType::STRING: case GgufType::ARRAY: return 0;
  }
  return 0;
}

int64_t GgufValue::as_i64() const {
  const unsigned width = unsigned(gguf_scalar_size(type)) * 8;
  if (width == 0 || width == 64) return int64_t(bits);
  const uint64_t sign = uint64_t(1) << (width - 1);
  return int64_t((bits ^ sign) - sign);
}

double GgufValue::as_f64() const {
  if (type == GgufType::F32) return double(std::bit_cast<float>(uint32_t(bits)));
  return std::bit_cast<double>(bits);
}

uint64_t GgufValue::elem_bits(uint64_t i) const {
  const size_t size = gguf_scalar_size(elem);
  uint64_t v = 0;
  for (size_t b = size; b-- > 0;) v = (v << 8) | uint64_t(elems[i * size + b]);
  return v;
}

int64_t GgufTensorInfo::numel() const {
  int64_t n = 1;
  for (const int64_t d : ne) n *= d;
  return n;
}

GgufHeader parse_gguf(std::span<const std::byte> bytes, const std::string& label) {
  Cursor c(bytes, label);
  GgufHeader h;
  const std::byte* magic = c.take(4, "the magic");
  if (std::memcmp(magic, "GGUF", 4) != 0) {
    std::string shown;
    for (int i = 0; i < 4; ++i) shown += fmt::format("{:02x}", uint8_t(magic[i]));
    fail("{}: not a GGUF file: magic is 0x{}, expected 'GGUF'", label, shown);
  }
  h.version = c.u32("the version");
  if ((h.version & 0xFFFF) == 0)
    fail("{}: version 0x{:08x} looks byte-swapped: big-endian GGUF files are not supported",
         label, h.version);
  if (h.version == 1) fail("{}: GGUF version 1 is not supported (only 2 and 3)", label);
  if (h.version > 3) fail("{}: GGUF version {} is newer than 3, the last this reads", label,
                          h.version);
  const int64_t n_tensors = int64_t(c.u64("the tensor count"));
  const int64_t n_kv = int64_t(c.u64("the metadata count"));
  if (n_tensors < 0 || uint64_t(n_tensors) > c.remaining() / kMinTensorBytes)
    fail("{}: tensor count {} is impossible in a file of {} bytes", label, n_tensors,
         bytes.size());
  if (n_kv < 0 || uint64_t(n_kv) > c.remaining() / kMinKvBytes)
    fail("{}: metadata count {} is impossible in a file of {} bytes", label, n_kv, bytes.size());

  std::unordered_set<std::string_view> keys;
  h.kvs.reserve(size_t(n_kv));
  for (int64_t i = 0; i < n_kv; ++i) {
    GgufKv kv;
    kv.key = c.string(fmt::format("key {}", i));
    if (kv.key.empty()) fail("{}: key {} is empty", label, i);
    if (!keys.insert(kv.key).second) fail("{}: duplicate key {}", label, quote_name(kv.key));
    const uint32_t type = c.u32(fmt::format("the type of key {}", quote_name(kv.key)));
    if (!known_value_type(type))
      fail("{}: key {}: unknown value type {}", label, quote_name(kv.key), type);
    kv.value = read_value(c, GgufType(type), kv.key, label);
    if (kv.key == "general.alignment") {
      if (kv.value.type != GgufType::U32)
        fail("{}: general.alignment is {}, expected uint32", label,
             gguf_type_name(kv.value.type));
      const uint64_t a = kv.value.bits;
      if (a == 0 || (a & (a - 1)) != 0)
        fail("{}: general.alignment {} is not a power of two", label, a);
      h.alignment = uint32_t(a);
    }
    h.kvs.push_back(std::move(kv));
  }

  std::unordered_set<std::string_view> names;
  h.tensors.reserve(size_t(n_tensors));
  for (int64_t i = 0; i < n_tensors; ++i) {
    GgufTensorInfo t = read_tensor_info(c, uint64_t(i), label);
    if (!names.insert(t.name).second) fail("{}: duplicate tensor name {}", label,
                                           quote_name(t.name));
    h.tensors.push_back(std::move(t));
  }
  h.data_offset = pad_to(c.pos(), h.alignment);

  // ggml's writer packs the data in info order, each tensor padded to the alignment, and ggml's
  // reader insists on exactly those offsets.
  uint64_t expected = 0;
  const GgufTensorInfo* prev = nullptr;
  for (const GgufTensorInfo& t : h.tensors) {
    const std::string qn = quote_name(t.name);
    if (t.offset != expected) {
      if (t.offset % h.alignment != 0)
        fail("{}: tensor {}: offset {} is not a multiple of the alignment {}", label, qn,
             t.offset, h.alignment);
      if (t.offset < expected)
        fail("{}: tensor {}: offset {} overlaps tensor {} (which ends at {})", label, qn,
             t.offset, quote_name(prev->name), prev->offset + prev->nbytes);
      fail("{}: tensor {}: offset {} leaves a gap: expected {} (tensors are stored in info "
           "order, each padded to {} bytes)",
           label, qn, t.offset, expected, h.alignment);
    }
    uint64_t end = 0, padded = 0;
    if (__builtin_add_overflow(h.data_offset, t.offset, &end) ||
        __builtin_add_overflow(end, t.nbytes, &end) || end > bytes.size())
      fail("{}: truncated: tensor {} needs {} bytes at data offset {} but the file ends at {}",
           label, qn, t.nbytes, t.offset, bytes.size());
    // end <= file size, so the padded size of this tensor cannot overflow.
    padded = pad_to(t.nbytes, h.alignment);
    expected = t.offset + padded;
    prev = &t;
  }
  return h;
}

GgufFile GgufFile::open(const std::filesystem::path& path) {
  GgufFile f;
  f.file_ = std::make_shared<const MappedFile>(MappedFile::open(path));
  f.header_ = parse_gguf(std::span(f.file_->data(), f.file_->size()), path.string());
  return f;
}

const GgufValue* GgufFile::find(std::string_view key) const {
  for (const GgufKv& kv : header_.kvs)
    if (kv.key == key) return &kv.value;
  return nullptr;
}

const GgufTensorInfo* GgufFile::find_tensor(std::string_view name) const {
  for (const GgufTensorInfo& t : header_.tensors)
    if (t.name == name) return &t;
  return nullptr;
}

const GgufValue& GgufFile::get(std::string_view key, GgufType type) const {
  const GgufValue* v = find(key);
  if (!v) fail("{}: metadata {} is missing", path().string(), quote_name(key));
  if (v->type != type)
    fail("{}: metadata {} is {}, expected {}", path().string(), quote_name(key),
         gguf_type_name(v->type), gguf_type_name(type));
  return *v;
}

std::string_view GgufFile::get_string(std::string_view key) const {
  return get(key, GgufType::STRING).str;
}
uint32_t GgufFile::get_u32(std::string_view key) const {
  return uint32_t(get(key, GgufType::U32).bits);
}
uint64_t GgufFile::get_u64(std::string_view key) const { return get(key, GgufType::U64).bits; }
int32_t GgufFile::get_i32(std::string_view key) const {
  return int32_t(get(key, GgufType::I32).as_i64());
}
float GgufFile::get_f32(std::string_view key) const {
  return float(get(key, GgufType::F32).as_f64());
}
bool GgufFile::get_bool(std::string_view key) const { return get(key, GgufType::BOOL).bits != 0; }

const GgufValue& GgufFile::get_array(std::string_view key, GgufType elem) const {
  const GgufValue& v = get(key, GgufType::ARRAY);
  if (v.elem != elem)
    fail("{}: metadata {} is an array of {}, expected an array of {}", path().string(),
         quote_name(key), gguf_type_name(v.elem), gguf_type_name(elem));
  return v;
}

std::vector<std::string_view> GgufFile::get_string_array(std::string_view key) const {
  return get_array(key, GgufType::STRING).strings;
}

std::vector<float> GgufFile::get_f32_array(std::string_view key) const {
  const GgufValue& v = get_array(key, GgufType::F32);
  std::vector<float> out(size_t(v.count));
  for (uint64_t i = 0; i < v.count; ++i) out[i] = std::bit_cast<float>(uint32_t(v.elem_bits(i)));
  return out;
}

std::vector<int32_t> GgufFile::get_i32_array(std::string_view key) const {
  const GgufValue& v = get_array(key, GgufType::I32);
  std::vector<int32_t> out(size_t(v.count));
  for (uint64_t i = 0; i < v.count; ++i) out[i] = int32_t(uint32_t(v.elem_bits(i)));
  return out;
}

GgufTensorView GgufFile::view(const GgufTensorInfo& tensor) const {
  return {&tensor, std::span(file_->data() + header_.data_offset + tensor.offset,
                             size_t(tensor.nbytes))};
}

double gguf_decimal(float v) { return std::stod(fmt::format("{}", v)); }

bool is_gguf_file(const std::filesystem::path& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return false;
  std::ifstream in(path, std::ios::binary);
  char magic[4] = {};
  return in.read(magic, 4) && std::string_view(magic, 4) == "GGUF";
}

}  // namespace qf

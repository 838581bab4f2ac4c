// Reading and validating safetensors files (see safetensors.h for the rules enforced).
#include "io/safetensors.h"

#include "core/error.h"
#include "io/io_util.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <limits>
#include <set>
#include <tuple>
#include <utility>

namespace qf {
namespace {

using json = nlohmann::json;

// What a parser callback found while the DOM was built: nlohmann keeps the last of duplicate
// keys silently, so duplicates have to be caught as the keys stream past.
struct TooDeep {};
constexpr int kMaxHeaderDepth = 8;

struct DuplicateTracker {
  std::vector<std::set<std::string>> seen;  // one per open object, innermost last
  std::string top_key;                      // the current key of the outermost object
  bool found = false;
  std::string message;

  bool on_event(int depth, json::parse_event_t event, json& parsed) {
    // A header nests three levels (header, entry, shape); stop a flood of '[' before it is built.
    if (depth >= kMaxHeaderDepth) throw TooDeep{};  // depth counts from 0
    switch (event) {
      case json::parse_event_t::object_start:
        seen.emplace_back();
        break;
      case json::parse_event_t::object_end:
        if (!seen.empty()) seen.pop_back();
        break;
      case json::parse_event_t::key: {
        if (seen.empty() || found) break;
        std::string key = parsed.get<std::string>();
        if (seen.size() == 1) top_key = key;
        if (!seen.back().insert(key).second) {
          found = true;
          if (seen.size() == 1)
            message = key == "__metadata__"
                          ? std::string("duplicate __metadata__")
                          : fmt::format("duplicate tensor name {}", quote_name(key));
          else
            message = fmt::format("duplicate key {} in the entry of {}", quote_name(key),
                                  quote_name(top_key));
        }
        break;
      }
      default:
        break;
    }
    return true;
  }
};

// A JSON integer that must not be negative; describes the problem in `why` otherwise.
std::optional<uint64_t> as_u64(const json& v, std::string& why) {
  if (v.is_number_unsigned()) return v.get<uint64_t>();
  if (v.is_number_integer()) {
    const int64_t i = v.get<int64_t>();
    if (i >= 0) return uint64_t(i);  // "-0"
    why = fmt::format("is negative ({})", i);
    return std::nullopt;
  }
  why = fmt::format("is not an integer ({})", v.type_name());
  return std::nullopt;
}

SafetensorsEntry parse_entry(const std::string& name, const json& v, uint64_t data_size,
                             const std::string& label) {
  const std::string qname = quote_name(name);
  if (!v.is_object())
    fail("{}: tensor {}: entry is not an object ({})", label, qname, v.type_name());

  SafetensorsEntry e;
  e.name = name;

  const auto dt = v.find("dtype");
  if (dt == v.end()) fail("{}: tensor {}: missing dtype", label, qname);
  if (!dt->is_string())
    fail("{}: tensor {}: dtype is not a string ({})", label, qname, dt->type_name());
  const auto& dtname = dt->get_ref<const std::string&>();
  const auto dtype = dtype_from_name(dtname);
  if (!dtype) fail("{}: tensor {}: unknown dtype {}", label, qname, quote_name(dtname));
  e.dtype = *dtype;

  const auto sh = v.find("shape");
  if (sh == v.end()) fail("{}: tensor {}: missing shape", label, qname);
  if (!sh->is_array())
    fail("{}: tensor {}: shape is not an array ({})", label, qname, sh->type_name());
  // Every partial product is kept below 2^63 (as the reference's checked fold does), so the
  // int64 shape_numel() used downstream can never overflow, even with a later zero dimension.
  uint64_t numel = 1;
  for (size_t i = 0; i < sh->size(); ++i) {
    std::string why;
    const auto d = as_u64((*sh)[i], why);
    if (!d) fail("{}: tensor {}: shape dimension {} {}", label, qname, i, why);
    if (*d > uint64_t(std::numeric_limits<int64_t>::max()) ||
        __builtin_mul_overflow(numel, *d, &numel) ||
        numel > uint64_t(std::numeric_limits<int64_t>::max()))
      fail("{}: tensor {}: shape overflows: element count exceeds 2^63", label, qname);
    e.shape.push_back(int64_t(*d));
  }
  uint64_t nbytes = 0;
  if (__builtin_mul_overflow(numel, uint64_t(dtype_size(e.dtype)), &nbytes) ||
      nbytes > uint64_t(std::numeric_limits<int64_t>::max()))
    fail("{}: tensor {}: shape {} of {} overflows: byte count exceeds 2^63", label, qname,
         shape_str(e.shape), dtype_name(e.dtype));

  const auto off = v.find("data_offsets");
  if (off == v.end()) fail("{}: tensor {}: missing data_offsets", label, qname);
  if (!off->is_array() || off->size() != 2)
    fail("{}: tensor {}: data_offsets is not an array of two integers", label, qname);
  for (size_t i = 0; i < 2; ++i) {
    std::string why;
    const auto o = as_u64((*off)[i], why);
    if (!o) fail("{}: tensor {}: data_offsets[{}] {}", label, qname, i, why);
    (i == 0 ? e.begin : e.end) = *o;
  }
  if (e.begin > e.end)
    fail("{}: tensor {}: data_offsets [{}, {}] end before they begin", label, qname, e.begin,
         e.end);
  if (e.end > data_size)
    fail("{}: tensor {}: data_offsets [{}, {}] out of range: the data section is {} bytes", label,
         qname, e.begin, e.end, data_size);
  if (e.end - e.begin != nbytes)
    fail("{}: tensor {}: shape {} of {} needs {} bytes but data_offsets span {}", label, qname,
         shape_str(e.shape), dtype_name(e.dtype), nbytes, e.end - e.begin);
  return e;
}

std::map<std::string, std::string> parse_metadata(const json& v, const std::string& label) {
  if (!v.is_object())
    fail("{}: __metadata__ is not a string-to-string map (it is {})", label, v.type_name());
  std::map<std::string, std::string> out;
  for (const auto& [key, value] : v.items()) {
    if (!value.is_string())
      fail("{}: __metadata__ is not a string-to-string map (value of {} is {})", label,
           quote_name(key), value.type_name());
    out.emplace(key, value.get<std::string>());
  }
  return out;
}

}  // namespace

SafetensorsHeader parse_safetensors_header(std::string_view text, uint64_t data_size,
                                           const std::string& label) {
  // The reference reader insists on '{' as the first byte; leading padding is not valid.
  if (text.empty() || text.front() != '{')
    fail("{}: header is not a JSON object (it does not start with '{{')", label);

  DuplicateTracker dups;
  json root;
  try {
    root = json::parse(
        text.begin(), text.end(),
        [&dups](int depth, json::parse_event_t event, json& parsed) {
          return dups.on_event(depth, event, parsed);
        });
  } catch (const TooDeep&) {
    fail("{}: header nests deeper than {} levels", label, kMaxHeaderDepth);
  } catch (const json::exception& e) {
    fail("{}: header is not valid JSON: {}", label, json_error_reason(e));
  }
  if (!root.is_object()) fail("{}: header is not a JSON object", label);
  if (dups.found) fail("{}: {}", label, dups.message);

  SafetensorsHeader header;
  header.tensors.reserve(root.size());
  for (const auto& [name, value] : root.items()) {
    if (name == "__metadata__") header.metadata = parse_metadata(value, label);
    else header.tensors.push_back(parse_entry(name, value, data_size, label));
  }

  // Offset order, ties (zero-size tensors) by end then name so the order is deterministic.
  std::sort(header.tensors.begin(), header.tensors.end(),
            [](const SafetensorsEntry& a, const SafetensorsEntry& b) {
              return std::tie(a.begin, a.end, a.name) < std::tie(b.begin, b.end, b.name);
            });
  uint64_t expected = 0;
  const SafetensorsEntry* prev = nullptr;
  for (const auto& e : header.tensors) {
    if (e.begin < expected)
      fail("{}: tensors {} (data_offsets [{}, {}]) and {} (data_offsets [{}, {}]) overlap", label,
           quote_name(prev->name), prev->begin, prev->end, quote_name(e.name), e.begin, e.end);
    if (e.begin > expected) {
      if (prev)
        fail("{}: gap of {} bytes between tensors {} (ends at {}) and {} (begins at {}): "
             "data_offsets must be contiguous",
             label, e.begin - expected, quote_name(prev->name), expected, quote_name(e.name),
             e.begin);
      fail("{}: gap of {} bytes before the first tensor {}: data_offsets must start at 0", label,
           e.begin, quote_name(e.name));
    }
    expected = e.end;
    prev = &e;
  }
  if (expected != data_size)
    fail("{}: {} trailing bytes after the last tensor: the data section is {} bytes but tensors "
         "end at {}",
         label, data_size - expected, data_size, expected);
  return header;
}

SafetensorsHeader parse_safetensors_bytes(std::span<const std::byte> bytes,
                                          const std::string& label, uint64_t* data_start) {
  if (bytes.size() < 8)
    fail("{}: truncated: {} bytes, too short for the 8-byte header length", label, bytes.size());
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | uint64_t(bytes[size_t(i)]);
  if (n > kMaxSafetensorsHeader)
    fail("{}: header length {} exceeds the limit of {} bytes", label, n, kMaxSafetensorsHeader);
  if (n > bytes.size() - 8)
    fail("{}: truncated: header length {} runs past the end of the file ({} bytes)", label, n,
         bytes.size());
  const std::string_view text(reinterpret_cast<const char*>(bytes.data()) + 8, size_t(n));
  SafetensorsHeader header = parse_safetensors_header(text, bytes.size() - 8 - n, label);
  if (data_start) *data_start = 8 + n;
  return header;
}

SafetensorsFile SafetensorsFile::open(const std::filesystem::path& path) {
  SafetensorsFile f;
  f.file_ = std::make_shared<const MappedFile>(MappedFile::open(path));
  f.header_ = parse_safetensors_bytes(std::span(f.file_->data(), f.file_->size()), path.string(),
                                      &f.data_start_);
  f.index_names();
  return f;
}

SafetensorsFile SafetensorsFile::over(std::shared_ptr<const MappedFile> file, uint64_t data_start,
                                      std::vector<SafetensorsEntry> entries) {
  const std::string label = file->path().string();
  std::sort(entries.begin(), entries.end(),
            [](const SafetensorsEntry& a, const SafetensorsEntry& b) { return a.begin < b.begin; });
  uint64_t previous_end = 0;
  for (const SafetensorsEntry& e : entries) {
    uint64_t numel = 1;
    for (const int64_t d : e.shape) numel *= uint64_t(d);
    if (e.begin < previous_end || e.end < e.begin || data_start > file->size() ||
        e.end > file->size() - data_start || e.end - e.begin != numel * dtype_size(e.dtype))
      fail("{}: tensor '{}' does not lie in the file as its shape says", label, e.name);
    previous_end = e.end;
  }
  SafetensorsFile f;
  f.file_ = std::move(file);
  f.data_start_ = data_start;
  f.header_.tensors = std::move(entries);
  f.index_names();
  for (size_t i = 1; i < f.by_name_.size(); ++i)
    if (f.header_.tensors[f.by_name_[i]].name == f.header_.tensors[f.by_name_[i - 1]].name)
      fail("{}: tensor '{}' appears twice", label, f.header_.tensors[f.by_name_[i]].name);
  return f;
}

void SafetensorsFile::index_names() {
  by_name_.resize(header_.tensors.size());
  for (uint32_t i = 0; i < by_name_.size(); ++i) by_name_[i] = i;
  std::sort(by_name_.begin(), by_name_.end(), [this](uint32_t a, uint32_t b) {
    return header_.tensors[a].name < header_.tensors[b].name;
  });
}

const SafetensorsEntry* SafetensorsFile::find(std::string_view name) const {
  const auto it = std::lower_bound(
      by_name_.begin(), by_name_.end(), name,
      [this](uint32_t i, std::string_view n) { return header_.tensors[i].name < n; });
  if (it == by_name_.end() || header_.tensors[*it].name != name) return nullptr;
  return &header_.tensors[*it];
}

TensorView SafetensorsFile::view(const SafetensorsEntry& entry) const {
  TensorView v;
  v.dtype = entry.dtype;
  v.shape = entry.shape;
  v.data = file_->data() + data_start_ + entry.begin;
  v.nbytes = size_t(entry.end - entry.begin);
  return v;
}

void SafetensorsFile::release(const SafetensorsEntry& entry) const {
  file_->release(size_t(data_start_ + entry.begin), size_t(entry.end - entry.begin));
}

void SafetensorsFile::release(const SafetensorsEntry& entry, uint64_t offset,
                              uint64_t length) const {
  file_->release(size_t(data_start_ + entry.begin + offset), size_t(length));
}

}  // namespace qf

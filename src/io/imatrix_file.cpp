// llama.cpp importance matrix files, both formats (see the header).
#include "io/imatrix_file.h"

#include "core/error.h"
#include "core/mapped_file.h"
#include "io/gguf_file.h"

#include <cmath>
#include <cstring>

namespace qf {
namespace {

// A legacy file is read field by field; every read is checked against the end.
class Reader {
 public:
  Reader(std::span<const std::byte> b, const std::string& label) : b_(b), label_(label) {}
  bool at_end() const { return pos_ == b_.size(); }
  size_t left() const { return b_.size() - pos_; }
  int32_t i32(const char* what) {
    int32_t v;
    take(&v, sizeof v, what);
    return v;
  }
  void take(void* out, size_t n, const char* what) {
    if (n > left())
      fail("{}: truncated: {} needs {} bytes at offset {}, {} left", label_, what, n, pos_,
           left());
    std::memcpy(out, b_.data() + pos_, n);
    pos_ += n;
  }
  size_t pos() const { return pos_; }

 private:
  std::span<const std::byte> b_;
  const std::string& label_;
  size_t pos_ = 0;
};

void check_values(const std::vector<float>& v, const std::string& label, const std::string& name,
                  const char* what) {
  for (size_t i = 0; i < v.size(); ++i)
    if (!std::isfinite(v[i]) || v[i] < 0.f)
      fail("{}: {}: {} {} is {} (sums of squares are finite and >= 0)", label, name, what,
           i, v[i]);
}

ImatrixData parse_legacy(std::span<const std::byte> bytes, const std::string& label) {
  Reader r(bytes, label);
  ImatrixData out;
  out.legacy = true;
  const int32_t n_entries = r.i32("entry count");
  // Each entry takes at least 16 bytes: a count beyond that is a corrupt header, refused before
  // anything is allocated for it.
  if (n_entries < 1 || size_t(n_entries) > r.left() / 16)
    fail("{}: entry count {} (not a GGUF file, and not a legacy imatrix of {} bytes)", label,
         n_entries, bytes.size());
  for (int32_t e = 0; e < n_entries; ++e) {
    const int32_t len = r.i32("name length");
    if (len < 1 || len > 4096 || size_t(len) > r.left())
      fail("{}: entry {}: name length {} at offset {}", label, e, len, r.pos() - 4);
    std::string name(static_cast<size_t>(len), '\0');
    r.take(name.data(), size_t(len), "name");
    if (name.find('\0') != std::string::npos) fail("{}: entry {}: name holds a NUL byte", label, e);
    const int32_t ncall = r.i32("ncall");
    const int32_t nval = r.i32("value count");
    if (nval < 1 || size_t(nval) > r.left() / 4)
      fail("{}: {}: value count {} ({} bytes left)", label, name, nval, r.left());
    std::vector<float> v(static_cast<size_t>(nval));
    r.take(v.data(), v.size() * 4, "values");
    check_values(v, label, name, "value");
    // llama-quantize: the stored values are mean x^2 times ncall; divide it back out.
    if (ncall > 0)
      for (float& x : v) x = x / float(ncall);
    if (!out.entries.emplace(std::move(name), std::move(v)).second)
      fail("{}: entry {}: duplicate name", label, e);
  }
  if (!r.at_end()) {  // the optional trailer: chunk count, dataset name
    out.chunk_count = r.i32("chunk count");
    if (out.chunk_count < 0) fail("{}: chunk count {} is negative", label, out.chunk_count);
    const int32_t len = r.i32("dataset name length");
    if (len < 0 || size_t(len) > r.left())
      fail("{}: dataset name length {} ({} bytes left)", label, len, r.left());
    std::string ds(static_cast<size_t>(len), '\0');
    r.take(ds.data(), size_t(len), "dataset name");
    if (len > 0) out.datasets.push_back(ds.substr(0, ds.find('\0')));
    if (!r.at_end()) fail("{}: {} bytes after the dataset name", label, r.left());
  }
  return out;
}

std::vector<float> f32_tensor(std::span<const std::byte> bytes, const GgufHeader& h,
                              const GgufTensorInfo& t, const std::string& label) {
  if (t.type != GgmlType::F32)
    fail("{}: {} is {}, expected f32", label, t.name, ggml_type_info(t.type).name);
  const uint64_t n = uint64_t(t.numel());
  const uint64_t start = h.data_offset + t.offset;
  if (n > bytes.size() / 4 || n * 4 != t.nbytes || start > bytes.size() ||
      bytes.size() - start < t.nbytes)
    fail("{}: {}: data out of the file", label, t.name);
  std::vector<float> v(static_cast<size_t>(n));
  std::memcpy(v.data(), bytes.data() + start, size_t(t.nbytes));
  return v;
}

ImatrixData parse_gguf_imatrix(std::span<const std::byte> bytes, const std::string& label) {
  const GgufHeader h = parse_gguf(bytes, label);
  ImatrixData out;
  const GgufKv *datasets = nullptr, *chunk_count = nullptr, *chunk_size = nullptr;
  for (const GgufKv& kv : h.kvs) {
    if (kv.key == "imatrix.datasets") datasets = &kv;
    if (kv.key == "imatrix.chunk_count") chunk_count = &kv;
    if (kv.key == "imatrix.chunk_size") chunk_size = &kv;
  }
  // llama-quantize refuses a GGUF imatrix without its metadata (it may be some other GGUF).
  if (!datasets || !chunk_count || !chunk_size)
    fail("{}: GGUF without imatrix.datasets / imatrix.chunk_count / imatrix.chunk_size: not an "
         "importance matrix",
         label);
  if (datasets->value.type != GgufType::ARRAY || datasets->value.elem != GgufType::STRING)
    fail("{}: imatrix.datasets is not an array of strings", label);
  for (std::string_view s : datasets->value.strings) out.datasets.emplace_back(s);
  if (chunk_count->value.type != GgufType::U32 || chunk_size->value.type != GgufType::U32)
    fail("{}: imatrix.chunk_count / imatrix.chunk_size are not uint32", label);
  out.chunk_count = int64_t(chunk_count->value.as_u64());
  out.chunk_size = int64_t(chunk_size->value.as_u64());

  std::map<std::string, std::pair<const GgufTensorInfo*, const GgufTensorInfo*>> pairs;
  for (const GgufTensorInfo& t : h.tensors) {
    std::string name(t.name);
    auto strip = [&](std::string_view suffix) {
      if (name.size() <= suffix.size() || !name.ends_with(suffix)) return false;
      name.resize(name.size() - suffix.size());
      return true;
    };
    if (strip(".in_sum2"))
      pairs[name].first = &t;
    else if (strip(".counts"))
      pairs[name].second = &t;
    else
      fail("{}: tensor {} is neither <name>.in_sum2 nor <name>.counts", label, t.name);
  }
  if (pairs.empty()) fail("{}: no importance entries", label);
  for (const auto& [name, p] : pairs) {
    if (!p.first || !p.second)
      fail("{}: {} has {} but no {}", label, name, p.first ? "in_sum2" : "counts",
           p.first ? "counts" : "in_sum2");
    std::vector<float> sums = f32_tensor(bytes, h, *p.first, label);
    const std::vector<float> counts = f32_tensor(bytes, h, *p.second, label);
    if (counts.empty() || sums.empty() || sums.size() % counts.size() != 0)
      fail("{}: {}: {} sums do not split into {} counts", label, name, sums.size(), counts.size());
    check_values(sums, label, name, "in_sum2 value");
    check_values(counts, label, name, "count");
    const size_t ne0 = sums.size() / counts.size();
    for (size_t j = 0; j < counts.size(); ++j) {
      if (counts[j] > 9.0e18f) fail("{}: {}: count {} is too large", label, name, counts[j]);
      // common_imatrix_load rounds the count to an integer; quantize divides by it as float.
      const float count = float(std::llround(counts[j]));
      for (size_t i = 0; i < ne0; ++i) {
        float& v = sums[j * ne0 + i];
        v = count > 0.f ? v / count : 1.f;
      }
    }
    out.entries.emplace(name, std::move(sums));
  }
  return out;
}

}  // namespace

ImatrixData parse_imatrix(std::span<const std::byte> bytes, const std::string& label) {
  if (bytes.empty()) fail("{}: empty file: not an importance matrix", label);
  if (bytes.size() >= 4 && std::memcmp(bytes.data(), "GGUF", 4) == 0)
    return parse_gguf_imatrix(bytes, label);
  return parse_legacy(bytes, label);
}

ImatrixData load_imatrix(const std::filesystem::path& path) {
  const MappedFile f = MappedFile::open(path);
  return parse_imatrix(std::span(f.data(), f.size()), path.string());
}

}  // namespace qf

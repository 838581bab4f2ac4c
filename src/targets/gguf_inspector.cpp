#include "targets/gguf_inspector.h"

#include "io/gguf_file.h"

#include <string>

namespace qf {
namespace {

// Array elements listed in full up to this many; longer arrays (vocabularies, merges) show
// their first elements only, so a report stays readable and small.
constexpr uint64_t kArrayHead = 8;

nlohmann::ordered_json scalar_json(GgufType type, uint64_t bits) {
  GgufValue v;
  v.type = type;
  v.bits = bits;
  switch (type) {
    case GgufType::F32: return gguf_decimal(float(v.as_f64()));
    case GgufType::F64: return v.as_f64();
    case GgufType::BOOL: return bits != 0;
    case GgufType::I8:
    case GgufType::I16:
    case GgufType::I32:
    case GgufType::I64: return v.as_i64();
    default: return bits;
  }
}

nlohmann::ordered_json value_json(const GgufValue& v) {
  if (v.type == GgufType::STRING) return std::string(v.str);
  if (v.type != GgufType::ARRAY) return scalar_json(v.type, v.bits);
  nlohmann::ordered_json a;
  a["array"] = std::string(gguf_type_name(v.elem));
  a["count"] = v.count;
  auto head = nlohmann::ordered_json::array();
  for (uint64_t i = 0; i < std::min(v.count, kArrayHead); ++i)
    head.push_back(v.elem == GgufType::STRING ? nlohmann::ordered_json(std::string(v.strings[i]))
                                              : scalar_json(v.elem, v.elem_bits(i)));
  a["head"] = std::move(head);
  return a;
}

}  // namespace

GgufInspectReport inspect_gguf(const std::filesystem::path& path) {
  const GgufFile f = GgufFile::open(path);
  GgufInspectReport r;
  r.path = path;
  r.version = f.version();
  r.file_bytes = f.file_size();
  for (const GgufKv& kv : f.metadata()) r.metadata[std::string(kv.key)] = value_json(kv.value);
  if (const GgufValue* v = f.find("general.architecture"); v && v->type == GgufType::STRING)
    r.architecture = v->str;
  if (const GgufValue* v = f.find("general.name"); v && v->type == GgufType::STRING)
    r.name = v->str;
  for (const GgufTensorInfo& t : f.tensors()) {
    GgufInspectedTensor it;
    it.name = t.name;
    it.type = ggml_type_info(t.type).name;
    it.shape = t.shape();
    it.bytes = t.nbytes;
    r.tensor_bytes += t.nbytes;
    if (t.ne.size() == 2) {
      r.matrix_weights += t.numel();
      r.matrix_bytes += t.nbytes;
    }
    r.tensors.push_back(std::move(it));
  }
  return r;
}

}  // namespace qf

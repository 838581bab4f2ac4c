// libFuzzer target for the GGUF reader: any input, read as a whole file, must either parse into
// a header that keeps the reader's promises or throw qf::Error. Anything else (a crash, a
// sanitizer report, another exception type) is a bug.
#include "core/error.h"
#include "formats/ggml_types.h"
#include "io/gguf_file.h"

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <unordered_set>

namespace {

// What a successful parse promises: tensors packed in order at aligned offsets, inside the
// file, sized by their type and shape; metadata arrays inside the file.
void check_invariants(const qf::GgufHeader& h, std::span<const std::byte> bytes) {
  if (h.alignment == 0 || (h.alignment & (h.alignment - 1)) != 0) std::abort();
  if (h.data_offset % h.alignment != 0) std::abort();
  uint64_t expected = 0;
  std::unordered_set<std::string_view> names;
  for (const auto& t : h.tensors) {
    if (t.offset != expected || t.offset % h.alignment != 0) std::abort();
    if (t.name.size() > qf::kGgufMaxTensorName || !names.insert(t.name).second) std::abort();
    if (t.ne.empty() || t.ne.size() > qf::kGgufMaxDims) std::abort();
    const auto& info = qf::ggml_type_info(t.type);
    uint64_t rows = 1;
    for (size_t d = 1; d < t.ne.size(); ++d) rows *= uint64_t(t.ne[d]);
    const auto row = qf::ggml_row_bytes(t.type, t.ne[0]);
    if (!row || rows * *row != t.nbytes || info.block_bytes <= 0) std::abort();
    if (h.data_offset + t.offset + t.nbytes > bytes.size()) std::abort();
    // Touch the first and last byte of the data: ASan reports a read outside the input.
    if (t.nbytes > 0) {
      volatile std::byte first = bytes[size_t(h.data_offset + t.offset)];
      volatile std::byte last = bytes[size_t(h.data_offset + t.offset + t.nbytes - 1)];
      (void)first;
      (void)last;
    }
    expected = t.offset + (t.nbytes + h.alignment - 1) / h.alignment * h.alignment;
  }
  for (const auto& kv : h.kvs) {
    const auto& v = kv.value;
    if (v.type == qf::GgufType::ARRAY && v.elem != qf::GgufType::STRING && v.count > 0) {
      volatile uint64_t last = v.elem_bits(v.count - 1);
      (void)last;
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto bytes = std::span(reinterpret_cast<const std::byte*>(data), size);
  try {
    check_invariants(qf::parse_gguf(bytes, "fuzz"), bytes);
  } catch (const qf::Error&) {
  }
  return 0;
}

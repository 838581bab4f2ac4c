// libFuzzer target for the safetensors reader: any input, read as a whole file, must either
// parse into a header that satisfies the container's invariants or throw qf::Error. Anything
// else (a crash, a sanitizer report, another exception type) is a bug.
#include "core/error.h"
#include "io/safetensors.h"

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <string_view>

namespace {

// What a successful parse promises its callers; checked so the fuzzer also finds logic errors.
void check_invariants(const qf::SafetensorsHeader& h, uint64_t data_size) {
  uint64_t expected = 0;
  for (const auto& e : h.tensors) {
    if (e.begin != expected || e.end < e.begin || e.end > data_size) std::abort();
    if (uint64_t(qf::shape_numel(e.shape)) * qf::dtype_size(e.dtype) != e.end - e.begin)
      std::abort();
    expected = e.end;
  }
  if (expected != data_size) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto bytes = std::span(reinterpret_cast<const std::byte*>(data), size);
  // The input as a whole file, exactly as SafetensorsFile::open sees a mapped file.
  try {
    uint64_t data_start = 0;
    const auto h = qf::parse_safetensors_bytes(bytes, "fuzz", &data_start);
    check_invariants(h, size - data_start);
  } catch (const qf::Error&) {
  }
  // The same bytes after the length field as a header with an arbitrary data size (taken from
  // the length field), so mutations reach the JSON and offset checks without first having to
  // keep the length consistent.
  if (size >= 8) {
    uint64_t data_size = 0;
    for (int i = 7; i >= 0; --i) data_size = (data_size << 8) | data[i];
    try {
      const auto h = qf::parse_safetensors_header(
          std::string_view(reinterpret_cast<const char*>(data) + 8, size - 8), data_size, "fuzz");
      check_invariants(h, data_size);
    } catch (const qf::Error&) {
    }
  }
  return 0;
}

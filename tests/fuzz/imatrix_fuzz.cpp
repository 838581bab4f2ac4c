// libFuzzer target for the importance-matrix reader (llama.cpp's GGUF and legacy .dat imatrix
// files): any input must either parse into entries that keep the reader's promises (non-empty,
// finite, non-negative importances) or throw qf::Error. Anything else is a bug.
#include "core/error.h"
#include "io/imatrix_file.h"

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto bytes = std::span(reinterpret_cast<const std::byte*>(data), size);
  try {
    const qf::ImatrixData d = qf::parse_imatrix(bytes, "fuzz");
    if (d.entries.empty()) std::abort();
    for (const auto& [name, v] : d.entries) {
      if (v.empty()) std::abort();
      for (float x : v)
        if (!std::isfinite(x) || x < 0.f) std::abort();
    }
  } catch (const qf::Error&) {
  }
  return 0;
}

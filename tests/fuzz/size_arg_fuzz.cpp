// libFuzzer target for size arguments ("5GB", "1.5GiB"): a size is a positive byte count or a
// qf::Error; callers divide by it and plan shards with it, so 0 is a finding too.
#include "core/error.h"
#include "fuzz_util.h"

#include <string>

namespace qf::cli {
uint64_t parse_size(const std::string& text);  // cli/commands.h, which needs CLI11
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const uint64_t bytes = qf::cli::parse_size(std::string(qf::fuzz::as_text(data, size)));
    if (bytes == 0 || bytes > uint64_t(1e18)) std::abort();
  } catch (const qf::Error&) {
  }
  return 0;
}

// libFuzzer target for config.json -> model::Architecture, RoPE settings included: any input
// either gives an architecture whose RoPE frequencies can be computed, or throws qf::Error.
#include "core/error.h"
#include "fuzz_util.h"
#include "io/json_file.h"
#include "model/architecture.h"

#include <nlohmann/json.hpp>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // Checkpoint::open refuses JSON syntax errors and deep nesting before from_config sees the
  // config; the same checks here keep the fuzzer on from_config.
  const auto text = qf::fuzz::as_text(data, size);
  nlohmann::json config;
  try {
    config = qf::parse_json_text(text, "config.json");
  } catch (const qf::Error&) {
    return 0;
  }
  if (!config.is_object()) return 0;
  try {
    const auto arch = qf::Architecture::from_config(config, "config.json");
    (void)arch.describe();
    // An accepted RoPE must be computable: the engine asks for frequencies at every call.
    for (const auto& rope : arch.ropes) {
      (void)rope.describe();
      (void)rope.inv_freq(1);
      (void)rope.inv_freq(4097);
    }
  } catch (const qf::Error&) {
  }
  return 0;
}

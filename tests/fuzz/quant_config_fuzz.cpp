// libFuzzer target for the quantization configs read back from checkpoints: config.json's
// quantization_config (compressed-tensors, ModelOpt's flat form) and ModelOpt's
// hf_quant_config.json, through the target table as the engine and the inspector read them.
//
// Input: config.json, then optionally "\n#hf_quant_config.json\n" and that file.
#include "core/error.h"
#include "fuzz_util.h"
#include "io/checkpoint.h"
#include "targets/checkpoint_inspector.h"
#include "targets/target.h"

#include <nlohmann/json.hpp>

namespace {

const std::filesystem::path& model_dir() {
  static const std::filesystem::path dir = [] {
    auto d = qf::fuzz::scratch_dir() / "model";
    std::filesystem::create_directories(d);
    qf::fuzz::write_file(d / "model.safetensors",
                         qf::fuzz::tiny_safetensors({"model.layers.0.mlp.down_proj.weight"}));
    return d;
  }();
  return dir;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto dir = model_dir();
  const auto parts = qf::fuzz::split(qf::fuzz::as_text(data, size), "\n#hf_quant_config.json\n", 2);
  qf::fuzz::write_file(dir / "config.json", parts[0]);
  if (parts.size() > 1) qf::fuzz::write_file(dir / "hf_quant_config.json", parts[1]);
  else qf::fuzz::remove_file(dir / "hf_quant_config.json");
  try {
    const auto ck = qf::Checkpoint::open(dir);
    (void)qf::declared_algo_name(qf::declared_quantization_config(ck));
    const auto detected = qf::detect_target(ck, "fuzz");
    if (!detected.reader) return 0;
    for (const char* m : {"model.layers.0.mlp.down_proj", "model.layers.0.self_attn.q_proj"}) {
      const auto s = detected.scheme.for_module(m);
      if (s.ignored(m) || !s.format) continue;
      (void)detected.reader->stored_linear(m, s);
    }
  } catch (const qf::Error&) {
  }
  try {
    (void)qf::inspect_checkpoint(dir);
  } catch (const qf::Error&) {
  }
  return 0;
}

// libFuzzer target for model.safetensors.index.json: opening a checkpoint whose index is the
// input either gives tensors that are all found in the shard the index names, or throws
// qf::Error (a shard outside the directory, a missing shard or tensor, malformed JSON).
#include "core/error.h"
#include "fuzz_util.h"
#include "io/checkpoint.h"

#include <cstdlib>

namespace {

const std::filesystem::path& model_dir() {
  static const std::filesystem::path dir = [] {
    auto d = qf::fuzz::scratch_dir() / "model";
    std::filesystem::create_directories(d);
    qf::fuzz::write_file(d / "config.json", "{}");
    qf::fuzz::write_file(d / "model-00001-of-00002.safetensors",
                         qf::fuzz::tiny_safetensors({"a", "b"}, R"({"format":"pt","t":"a"})"));
    qf::fuzz::write_file(d / "model-00002-of-00002.safetensors", qf::fuzz::tiny_safetensors({"c"}));
    return d;
  }();
  return dir;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto dir = model_dir();
  qf::fuzz::write_file(dir / "model.safetensors.index.json", qf::fuzz::as_text(data, size));
  try {
    const auto ck = qf::Checkpoint::open(dir);
    for (const auto& t : ck.tensors())
      if (ck.find(t.name) != &t) std::abort();
    for (const auto& [alias, stored] : ck.aliases())
      if (!ck.find(alias) || ck.find(alias)->entry != ck.find(stored)->entry) std::abort();
    (void)ck.tensor_bytes();
  } catch (const qf::Error&) {
  }
  return 0;
}

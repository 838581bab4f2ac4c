// libFuzzer target for HF tokenizer.json and tokenizer_config.json: loading either gives a
// tokenizer that encodes and decodes without failing, or throws qf::Error naming the file.
//
// Input: tokenizer.json, then optionally "\n#tokenizer_config.json\n" and that file.
#include "core/error.h"
#include "fuzz_util.h"
#include "tokenizer_exercise.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto dir = qf::fuzz::scratch_dir();
  const auto parts =
      qf::fuzz::split(qf::fuzz::as_text(data, size), "\n#tokenizer_config.json\n", 2);
  qf::fuzz::write_file(dir / "tokenizer.json", parts[0]);
  if (parts.size() > 1) qf::fuzz::write_file(dir / "tokenizer_config.json", parts[1]);
  else qf::fuzz::remove_file(dir / "tokenizer_config.json");
  try {
    qf::fuzz::exercise(*qf::Tokenizer::load(dir));
  } catch (const qf::Error&) {
  }
  return 0;
}

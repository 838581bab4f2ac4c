// libFuzzer target for GPT-2 style vocab.json + merges.txt (with tokenizer_config.json):
// loading either gives a tokenizer that encodes and decodes, or throws qf::Error.
//
// Input: vocab.json, "\n#merges.txt\n", merges.txt, then optionally
// "\n#tokenizer_config.json\n" and that file. Without the first separator merges.txt is empty.
#include "core/error.h"
#include "fuzz_util.h"
#include "tokenizer_exercise.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto dir = qf::fuzz::scratch_dir();
  const auto files = qf::fuzz::split(qf::fuzz::as_text(data, size), "\n#merges.txt\n", 2);
  const auto rest = qf::fuzz::split(files.size() > 1 ? files[1] : std::string_view(),
                                    "\n#tokenizer_config.json\n", 2);
  qf::fuzz::write_file(dir / "vocab.json", files[0]);
  qf::fuzz::write_file(dir / "merges.txt", rest[0]);
  if (rest.size() > 1) qf::fuzz::write_file(dir / "tokenizer_config.json", rest[1]);
  else qf::fuzz::remove_file(dir / "tokenizer_config.json");
  try {
    qf::fuzz::exercise(*qf::Tokenizer::load(dir));
  } catch (const qf::Error&) {
  }
  return 0;
}

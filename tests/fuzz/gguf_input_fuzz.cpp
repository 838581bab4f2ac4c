// libFuzzer target for a GGUF file as a model input: its embedded tokenizer
// (io/tokenizer_gguf), the tokenizer files written from it (io/tokenizer_gguf_export) read back
// by the Hugging Face loader, and the float llama checkpoint view quantize reads
// (model/gguf_checkpoint). Each either works or throws qf::Error.
#include "core/error.h"
#include "fuzz_util.h"
#include "io/gguf_file.h"
#include "io/tokenizer_gguf_export.h"
#include "model/gguf_checkpoint.h"
#include "tokenizer_exercise.h"

#include <filesystem>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto dir = qf::fuzz::scratch_dir();
  const auto file = dir / "in.gguf";
  qf::fuzz::write_file(file, qf::fuzz::as_text(data, size));
  try {
    qf::fuzz::exercise(*qf::Tokenizer::load_gguf(file));
  } catch (const qf::Error&) {
  }
  try {
    std::filesystem::create_directories(dir / "hf");
    qf::write_hf_tokenizer_files(qf::GgufFile::open(file), dir / "hf");
    qf::fuzz::exercise(*qf::Tokenizer::load(dir / "hf"));
  } catch (const qf::Error&) {
  }
  try {
    const qf::GgufCheckpoint c = qf::open_gguf_checkpoint(file);
    for (const qf::CheckpointTensor& t : c.checkpoint->tensors()) {
      const qf::TensorView v = t.file->view(*t.entry);
      // Touch the ends: ASan reports a view outside the mapping.
      if (v.nbytes > 0) {
        volatile std::byte first = v.data[0];
        volatile std::byte last = v.data[v.nbytes - 1];
        (void)first;
        (void)last;
      }
    }
  } catch (const qf::Error&) {
  }
  return 0;
}

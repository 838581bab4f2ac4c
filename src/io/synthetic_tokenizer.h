// A made-up byte-level BPE tokenizer for synthetic checkpoints (`qforge synth`), so that the
// commands that need text (calibration, generate, eval) run on them. It is not trained: its
// merges build lower-case letter strings in a fixed order until the vocabulary is full.
#pragma once

#include <cstdint>
#include <filesystem>

namespace qf {

// Writes tokenizer.json (byte-level BPE, GPT-2 pre-tokenizer, BOS added by a
// TemplateProcessing) and tokenizer_config.json into `dir`. Ids: 0 <unk>, 1 <s> (BOS), 2 </s>
// (EOS), 3..258 the 256 bytes, then merges up to exactly `vocab_size` ids, so every id the
// model can produce decodes. The same vocab_size always gives the same bytes. Throws qf::Error
// when vocab_size is below 259 or above 1,000,000, or a write fails.
void write_synthetic_tokenizer(const std::filesystem::path& dir, int64_t vocab_size);

}  // namespace qf

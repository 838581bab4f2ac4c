// The input of a pipeline job (quantize, sensitivity, --auto): the checkpoint opened and its
// config parsed once, then handed to every step, so one run never re-opens or re-reads a file
// that might change under it.
#pragma once

#include "io/checkpoint.h"
#include "io/tokenizer.h"
#include "model/architecture.h"

#include <filesystem>
#include <memory>

namespace qf {

struct SourceModel {
  std::filesystem::path dir;
  std::shared_ptr<const Checkpoint> checkpoint;  // shared with the engine's views
  Architecture arch;

  // Opens `dir` (Checkpoint::open, then Architecture::from_config). Throws qf::Error naming
  // the file and problem.
  static SourceModel open(const std::filesystem::path& dir);

  // The tokenizer, loaded on first use (calibration needs it; weight-only jobs do not).
  // Throws qf::Error naming the directory when it has none.
  const Tokenizer& tokenizer() const;

 private:
  mutable std::shared_ptr<const Tokenizer> tokenizer_;
};

}  // namespace qf

#include "pipeline/source_model.h"

namespace qf {

SourceModel SourceModel::open(const std::filesystem::path& dir) {
  SourceModel m;
  m.dir = dir;
  m.checkpoint = std::make_shared<const Checkpoint>(Checkpoint::open(dir));
  m.arch = Architecture::from_config(m.checkpoint->config(), (dir / "config.json").string());
  return m;
}

const Tokenizer& SourceModel::tokenizer() const {
  if (!tokenizer_) tokenizer_ = Tokenizer::load(dir, &checkpoint->config());
  return *tokenizer_;
}

}  // namespace qf

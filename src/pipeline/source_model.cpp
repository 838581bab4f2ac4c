#include "pipeline/source_model.h"

#include "core/error.h"
#include "io/gguf_file.h"
#include "model/expert_tensors.h"
#include "model/gguf_checkpoint.h"
#include "targets/target.h"

#include <algorithm>

namespace qf {

SourceModel SourceModel::open(const std::filesystem::path& dir,
                              const std::filesystem::path& tokenizer_dir) {
  SourceModel m;
  m.dir = dir;
  m.tokenizer_dir = tokenizer_dir;
  if (is_gguf_file(dir)) {
    GgufCheckpoint g = open_gguf_checkpoint(dir);
    m.gguf = std::move(g.file);
    m.checkpoint = std::move(g.checkpoint);
    m.arch = checkpoint_architecture(*m.checkpoint, dir.string());
    return m;
  }
  m.checkpoint = open_model_checkpoint(dir);
  m.arch = checkpoint_architecture(*m.checkpoint, (dir / "config.json").string());
  return m;
}

uint64_t SourceModel::input_bytes() const {
  if (gguf) return gguf->file_size();
  uint64_t n = 0;
  for (const auto& s : checkpoint->shards()) n += s->file_size();
  return n;
}

bool SourceModel::is_gpt_oss_mxfp4() const {
  const DetectedTarget t = detect_target(*checkpoint, dir.string());
  return t.reader && t.reader->name() == "gpt-oss-mxfp4";
}

void SourceModel::require_unquantized(std::string_view command) const {
  const Checkpoint& ck = *checkpoint;
  auto refuse = [&](const std::filesystem::path& file, const std::string& what) {
    fail("{}: already quantized ({}); {} takes an unquantized BF16/F16/F32 checkpoint",
         file.string(), what, command);
  };
  const nlohmann::json declared = declared_quantization_config(ck);
  if (!declared.is_null()) {
    const bool in_config = ck.config().contains("quantization_config");
    std::string what = declared.is_object() && declared.contains("quant_method") &&
                               declared["quant_method"].is_string()
                           ? declared["quant_method"].get<std::string>()
                           : in_config ? "quantization_config" : "modelopt";
    if (const std::string algo = declared_algo_name(declared); !algo.empty()) what += " " + algo;
    refuse(dir / (in_config ? "config.json" : "hf_quant_config.json"), what);
  }
  // A config may have been dropped while the tensors stayed quantized.
  std::vector<std::string> leaves = packed_weight_leaves();
  for (const std::string& l : quantized_marker_leaves()) leaves.push_back(l);
  for (const CheckpointTensor& t : ck.tensors()) {
    const std::string leaf = t.name.substr(t.name.rfind('.') + 1);
    if (std::find(leaves.begin(), leaves.end(), leaf) != leaves.end())
      refuse(t.file->path(), fmt::format("tensor '{}' is part of a quantized weight", t.name));
    const DType d = t.entry->dtype;
    if (leaf == "weight" && (d == DType::F8_E4M3 || d == DType::F8_E5M2))
      refuse(t.file->path(), fmt::format("tensor '{}' is {}", t.name, dtype_name(d)));
  }
}

const Tokenizer& SourceModel::tokenizer() const {
  if (!tokenizer_)
    tokenizer_ = Tokenizer::load_for_model(dir, tokenizer_dir, &checkpoint->config());
  return *tokenizer_;
}

}  // namespace qf

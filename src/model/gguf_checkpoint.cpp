// A float GGUF file as a Hugging Face checkpoint (see the header).
#include "model/gguf_checkpoint.h"

#include "core/error.h"
#include "model/architecture.h"
#include "model/gguf_llama_layout.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <map>
#include <string>
#include <vector>

namespace qf {

namespace {

struct HfName {
  std::string name;
  int64_t heads = 0;  // q/k: heads whose rows are reordered
};

// GGUF name -> Hugging Face name of every tensor the llama model reads.
std::map<std::string, HfName, std::less<>> hf_names(const Architecture& a) {
  std::map<std::string, HfName, std::less<>> names;
  names["token_embd.weight"] = {a.embed_name};
  names["output_norm.weight"] = {a.final_norm_name};
  if (!a.tie_word_embeddings) names["output.weight"] = {a.head_name};
  for (int64_t l = 0; l < a.num_layers; ++l) {
    const LayerSpec& spec = a.layers[size_t(l)];
    names[fmt::format("blk.{}.attn_norm.weight", l)] = {spec.norm(NormSlot::attn_in)};
    names[fmt::format("blk.{}.ffn_norm.weight", l)] = {spec.norm(NormSlot::mlp_in)};
    for (size_t i : spec.linears) {
      const LinearModule& m = a.linears[i];
      const int64_t heads = m.role == LinearRole::q_proj   ? a.num_heads
                            : m.role == LinearRole::k_proj ? a.num_kv_heads
                                                           : 0;
      names[gguf_llama_linear_name(m)] = {m.weight_name(), heads};
    }
  }
  return names;
}

}  // namespace

GgufCheckpoint open_gguf_checkpoint(const std::filesystem::path& path) {
  auto file = std::make_shared<const GgufFile>(GgufFile::open(path));
  const GgufFile& f = *file;
  const std::string label = path.string();
  if (f.find_tensor("rope_freqs.weight"))
    fail("{}: tensor 'rope_freqs.weight' (Llama 3.1+ RoPE scaling): its factors do not name the "
         "llama3 rope_scaling parameters a checkpoint needs; quantize the original model instead",
         label);
  const nlohmann::json config = gguf_llama_config(f);
  const Architecture arch = Architecture::from_config(config, label);
  auto names = hf_names(arch);

  std::vector<SafetensorsEntry> in_place, reordered;
  std::vector<std::byte> qk;  // q/k tensors with their rows back in Hugging Face's order
  for (const GgufTensorInfo& t : f.tensors()) {
    const auto it = names.find(t.name);
    if (it == names.end())
      fail("{}: tensor '{}' is not part of the llama model qforge reads; refusing the file rather "
           "than ignoring it", label, t.name);
    DType dtype;
    switch (t.type) {
      case GgmlType::F32: dtype = DType::F32; break;
      case GgmlType::F16: dtype = DType::F16; break;
      case GgmlType::BF16: dtype = DType::BF16; break;
      default:
        fail("{}: tensor '{}' is {}: quantize reads GGUF files whose weights are F32, F16 or BF16 "
             "(requantizing a quantized file would round twice; start from the original model)",
             label, t.name, ggml_type_info(t.type).name);
    }
    SafetensorsEntry e{it->second.name, dtype, t.shape(), t.offset, t.offset + t.nbytes};
    if (const int64_t heads = it->second.heads; heads > 0) {
      const int64_t rows = e.shape.at(0);
      if (e.shape.size() != 2 || rows % heads != 0 || (rows / heads) % 2 != 0)
        fail("{}: tensor '{}' has shape [{}], not {} heads of an even size", label, t.name,
             fmt::join(e.shape, ", "), heads);
      const size_t begin = (qk.size() + 63) / 64 * 64;
      qk.resize(begin + t.nbytes);
      gguf_unpermute_qk_row_bytes(f.view(t).data.data(), qk.data() + begin, heads, rows / heads,
                                  t.nbytes / uint64_t(rows));
      e.begin = begin;
      e.end = begin + t.nbytes;
      reordered.push_back(std::move(e));
    } else {
      in_place.push_back(std::move(e));
    }
    names.erase(it);
  }
  if (!names.empty())
    fail("{}: tensor '{}' is missing", label, names.begin()->first);

  std::vector<std::unique_ptr<SafetensorsFile>> files;
  files.push_back(std::make_unique<SafetensorsFile>(
      SafetensorsFile::over(f.mapping(), f.data_offset(), std::move(in_place))));
  if (!reordered.empty())
    files.push_back(std::make_unique<SafetensorsFile>(SafetensorsFile::over(
        std::make_shared<const MappedFile>(MappedFile::copy_of(qk, path)), 0, std::move(reordered))));
  GgufCheckpoint out;
  out.file = std::move(file);
  out.checkpoint = std::make_shared<const Checkpoint>(Checkpoint::from_files(
      path, nlohmann::ordered_json::parse(config.dump()), std::move(files)));
  return out;
}

}  // namespace qf

// ModelWeights from a GGUF file written for llama.cpp's "llama" architecture (qforge's
// `--export gguf` or llama.cpp's own tools): the architecture from its llama.* metadata, the
// tensors by llama.cpp's names (model/gguf_llama_layout.h), q/k rows put back in Hugging Face's
// rotate-half order, ggml-block weights read in place (WeightFormat::ggml) and float ones as
// float Linears.
#include "engine/weights.h"

#include "core/error.h"
#include "core/huge_pages.h"
#include "core/numeric.h"
#include "formats/ggml_types.h"
#include "io/gguf_file.h"
#include "kernels/ggml_rows8.h"
#include "model/gguf_llama_layout.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstring>
#include <map>
#include <set>
#include <string>

namespace qf {
namespace {

class GgufLoader {
 public:
  explicit GgufLoader(const GgufFile& f) : f_(f), label_(f.path().string()) {}

  const GgufTensorInfo& tensor(const std::string& name) const {
    const GgufTensorInfo* t = f_.find_tensor(name);
    if (!t) fail("{}: tensor '{}' missing", label_, name);
    read_.insert(name);
    return *t;
  }

  // A tensor the model did not read would change what llama.cpp computes (biases, input
  // scales, another block's weights): refused, never ignored.
  void require_all_read() const {
    for (const GgufTensorInfo& t : f_.tensors())
      if (!read_.count(std::string(t.name)))
        fail("{}: tensor '{}' is not part of the llama model qforge computes; refusing the file "
             "rather than ignoring it", label_, t.name);
  }

  // A [rows, cols] weight as stored, with its NVFP4 `.scale` (weight_scale_2) when present.
  LinearWeight weight(const std::string& name, int64_t rows, int64_t cols) const {
    const GgufTensorInfo& t = tensor(name);
    if (t.ne.size() != 2 || t.ne[0] != cols || t.ne[1] != rows)
      fail("{}: tensor '{}' has ne [{}], expected [{}, {}]", label_, name, fmt::join(t.ne, ", "),
           cols, rows);
    LinearWeight w;
    w.rows = rows;
    w.cols = cols;
    w.data = f_.view(t).data.data();
    switch (t.type) {
      case GgmlType::F32: w.format = WeightFormat::f32; break;
      case GgmlType::F16: w.format = WeightFormat::f16; break;
      case GgmlType::BF16: w.format = WeightFormat::bf16; break;
      default: {
        const GgmlTypeInfo& info = ggml_type_info(t.type);
        if (!info.dequantize)
          fail("{}: tensor '{}' is ggml type {}, which qforge cannot decode", label_, name,
               info.name);
        w.format = WeightFormat::ggml;
        w.ggml_type = uint32_t(t.type);
        w.group = info.block_size;
      }
    }
    const std::string scale = name.substr(0, name.size() - std::string(".weight").size()) + ".scale";
    if (f_.find_tensor(scale)) {
      const std::vector<float> s = vector(scale, 1);
      if (!(s[0] > 0) || !std::isfinite(s[0]))
        fail("{}: tensor '{}' must be positive and finite", label_, scale);
      w.global_scale = s[0];
    }
    return w;
  }

  // A 1-D F32/F16/BF16 tensor of n elements as float32.
  std::vector<float> vector(const std::string& name, int64_t n) const {
    const GgufTensorInfo& t = tensor(name);
    if (t.ne.size() != 1 || t.ne[0] != n ||
        (t.type != GgmlType::F32 && t.type != GgmlType::F16 && t.type != GgmlType::BF16))
      fail("{}: tensor '{}' is {} with ne [{}], expected f32/f16/bf16 [{}]", label_, name,
           ggml_type_info(t.type).name, fmt::join(t.ne, ", "), n);
    const std::byte* p = f_.view(t).data.data();
    std::vector<float> out(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      if (t.type == GgmlType::F32) {
        std::memcpy(&out[size_t(i)], p + 4 * i, 4);
      } else {
        uint16_t h;
        std::memcpy(&h, p + 2 * i, 2);
        out[size_t(i)] = t.type == GgmlType::F16 ? f16_to_f32(h) : bf16_to_f32(h);
      }
    }
    return out;
  }

 private:
  const GgufFile& f_;
  std::string label_;
  mutable std::set<std::string> read_;  // tensors handed out so far
};

// Rows of a q/k projection back in Hugging Face's rotate-half order: whole rows move, so
// quantized rows are copied as they are.
std::shared_ptr<std::vector<std::byte>> unpermute_rows(LinearWeight& w, int64_t heads,
                                                       int64_t head_dim) {
  const uint64_t stride = w.stored_bytes() / uint64_t(w.rows);
  auto out = std::make_shared<std::vector<std::byte>>(stride * uint64_t(w.rows));
  gguf_unpermute_qk_row_bytes(static_cast<const std::byte*>(w.data), out->data(), heads, head_dim,
                              stride);
  w.data = out->data();
  return out;
}

}  // namespace

ModelWeights ModelWeights::load_gguf(const std::filesystem::path& path) {
  auto file = std::make_shared<const GgufFile>(GgufFile::open(path));
  const GgufFile& f = *file;
  ModelWeights mw;
  mw.gguf = file;
  mw.arch = Architecture::from_config(gguf_llama_config(f), path.string());
  GgufLoader ld(f);
  if (f.find_tensor("rope_freqs.weight")) {
    // Llama 3.1+ (convert_hf_to_gguf's rope_freqs): plain RoPE, each frequency divided by its
    // factor, as llama.cpp's rope op does.
    RopeSpec& rope = mw.arch.ropes.at(0);
    if (rope.type != RopeType::default_)
      fail("{}: rope_freqs.weight with llama.rope.scaling.type {}: not supported", path.string(),
           rope_type_name(rope.type));
    rope.type = RopeType::freq_factors;
    rope.freq_factors = ld.vector("rope_freqs.weight", rope.rotary_dim / 2);
    for (const float x : rope.freq_factors)
      if (!(x > 0) || !std::isfinite(x))
        fail("{}: rope_freqs.weight holds {}: the factors must be positive and finite",
             path.string(), x);
  }
  const Architecture& a = mw.arch;

  std::map<std::string, int> types;  // weight types (ggml's names), for the description
  auto linear = [&](const std::string& gguf_name, int64_t rows, int64_t cols) {
    EngineLinear L;
    L.name = gguf_name;
    L.w = ld.weight(gguf_name, rows, cols);
    ++types[std::string(ggml_type_info(ld.tensor(gguf_name).type).name)];
    return L;
  };

  const LinearWeight embed = ld.weight("token_embd.weight", a.vocab_size, a.hidden_size);
  if (embed.format == WeightFormat::ggml) {
    mw.embed.blocks = embed;
  } else {
    mw.embed.dtype = *float_weight_dtype(embed.format);
    mw.embed.data = embed.data;
  }
  mw.embed.rows = a.vocab_size;
  mw.embed.cols = a.hidden_size;
  mw.lm_head = linear(f.find_tensor("output.weight") ? "output.weight" : "token_embd.weight",
                      a.vocab_size, a.hidden_size);
  mw.final_norm = ld.vector("output_norm.weight", a.hidden_size);

  for (int64_t l = 0; l < a.num_layers; ++l) {
    const LayerSpec& spec = a.layers[size_t(l)];
    LayerWeights L;
    L.norms[size_t(NormSlot::attn_in)] = ld.vector(fmt::format("blk.{}.attn_norm.weight", l), a.hidden_size);
    L.norms[size_t(NormSlot::mlp_in)] = ld.vector(fmt::format("blk.{}.ffn_norm.weight", l), a.hidden_size);
    for (size_t i : spec.linears) {
      const LinearModule& m = a.linears[i];
      EngineLinear e = linear(gguf_llama_linear_name(m), m.out_features, m.in_features);
      if (m.role == LinearRole::q_proj) e.storage = unpermute_rows(e.w, a.num_heads, a.head_dim);
      if (m.role == LinearRole::k_proj) e.storage = unpermute_rows(e.w, a.num_kv_heads, a.head_dim);
      L.linears.push_back(std::move(e));
    }
    mw.layers.push_back(std::move(L));
  }
  ld.require_all_read();
  // Q4_0 on CPUs with AVX2 (AVX-512 ones included): the rows repacked 8 at a time for the AVX2
  // kernel (kernels/ggml_rows8.h; ~3x its one-row rate), a tensor at a time, on 2 MB pages as
  // ModelWeights::move_to_huge_pages would put them (which leaves these alone), each tensor's
  // file pages dropped once its copy exists, so memory holds the weights once.
  auto repack = [](EngineLinear& L) {
    if (!kernels::ggml_rows8_wanted(L.w)) return;
    const size_t n = L.w.data_bytes();
    std::shared_ptr<const void> copy = fill_huge_pages(n, [&](void* dst) {
      kernels::ggml_repack_rows8(L.w, static_cast<uint8_t*>(dst));
    });
    if (!L.storage) release_mapped_pages(L.w.data, n);
    L.w.data = copy.get();
    L.w.ggml_rows8 = true;
    L.storage = std::move(copy);
  };
  repack(mw.lm_head);
  for (LayerWeights& L : mw.layers)
    for (EngineLinear& e : L.linears) repack(e);
  std::string most;
  int count = 0;
  for (const auto& [type, n] : types)
    if (n > count) most = type, count = n;
  mw.quantization = fmt::format("gguf {}", most);
  return mw;
}

}  // namespace qf

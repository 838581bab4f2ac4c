// Loading a checkpoint's weights for the engine: the target that wrote the checkpoint (asked of
// each target's reader), its scheme, each Linear checked tensor by tensor against the target's
// description of how it is stored, views into the mapped shards.
#include "engine/weights.h"

#include "core/huge_pages.h"

#include "io/gguf_file.h"

#include "core/error.h"
#include "core/numeric.h"
#include "formats/registry.h"
#include "kernels/q4_rows16.h"
#include "model/expert_tensors.h"
#include "targets/target.h"

#include <fmt/format.h>

#include <cmath>
#include <cstdlib>
#include <cstring>

namespace qf {
namespace {

class Loader {
 public:
  // `target`: the reader of the target that wrote `ck`; null when nothing is quantized.
  Loader(const Checkpoint& ck, std::string label, const TargetReader* target)
      : ck_(ck), label_(std::move(label)), target_(target) {}

  const CheckpointTensor* find(const std::string& name) const { return ck_.find(name); }

  // A view of a tensor as the model reads it. One stored transposed (gpt-oss experts: float
  // weights are read by float_weight; ModelOpt's fused NVFP4 codes and scales here) is copied,
  // and the copy kept until take_copies() hands it to the Linear that uses it.
  TensorView require(const std::string& name, const std::string& why) const {
    const CheckpointTensor* t = ck_.find(name);
    if (!t) fail("{}: tensor '{}' missing ({})", label_, name, why);
    if (!t->transposed) return t->file->view(*t->entry);
    TensorData d = read_tensor(*t);
    copies_.push_back(std::move(d.owned));
    return d.view;
  }

  // The copies require() made since the last call, as one owner (null when none).
  std::shared_ptr<const void> take_copies() const {
    if (copies_.empty()) return nullptr;
    auto owner = std::make_shared<std::vector<std::shared_ptr<const void>>>(std::move(copies_));
    copies_.clear();
    return owner;
  }

  [[noreturn]] void mismatch(const std::string& name, const TensorView& v,
                             const std::string& expected) const {
    fail("{}: tensor '{}' is {} {}, expected {}", label_, name, dtype_name(v.dtype),
         shape_str(v.shape), expected);
  }

  // A float vector of `n` elements (norms, biases, pre_quant_scale).
  std::vector<float> vector(const std::string& name, int64_t n) const {
    const TensorView v = require(name, "needed by the model");
    if (!is_quantizable_float(v.dtype) || v.numel() != n)
      mismatch(name, v, fmt::format("F32/F16/BF16 [{}]", n));
    return to_f32(v);
  }

  // A float scalar stored as [] or [1] in F32/BF16/F16 (input_scale, k_scale, ...).
  float scalar(const std::string& name, const std::string& why) const {
    const TensorView v = require(name, why);
    if (!is_quantizable_float(v.dtype) || v.numel() != 1 || v.shape.size() > 1)
      mismatch(name, v, fmt::format("F32/BF16/F16 [] or [1] ({})", why));
    return to_f32(v)[0];
  }

  static std::vector<float> to_f32(const TensorView& v) {
    std::vector<float> out(size_t(v.numel()));
    for (int64_t i = 0; i < v.numel(); ++i) {
      switch (v.dtype) {
        case DType::F32: {
          float f;
          std::memcpy(&f, v.data + 4 * i, 4);
          out[size_t(i)] = f;
          break;
        }
        case DType::F16:
        case DType::BF16: {
          uint16_t h;
          std::memcpy(&h, v.data + 2 * i, 2);
          out[size_t(i)] = v.dtype == DType::F16 ? f16_to_f32(h) : bf16_to_f32(h);
          break;
        }
        default: break;
      }
    }
    return out;
  }

  // A float weight [rows, cols], a view of the mapping. `linear`: it is a Linear's weight, which
  // may be stored transposed (gpt-oss experts: the kernels read LinearWeight::transposed in
  // place, so the engine holds no copy of them).
  LinearWeight float_weight(const std::string& name, int64_t rows, int64_t cols,
                            const std::string& why, bool linear = false) const {
    const CheckpointTensor* t = ck_.find(name);
    if (!t) fail("{}: tensor '{}' missing ({})", label_, name, why);
    if (t->transposed && !linear)
      fail("{}: tensor '{}' is stored transposed, which the {} cannot be", label_, name, why);
    const TensorView v = t->file->view(*t->entry);
    if (!is_quantizable_float(v.dtype) || v.shape != Shape{rows, cols})
      mismatch(name, v, fmt::format("F32/F16/BF16 [{}, {}] ({})", rows, cols, why));
    LinearWeight w;
    w.format = v.dtype == DType::F32 ? WeightFormat::f32
               : v.dtype == DType::F16 ? WeightFormat::f16 : WeightFormat::bf16;
    w.rows = rows;
    w.cols = cols;
    w.data = v.data;
    w.transposed = t->transposed;
    return w;
  }

  // Checks dtype and shape of a quantized tensor.
  TensorView expect(const std::string& name, std::initializer_list<DType> dtypes, const Shape& shape,
                    const std::string& what) const {
    const TensorView v = require(name, what);
    bool ok = v.shape == shape;
    bool dt = false;
    for (DType d : dtypes) dt |= v.dtype == d;
    if (!ok || !dt) {
      std::string names;
      for (DType d : dtypes) {
        if (!names.empty()) names += '/';
        names += dtype_name(d);
      }
      mismatch(name, v, fmt::format("{} {} ({})", names, shape_str(shape), what));
    }
    return v;
  }

  // Per-row or per-group scales as float32, whatever float dtype they are stored in.
  std::shared_ptr<std::vector<float>> scales(const TensorView& v) const {
    return std::make_shared<std::vector<float>>(to_f32(v));
  }

  // `bias`: the spec says the module has one ([rows], required); otherwise a stored bias is an
  // error, since config.json says the model does not use it.
  EngineLinear linear(const std::string& module, int64_t rows, int64_t cols,
                      const QuantScheme& scheme, bool bias, bool must_float = false) const {
    const QuantScheme s = scheme.for_module(module);
    EngineLinear L;
    L.name = module;
    const bool quantized = s.quantizes() && !must_float && !s.ignored(module);
    const std::string what =
        quantized ? fmt::format("the quantization config makes {} {} {}", module,
                                target_->display_name(), s.algo)
                  : "not quantized";
    StoredLinear st;
    if (!quantized) {
      for (const std::string& leaf : quantized_marker_leaves())
        if (find(module + "." + leaf))
          fail("{}: tensor '{}.weight_scale' present but the quantization config does not "
               "quantize '{}'", label_, module, module);
      L.w = float_weight(module + ".weight", rows, cols, what, true);
    } else {
      st = target_->stored_linear(module, s);
      if (st.layout == WeightFormat::int8) int8_weight(L, st, rows, cols, what);
      else L.w = quantized_weight(module, st, rows, cols, s, what);
      L.storage = take_copies();
    }
    if (bias) {
      L.bias = vector(module + ".bias", rows);
    } else if (find(module + ".bias")) {
      fail("{}: tensor '{}.bias' present but config.json gives '{}' no bias (attention_bias / "
           "mlp_bias)", label_, module, module);
    }
    for (const std::string& leaf : pre_scale_leaves())
      if (const std::string pname = module + "." + leaf; L.pre_scale.empty() && find(pname))
        L.pre_scale = vector(pname, cols);
    if (quantized && !st.input_scale.empty()) {
      const std::string& iname = st.input_scale;
      if (find(iname)) {
        L.input_scale = to_engine(scalar(iname, what), st.input_scale_stored);
        if (!std::isfinite(L.input_scale) || L.input_scale <= 0)
          fail("{}: tensor '{}' is not a positive finite scale", label_, iname);
        L.act = s.act;
      } else if (!st.input_scale_optional) {
        fail("{}: tensor '{}' missing ({})", label_, iname, what);
      }
    }
    return L;
  }

 private:
  static float to_engine(float stored, ScaleStored how) {
    return how == ScaleStored::reciprocal ? 1.0f / stored : stored;
  }

  // INT8 per-channel (SmoothQuant W8A8): the codes are used as stored (INT8 kernels); the row
  // scales ([out] or [out, 1], any float dtype) become float32.
  void int8_weight(EngineLinear& L, const StoredLinear& st, int64_t rows, int64_t cols,
                   const std::string& what) const {
    const TensorView q = expect(st.weight, {DType::I8}, {rows, cols}, what);
    const std::string& sname = st.weight_scale;
    const TensorView sv = require(sname, what);
    if (!is_quantizable_float(sv.dtype) || sv.numel() != rows ||
        !(sv.shape == Shape{rows} || sv.shape == Shape{rows, 1}))
      mismatch(sname, sv, fmt::format("F32/BF16/F16 [{}] or [{}, 1] ({})", rows, rows, what));
    L.w = LinearWeight{};
    L.w.format = WeightFormat::int8;
    L.w.rows = rows;
    L.w.cols = cols;
    L.w.data = q.data;
    L.w.owned_scales = scales(sv);
    L.w.scales = L.w.owned_scales->data();
  }

  LinearWeight quantized_weight(const std::string& m, const StoredLinear& st, int64_t rows,
                                int64_t cols, const QuantScheme& s, const std::string& what) const {
    const std::string& wname = st.weight;
    LinearWeight w;
    w.rows = rows;
    w.cols = cols;
    w.format = st.layout;
    auto need_div = [&](int64_t block) {
      if (cols % block != 0)
        fail("{}: module '{}': in_features {} is not a multiple of the block {} ({})", label_, m,
             cols, block, what);
    };
    switch (st.layout) {
      case WeightFormat::nvfp4: {
        need_div(16);
        w.data = expect(wname, {DType::U8}, {rows, cols / 2}, what).data;
        w.block_scales = reinterpret_cast<const uint8_t*>(
            expect(st.weight_scale, {DType::F8_E4M3}, {rows, cols / 16}, what).data);
        const std::string& gname = st.global_scale;
        const TensorView g = require(gname, what);
        if (g.dtype != DType::F32 || g.numel() != 1 || g.shape.size() > 1)
          mismatch(gname, g, fmt::format("F32 [] or [1] ({})", what));
        float gv;
        std::memcpy(&gv, g.data, 4);
        w.global_scale = to_engine(gv, st.global_scale_stored);
        if (!std::isfinite(w.global_scale) || w.global_scale <= 0)
          fail("{}: tensor '{}' holds {}, not a positive finite scale", label_, gname, gv);
        break;
      }
      case WeightFormat::mxfp4: {
        need_div(32);
        w.data = expect(wname, {DType::U8}, {rows, cols / 2}, what).data;
        w.block_scales = reinterpret_cast<const uint8_t*>(
            expect(st.weight_scale, {DType::U8}, {rows, cols / 32}, what).data);
        break;
      }
      case WeightFormat::fp8: {
        w.data = expect(wname, {DType::F8_E4M3}, {rows, cols}, what).data;
        const std::string& sname = st.weight_scale;
        const TensorView sv = require(sname, what);
        const bool per_row = sv.numel() == rows && (sv.shape == Shape{rows} ||
                                                    sv.shape == Shape{rows, 1});
        const bool per_tensor = sv.numel() == 1 && sv.shape.size() <= 1;
        if (!is_quantizable_float(sv.dtype) || !(per_row || per_tensor))
          mismatch(sname, sv, fmt::format("F32/BF16/F16 [{}] or [{}, 1] ({})", rows, rows, what));
        auto sc = scales(sv);
        if (per_tensor) sc->assign(size_t(rows), (*sc)[0]);
        w.owned_scales = sc;
        w.scales = sc->data();
        break;
      }
      case WeightFormat::int4_packed32:
      case WeightFormat::int4_row_pairs: {
        const bool words = st.layout == WeightFormat::int4_packed32;
        if (words) {
          if (cols % 8) need_div(8);
          w.data = expect(wname, {DType::I32}, {rows, cols / 8}, what).data;
        } else {
          if (rows % 2)
            fail("{}: module '{}': out_features {} is odd; INT4 row pairs need it even", label_, m,
                 rows);
          w.data = expect(wname, {DType::U8}, {rows / 2, cols}, what).data;
        }
        const std::string& sname = st.weight_scale;
        const TensorView sv = require(sname, what);
        if (!is_quantizable_float(sv.dtype) || sv.shape.size() != 2 || sv.shape[0] != rows ||
            sv.shape[1] <= 0 || cols % sv.shape[1] != 0)
          mismatch(sname, sv, fmt::format("F32/BF16/F16 [{}, {}/group] ({})", rows, cols, what));
        w.group = int(cols / sv.shape[1]);
        if (s.group > 0 && w.group != s.group)
          mismatch(sname, sv, fmt::format("[{}, {}] for the config's group_size {} ({})", rows,
                                          cols / s.group, s.group, what));
        // A 32-bit word of codes must not straddle two groups.
        if (words && w.group % 8 != 0)
          mismatch(sname, sv, fmt::format("a group that is a multiple of 8 ({})", what));
        auto sc = scales(sv);
        w.owned_scales = sc;
        w.scales = sc->data();
        break;
      }
      default:
        fail("{}: module '{}': the target describes layout {} that has no loader", label_, m,
             int(st.layout));
    }
    return w;
  }

  const Checkpoint& ck_;
  std::string label_;
  const TargetReader* target_;
  mutable std::vector<std::shared_ptr<const void>> copies_;  // see require()
};

}  // namespace

std::optional<DType> float_weight_dtype(WeightFormat f) {
  switch (f) {
    case WeightFormat::f32: return DType::F32;
    case WeightFormat::f16: return DType::F16;
    case WeightFormat::bf16: return DType::BF16;
    default: return std::nullopt;
  }
}

void EmbeddingView::row(int64_t id, float* out) const {
  if (blocks.data) return dequantize_weight_rows(blocks, id, 1, out);
  const auto* base = static_cast<const uint8_t*>(data);
  for (int64_t c = 0; c < cols; ++c) {
    switch (dtype) {
      case DType::F32: std::memcpy(out + c, base + 4 * (id * cols + c), 4); break;
      case DType::F16:
      case DType::BF16: {
        uint16_t h;
        std::memcpy(&h, base + 2 * (id * cols + c), 2);
        out[c] = dtype == DType::F16 ? f16_to_f32(h) : bf16_to_f32(h);
        break;
      }
      default: out[c] = 0.f; break;
    }
  }
}

uint64_t ModelWeights::weight_bytes_per_token() const {
  uint64_t n = lm_head.w.stored_bytes();
  for (size_t i = 0; i < layers.size(); ++i) {
    const LayerWeights& l = layers[i];
    const LayerSpec& spec = arch.layers[i];
    if (!spec.is_moe) {
      for (const EngineLinear& L : l.linears) n += L.w.stored_bytes();
      continue;
    }
    uint64_t routed = 0;
    for (size_t s = 0; s < l.linears.size(); ++s) {
      const uint64_t b = l.linears[s].w.stored_bytes();
      if (arch.linears[spec.linears[s]].expert >= 0) routed += b;
      else n += b;
    }
    n += routed / uint64_t(spec.moe.num_experts) * uint64_t(spec.moe.top_k);
    n += l.router.w.stored_bytes() + l.shared_gate.w.stored_bytes();
  }
  return n;
}

ModelWeights ModelWeights::load(const std::filesystem::path& dir) {
  if (is_gguf_file(dir)) return load_gguf(dir);
  return load(open_model_checkpoint(dir));
}

ModelWeights ModelWeights::load(std::shared_ptr<const Checkpoint> checkpoint) {
  ModelWeights mw;
  mw.checkpoint = std::move(checkpoint);
  const Checkpoint& ck = *mw.checkpoint;
  const std::string label = ck.dir().string();
  mw.arch = checkpoint_architecture(ck, label + "/config.json");
  const Architecture& a = mw.arch;
  const DetectedTarget target = detect_target(ck, label);
  const QuantScheme& scheme = target.scheme;
  mw.quantization = !scheme.quantizes() ? "none"
                    : fmt::format("{} {}", target.reader->name(), scheme.algo);
  Loader ld(ck, label, target.reader);

  // Embedding and output head: stored once and shared when the embeddings are tied.
  std::string embed_name = a.embed_name;
  std::string head_name = a.head_name;
  if (!ld.find(embed_name) && ld.find(head_name) && a.tie_word_embeddings) embed_name = head_name;
  if (!ld.find(head_name) && a.tie_word_embeddings) head_name = embed_name;
  const LinearWeight embed =
      ld.float_weight(embed_name, a.vocab_size, a.hidden_size, "token embedding");
  mw.embed.dtype = *float_weight_dtype(embed.format);
  mw.embed.data = embed.data;
  mw.embed.rows = a.vocab_size;
  mw.embed.cols = a.hidden_size;
  if (head_name == a.head_name && ld.find(a.head_module + ".weight_scale")) {
    mw.lm_head = ld.linear(a.head_module, a.vocab_size, a.hidden_size, scheme, false);
  } else {
    mw.lm_head.name = a.head_module;
    mw.lm_head.w = ld.float_weight(head_name, a.vocab_size, a.hidden_size, "output head");
  }
  // Norm weights hold the multiplier the engine applies: Gemma's x * (1 + w) becomes 1 + w.
  auto norm = [&](const std::string& name, int64_t n) {
    std::vector<float> w = ld.vector(name, n);
    if (a.norm_style == NormStyle::one_plus)
      for (float& v : w) v = 1.0f + v;
    return w;
  };
  mw.final_norm = norm(a.final_norm_name, a.hidden_size);

  // Only the layers the config names are read: DeepSeek-V3's multi-token-prediction layer
  // (model.layers.<num_hidden_layers>.*) is not part of the model.
  for (int64_t l = 0; l < a.num_layers; ++l) {
    const LayerSpec& spec = a.layers[size_t(l)];
    LayerWeights L;
    for (int s = 0; s < kNormSlots; ++s) {
      const NormSlot slot = NormSlot(s);
      if (spec.has(slot)) L.norms[size_t(s)] = norm(spec.norm(slot), a.norm_size(slot));
    }
    for (size_t i : spec.linears) {
      const LinearModule& m = a.linears[i];
      L.linears.push_back(ld.linear(m.name, m.out_features, m.in_features, scheme, m.bias));
    }
    if (spec.is_moe) {
      L.router = ld.linear(spec.moe.router, spec.moe.num_experts, a.hidden_size, scheme,
                           spec.moe.router_bias, /*must_float=*/true);
      if (!spec.moe.shared_gate.empty())
        L.shared_gate = ld.linear(spec.moe.shared_gate, 1, a.hidden_size, scheme, false, true);
      if (!spec.moe.score_bias.empty())
        L.score_bias = ld.vector(spec.moe.score_bias, spec.moe.num_experts);
    }
    if (!spec.sinks.empty()) L.sinks = ld.vector(spec.sinks, a.num_heads);
    if (spec.is_mamba) {
      const MambaSpec& m = a.mamba;
      const MambaTensors& t = spec.mamba;
      L.mamba.conv_weight = ld.vector(t.conv_weight, m.conv_dim() * m.conv_kernel);
      if (!t.conv_bias.empty()) L.mamba.conv_bias = ld.vector(t.conv_bias, m.conv_dim());
      L.mamba.dt_bias = ld.vector(t.dt_bias, m.heads);
      L.mamba.a = ld.vector(t.a_log, m.heads);
      for (float& v : L.mamba.a) v = -std::exp(v);  // vLLM's loader stores A the same way
      L.mamba.d = ld.vector(t.d, m.heads);
      L.mamba.norm = ld.vector(t.norm, m.inner());
    }
    if (scheme.kv_fp8 && spec.slot_of(LinearRole::k_proj) >= 0) {
      // Named after the projections the exporter writes them with, wherever the target puts them.
      const std::string kn =
          target.reader->kv_scale_name(L.linear(spec, LinearRole::k_proj).name, 'k');
      const std::string vn =
          target.reader->kv_scale_name(L.linear(spec, LinearRole::v_proj).name, 'v');
      // Cast mode writes no scales: engines then use 1.0 (§6.2).
      L.k_scale = ld.find(kn) ? ld.scalar(kn, "FP8 KV cache") : 1.f;
      L.v_scale = ld.find(vn) ? ld.scalar(vn, "FP8 KV cache") : 1.f;
      if (!(L.k_scale > 0) || !(L.v_scale > 0) || !std::isfinite(L.k_scale) ||
          !std::isfinite(L.v_scale))
        fail("{}: layer {}: k_scale/v_scale must be positive and finite", label, l);
    }
    mw.layers.push_back(std::move(L));
  }
  return mw;
}

void ModelWeights::move_to_huge_pages(bool release_file_pages, uint64_t min_bytes) {
  // NVFP4, MXFP4 and INT4 on CPUs with the AVX-512 VNNI + VBMI kernel: repacked 16 rows at a
  // time, codes and scales in one copy (kernels/q4_rows16.h; one stream instead of a row's codes
  // and its scales), every size of them. A layer's repacked weights share one allocation: codes
  // plus scales are 9/8 or 17/16 of a power of two in most models, so one 2 MB-page allocation
  // each would leave most of a page unused per weight (Llama-1B: +104 MB resident); per layer
  // the rest of at most one page. On 2 MB pages from min_bytes up, smaller ones in ordinary
  // memory. The stored codes and scales are no longer read: the file's pages or the old copy are
  // let go.
  auto repack = [&](const std::vector<EngineLinear*>& Ls) {
    if (Ls.empty()) return;
    std::vector<uint64_t> at;
    uint64_t total = 0;
    for (const EngineLinear* L : Ls) {
      at.push_back(total);
      total += (kernels::q4_rows16_bytes(L->w) + 63) / 64 * 64;
    }
    auto fill = [&](void* dst) {
      for (size_t i = 0; i < Ls.size(); ++i)
        kernels::q4_repack_rows16(Ls[i]->w, static_cast<uint8_t*>(dst) + at[i]);
    };
    std::shared_ptr<const void> copy;
    if (total >= min_bytes) {
      copy = fill_huge_pages(size_t(total), fill);
    } else {
      void* m = std::aligned_alloc(64, size_t(total));
      if (m == nullptr) fail("cannot allocate {} bytes for the weights (out of memory)", total);
      fill(m);
      copy = std::shared_ptr<const void>(m, [](const void* p) { std::free(const_cast<void*>(p)); });
    }
    for (size_t i = 0; i < Ls.size(); ++i) {
      EngineLinear& L = *Ls[i];
      const LinearWeight stored = L.w;
      const void* mine = static_cast<const uint8_t*>(copy.get()) + at[i];
      L.w = kernels::q4_rows16_weight(stored, mine);
      if (!L.storage && release_file_pages) {
        const uint64_t codes = uint64_t(stored.rows) * uint64_t(stored.cols) / 2;
        const size_t scales = size_t(kernels::q4_rows16_bytes(stored) - codes);
        release_mapped_pages(stored.data, size_t(codes));
        if (stored.block_scales) release_mapped_pages(stored.block_scales, scales);
        // INT4 scales converted from BF16/F16 are owned (freed with `stored`), F32 ones mapped.
        if (stored.scales && !stored.owned_scales) release_mapped_pages(stored.scales, scales);
      }
      L.storage = std::shared_ptr<const void>(copy, mine);
    }
  };
  auto move = [&](EngineLinear& L) {
    // Repacked GGUF Q4_0 rows are already a copy on 2 MB pages (engine/gguf_weights.cpp).
    if (L.w.transposed || !L.w.data || L.w.ggml_rows8) return;
    const uint64_t n = L.w.data_bytes();
    if (n < min_bytes) return;
    const void* from = L.w.data;
    std::shared_ptr<const void> copy = copy_to_huge_pages(from, size_t(n));
    L.w.data = copy.get();
    if (!L.storage) {
      L.storage = std::move(copy);
      if (release_file_pages) release_mapped_pages(from, size_t(n));
    } else {
      // The old owner may also hold other parts (scales copied with the codes): keep it too.
      auto both = std::make_shared<std::pair<std::shared_ptr<const void>, std::shared_ptr<const void>>>(
          std::move(L.storage), copy);
      L.storage = std::shared_ptr<const void>(both, copy.get());
    }
  };
  // The head first, while little else is resident: its file pages and its copy coexist until
  // the copy is done, and it is the largest weight (Llama-1B NVFP4, head quantized: peak RSS
  // 878 -> 764 MB).
  if (kernels::q4_rows16_wanted(lm_head.w)) repack({&lm_head});
  else move(lm_head);
  for (LayerWeights& layer : layers) {
    std::vector<EngineLinear*> q4;
    for (EngineLinear& L : layer.linears)
      if (kernels::q4_rows16_wanted(L.w)) q4.push_back(&L);
      else move(L);
    repack(q4);
  }
}

}  // namespace qf

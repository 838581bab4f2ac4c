// `quantize --export gguf`: plan every tensor (name, type, shape), write the metadata, then
// stream the tensors (see the header).
#include "pipeline/gguf_output.h"

#include "core/convert.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "io/gguf_file.h"
#include "io/gguf_vocab.h"
#include "io/gguf_writer.h"
#include "model/gguf_llama_layout.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <optional>

namespace fs = std::filesystem;

namespace qf {

namespace {

// One tensor of the output, decided before anything is written.
struct Planned {
  GgufTensorSpec spec;
  const CheckpointTensor* source = nullptr;  // null: `generated`, or else the NVFP4 .scale of
                                             // the tensor before it
  int64_t permute_heads = 0;                 // q/k: heads to reorder rows in (0: none)
  std::string note;
  std::vector<float> generated;              // F32 data made here (rope_freqs)
};

// Refuses what llama.cpp's llama graph would compute differently from the checkpoint.
void require_llama(const SourceModel& model) {
  const Architecture& a = model.arch;
  const std::string cfg = (model.dir / "config.json").string();
  if (a.model_type != "llama")
    fail("{}: model_type '{}': --export gguf writes the llama family only", cfg, a.model_type);
  if (a.has_moe()) fail("{}: mixture of experts: --export gguf writes dense llama only", cfg);
  for (const LinearModule& m : a.linears)
    if (m.bias)
      fail("{}: {} has a bias (attention_bias / mlp_bias): --export gguf does not write biases",
           cfg, m.name);
  for (const RopeSpec& r : a.ropes) {
    if (r.type != RopeType::default_ && r.type != RopeType::linear && r.type != RopeType::llama3)
      fail("{}: rope_scaling type '{}': --export gguf writes default, linear and llama3 RoPE only",
           cfg, rope_type_name(r.type));
    if (r.rotary_dim != r.head_dim)
      fail("{}: partial rotary ({} of {} dimensions): llama.cpp's llama needs all", cfg,
           r.rotary_dim, r.head_dim);
  }
}

void add_model_metadata(const SourceModel& model, const GgufFileType& ft, GgufMetadata& m) {
  const Architecture& a = model.arch;
  m.set_string("general.architecture", "llama");
  m.set_string("general.name", model.dir.filename().string());
  m.set_u32("general.file_type", ft.llama_ftype);
  m.set_u32("general.quantization_version", 2);
  m.set_u32("general.alignment", kGgufDefaultAlignment);
  m.set_u32("llama.context_length", uint32_t(a.max_position_embeddings));
  m.set_u32("llama.embedding_length", uint32_t(a.hidden_size));
  m.set_u32("llama.block_count", uint32_t(a.num_layers));
  m.set_u32("llama.feed_forward_length", uint32_t(a.intermediate_size));
  m.set_u32("llama.attention.head_count", uint32_t(a.num_heads));
  m.set_u32("llama.attention.head_count_kv", uint32_t(a.num_kv_heads));
  m.set_u32("llama.attention.key_length", uint32_t(a.head_dim));
  m.set_u32("llama.attention.value_length", uint32_t(a.head_dim));
  m.set_f32("llama.attention.layer_norm_rms_epsilon", float(a.rms_norm_eps));
  m.set_u32("llama.vocab_size", uint32_t(a.vocab_size));
  const RopeSpec& rope = a.ropes.at(0);
  m.set_f32("llama.rope.freq_base", float(rope.theta));
  m.set_u32("llama.rope.dimension_count", uint32_t(rope.head_dim));
  if (rope.type == RopeType::linear) {
    m.set_string("llama.rope.scaling.type", "linear");
    m.set_f32("llama.rope.scaling.factor", float(rope.factor));
  }
}

GgufTensorRole role_of(LinearRole r) {
  switch (r) {
    case LinearRole::q_proj: return GgufTensorRole::attn_q;
    case LinearRole::k_proj: return GgufTensorRole::attn_k;
    case LinearRole::v_proj: return GgufTensorRole::attn_v;
    case LinearRole::o_proj: return GgufTensorRole::attn_output;
    case LinearRole::gate_proj: return GgufTensorRole::ffn_gate;
    case LinearRole::up_proj: return GgufTensorRole::ffn_up;
    default: return GgufTensorRole::ffn_down;
  }
}

bool is_quantized_type(GgmlType t) {
  return t != GgmlType::F32 && t != GgmlType::F16 && t != GgmlType::BF16;
}

const CheckpointTensor& require_tensor(const SourceModel& model, const std::string& name) {
  const CheckpointTensor* t = model.checkpoint->find(name);
  if (!t) fail("{}: tensor {} not found", model.dir.string(), name);
  return *t;
}

std::vector<Planned> plan_tensors(const SourceModel& model, const GgufFileType& ft) {
  const Architecture& a = model.arch;
  std::vector<Planned> out;
  const int n_layers = int(a.num_layers);
  const CheckpointTensor* head = a.tie_word_embeddings ? nullptr : model.checkpoint->find(a.head_name);
  const bool tied = head == nullptr;
  auto add_matrix = [&](std::string name, const CheckpointTensor& src, GgufTensorRole role,
                        int layer, int64_t permute_heads) {
    const Shape& s = src.entry->shape;
    if (s.size() != 2) fail("{}: {} is not 2-D", model.dir.string(), src.name);
    const GgufTypeChoice c = choose_gguf_type(ft, role, layer, n_layers, s[1], tied);
    out.push_back({{name, c.type, {s[1], s[0]}}, &src, permute_heads, c.note, {}});
    if (c.type == GgmlType::NVFP4) {
      std::string scale = name.substr(0, name.size() - std::string_view(".weight").size()) + ".scale";
      out.push_back({{scale, GgmlType::F32, {1}}, nullptr, 0, "NVFP4 tensor scale (weight_scale_2)", {}});
    }
  };
  auto add_vector = [&](std::string name, const std::string& src) {
    const CheckpointTensor& t = require_tensor(model, src);
    out.push_back({{std::move(name), GgmlType::F32, {t.entry->shape.back()}}, &t, 0, "", {}});
  };
  add_matrix("token_embd.weight", require_tensor(model, a.embed_name), GgufTensorRole::token_embd,
             0, 0);
  add_vector("output_norm.weight", a.final_norm_name);
  if (a.ropes.at(0).type == RopeType::llama3) {
    // Llama 3.1+: the per-frequency divisors as convert_hf_to_gguf writes them.
    std::vector<float> f = a.ropes[0].llama3_freq_factors();
    const int64_t n = int64_t(f.size());
    out.push_back({{"rope_freqs.weight", GgmlType::F32, {n}}, nullptr, 0,
                   "llama3 RoPE frequency factors", std::move(f)});
  }
  if (head) add_matrix("output.weight", *head, GgufTensorRole::output, n_layers - 1, 0);
  for (int l = 0; l < n_layers; ++l) {
    const LayerSpec& spec = a.layers[size_t(l)];
    add_vector(fmt::format("blk.{}.attn_norm.weight", l), spec.norm(NormSlot::attn_in));
    add_vector(fmt::format("blk.{}.ffn_norm.weight", l), spec.norm(NormSlot::mlp_in));
    for (size_t li : spec.linears) {
      const LinearModule& m = a.linears[li];
      const int64_t heads = m.role == LinearRole::q_proj   ? a.num_heads
                            : m.role == LinearRole::k_proj ? a.num_kv_heads
                                                           : 0;
      add_matrix(gguf_llama_linear_name(m), require_tensor(model, m.weight_name()),
                 role_of(m.role), l, heads);
    }
  }
  return out;
}

// A GGUF input's tokenizer.* metadata, copied key by key as it is (vocabulary, scores, types,
// merges, specials, chat template): the input's tokenizer is the one llama.cpp already reads.
std::string copy_gguf_tokenizer(const GgufFile& in, GgufMetadata& m) {
  std::string model = "?";
  int64_t tokens = 0;
  for (const GgufKv& kv : in.metadata()) {
    if (!kv.key.starts_with("tokenizer.")) continue;
    const GgufValue& v = kv.value;
    if (v.type == GgufType::STRING) {
      m.set_string(kv.key, v.str);
      if (kv.key == "tokenizer.ggml.model") model = std::string(v.str);
    } else if (v.type == GgufType::ARRAY && v.elem == GgufType::STRING) {
      m.set_string_array(kv.key, std::vector<std::string>(v.strings.begin(), v.strings.end()));
      if (kv.key == "tokenizer.ggml.tokens") tokens = int64_t(v.count);
    } else if (v.type == GgufType::ARRAY) {
      m.set_array(kv.key, v.elem, v.count,
                  std::span(v.elems, size_t(v.count * gguf_scalar_size(v.elem))));
    } else {
      // A scalar as a one-element array's bytes would change its type; the typed setters keep it.
      const uint64_t b = v.bits;
      switch (v.type) {
        case GgufType::U8: m.set_u8(kv.key, uint8_t(b)); break;
        case GgufType::I8: m.set_i8(kv.key, int8_t(b)); break;
        case GgufType::U16: m.set_u16(kv.key, uint16_t(b)); break;
        case GgufType::I16: m.set_i16(kv.key, int16_t(b)); break;
        case GgufType::U32: m.set_u32(kv.key, uint32_t(b)); break;
        case GgufType::I32: m.set_i32(kv.key, int32_t(b)); break;
        case GgufType::U64: m.set_u64(kv.key, b); break;
        case GgufType::I64: m.set_i64(kv.key, int64_t(b)); break;
        case GgufType::F32: m.set_f32(kv.key, float(v.as_f64())); break;
        case GgufType::F64: m.set_f64(kv.key, v.as_f64()); break;
        case GgufType::BOOL: m.set_bool(kv.key, b != 0); break;
        default: break;
      }
    }
  }
  return fmt::format("{} ({} metadata, {} tokens, copied)", model, in.path().string(), tokens);
}

std::vector<float> read_floats(const CheckpointTensor& t) {
  const TensorData d = read_tensor(t);
  const DType dt = d.view.dtype;
  if (dt != DType::F32 && dt != DType::F16 && dt != DType::BF16)
    fail("{}: {} is {}: --export gguf reads F32/F16/BF16", t.file ? t.file->path().string() : t.name,
         t.name, dtype_name(dt));
  std::vector<float> x(size_t(d.view.numel()));
  convert_to_f32(dt, d.view.data, x.data(), x.size());
  return x;
}

}  // namespace

GgufReport export_gguf(const SourceModel& model, const fs::path& out,
                       const GgufExportOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  const std::optional<GgufFileType> ft = gguf_file_type(options.format);
  if (!ft) fail("--format {}: not a GGUF type", options.format);
  require_llama(model);
  std::error_code ec;
  if (fs::is_directory(out, ec)) fail("{}: is a directory; -o names the .gguf file", out.string());
  if (fs::exists(out, ec) && !options.force)
    fail("{}: exists (--force replaces it)", out.string());

  GgufReport report;
  report.output = out;
  report.format = std::string(ft->name);
  report.file_type = ft->llama_ftype;
  GgufMetadata meta;
  add_model_metadata(model, *ft, meta);
  const std::vector<Planned> plan = plan_tensors(model, *ft);
  if (model.gguf && model.tokenizer_dir.empty()) {
    report.tokenizer = copy_gguf_tokenizer(*model.gguf, meta);
  } else {
    const fs::path tok_dir = model.tokenizer_dir.empty() ? model.dir : model.tokenizer_dir;
    const GgufVocabInfo vocab =
        add_gguf_vocab(tok_dir, model.tokenizer(), plan.front().spec.ne[1], meta);
    report.tokenizer = fmt::format("{} ({}, {} tokens{})", vocab.model, vocab.source, vocab.tokens,
                                   vocab.padded ? fmt::format(", {} padding", vocab.padded) : "");
  }

  std::unique_ptr<GgufPrecomputed> precomputed;
  if (options.calib) {
    // The blk.* Linears first, one decoder layer at a time; their bytes wait in a spill file.
    std::vector<GgufLinearTarget> targets;
    for (const Planned& p : plan)
      if (p.source && p.spec.name.starts_with("blk.") && is_quantized_type(p.spec.type))
        targets.push_back({p.spec.name, p.spec.type, p.source, p.permute_heads});
    GgufCalibrationOptions co;
    co.calib = *options.calib;
    co.algo = options.algo;
    co.imatrix = options.imatrix;
    co.threads = options.threads;
    co.progress = options.progress;
    set_constant_division(options.scale_division);
    const fs::path spill_dir = out.parent_path().empty() ? fs::path(".") : out.parent_path();
    precomputed = calibrate_gguf(model, targets, co, spill_dir);
    report.algo = options.algo == GgufAlgo::gptq ? "gptq" : "imatrix";
    report.calib_tokens = precomputed->tokens;
    report.calib_seconds = precomputed->seconds;
    for (const auto& w : precomputed->warnings) report.warnings.push_back(w);
  } else if (options.imatrix) {
    report.algo = "imatrix";
  }

  std::vector<GgufTensorSpec> specs;
  for (const Planned& p : plan) specs.push_back(p.spec);
  GgufWriter writer(out, meta, specs);
  ThreadPool pool(options.threads > 0 ? options.threads : ThreadPool::hardware_threads());
  set_constant_division(options.scale_division);
  float pending_scale = 1.f;  // the NVFP4 tensor scale of the tensor just written
  for (const Planned& p : plan) {
    const GgmlTypeInfo& info = ggml_type_info(p.spec.type);
    std::string note = p.note;
    std::vector<uint8_t> bytes(size_t(gguf_tensor_bytes(p.spec, out.string())));
    if (!p.generated.empty()) {
      std::memcpy(bytes.data(), p.generated.data(), bytes.size());
    } else if (!p.source) {
      std::memcpy(bytes.data(), &pending_scale, sizeof(float));
    } else {
      std::vector<float> x = read_floats(*p.source);
      int64_t nonfinite = 0;
      for (float v : x) nonfinite += !std::isfinite(v);
      if (nonfinite > 0) {
        if (p.spec.type != GgmlType::F32 && p.spec.type != GgmlType::F16 &&
            p.spec.type != GgmlType::BF16)
          fail("{}: {} holds {} NaN/Inf values and cannot be quantized", model.dir.string(),
               p.source->name, nonfinite);
        if (!options.allow_nonfinite)
          fail("{}: {} holds {} NaN/Inf values (--allow-nonfinite copies them)",
               model.dir.string(), p.source->name, nonfinite);
        report.warnings.push_back(fmt::format("{}: {} NaN/Inf values copied", p.source->name, nonfinite));
      }
      const int64_t cols = p.spec.ne[0], rows = int64_t(x.size()) / cols;
      if (p.permute_heads > 0)
        gguf_permute_qk_rows(x.data(), p.permute_heads, rows / p.permute_heads, cols);
      const GgufPrecomputed::Entry* pre = precomputed ? precomputed->find(p.spec.name) : nullptr;
      if (pre) {
        bytes = precomputed->bytes(*pre);
        pending_scale = pre->g;
        note = pre->note;
      } else if (is_quantized_type(p.spec.type)) {
        GgufMatrixJob job;
        job.type = p.spec.type;
        job.x = x.data();
        job.rows = rows;
        job.cols = cols;
        const std::vector<float>* imp =
            options.imatrix ? options.imatrix->find(p.spec.name) : nullptr;
        if (imp && int64_t(imp->size()) != cols) {
          if (p.spec.name != "token_embd.weight")
            fail("--imatrix: {} has {} values, {} has rows of {}", p.spec.name, imp->size(),
                 p.source->name, cols);
          imp = nullptr;  // llama-quantize skips the embedding's mismatch too
        }
        if (imp) {
          job.importance = imp->data();
          // Q8_0's quantizer ignores it (as ggml's): not counted as applied.
          if (p.spec.type != GgmlType::Q8_0) ++report.imatrix_entries;
        }
        if (p.spec.type == GgmlType::NVFP4)
          job.g = gguf_nvfp4_tensor_scale(x.data(), int64_t(x.size()));
        note = quantize_gguf_matrix(job, bytes.data(), pool);
        pending_scale = job.g;
      } else {
        info.quantize(x.data(), bytes.data(), int64_t(x.size()));
      }
    }
    writer.write(p.spec.name, std::as_bytes(std::span(bytes)));
    report.tensors.push_back({p.spec.name, std::string(info.name), p.spec.ne, bytes.size(),
                              note.empty() || note == p.note ? p.note
                              : p.note.empty()               ? note
                                                             : p.note + "; " + note});
  }
  writer.finish();
  report.bytes_in = model.input_bytes();
  report.bytes_out = fs::file_size(out);
  report.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return report;
}

}  // namespace qf

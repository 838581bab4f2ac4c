#include "model/synthetic_checkpoint.h"

#include "core/convert.h"
#include "core/error.h"
#include "core/progress.h"
#include "core/suggest.h"
#include "core/thread_pool.h"
#include "io/json_file.h"
#include "io/safetensors_writer.h"
#include "io/shard_layout.h"
#include "io/staged_directory.h"
#include "io/synthetic_tokenizer.h"
#include "model/architecture.h"

#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <map>

namespace fs = std::filesystem;

namespace qf {
namespace {

// SplitMix64: a tiny, fast, well-mixed generator, seeded per (tensor, chunk) so that the
// output does not depend on the number of threads.
struct SplitMix64 {
  uint64_t state;
  uint64_t next() {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // Uniform in (0, 1), never 0 or 1: 23 random bits plus a half step are exact in a float.
  float uniform() { return (float(next() >> 41) + 0.5f) * 0x1p-23f; }
};

uint64_t hash_name(const std::string& s, uint64_t seed) {
  uint64_t h = 1469598103934665603ull ^ seed;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

struct SynthTensor {
  TensorSpec spec;
  float scale;   // typical magnitude
  bool is_norm;  // RMSNorm weights: around 1
  float offset = 0.f;  // added to every value (Mamba's dt_bias and A_log sit away from 0)
};

// Fills `out` (n floats) for one chunk of a tensor. Weights are Laplace-distributed (heavier
// tails than Gaussian, like trained LLM weights), with one value in 4096 scaled by 8 as an outlier.
void fill_chunk(const SynthTensor& t, uint64_t seed, int64_t chunk, float* out, size_t n) {
  SplitMix64 rng{hash_name(t.spec.name, seed) ^ (uint64_t(chunk) * 0xD1B54A32D192ED03ull)};
  for (size_t i = 0; i < n; ++i) {
    if (t.is_norm) {
      out[i] = 1.0f + 0.1f * (rng.uniform() - 0.5f);
      continue;
    }
    const float u = rng.uniform();
    const float laplace = u < 0.5f ? std::log(2 * u) : -std::log(2 * (1 - u));
    const bool outlier = (rng.next() & 4095) == 0;
    out[i] = t.offset + t.scale * laplace * (outlier ? 8.f : 1.f);
  }
}

}  // namespace

const std::vector<NamedShape>& named_shapes() {
  static const std::vector<NamedShape> shapes = {
      {"tiny", "a small Llama for demos and tests", 256, 768, 2, 4, 2, 1024, true, 10000.0},
      {"llama-1b", "Llama-3.2-1B", 2048, 8192, 16, 32, 8, 128256, true, 500000.0},
      {"llama-1b-32k", "Llama-3.2-1B's layers, a 32000-token tied vocabulary", 2048, 8192, 16, 32, 8, 32000, true, 500000.0},
      {"llama-3b", "Llama-3.2-3B", 3072, 8192, 28, 24, 8, 128256, true, 500000.0},
      {"llama-8b", "Llama-3.1-8B", 4096, 14336, 32, 32, 8, 128256, false, 500000.0},
      {"llama-70b", "Llama-3.1-70B", 8192, 28672, 80, 64, 8, 128256, false, 500000.0},
      {"tiny-moe", "a small Qwen3-MoE (8 experts, top 2) for demos and tests", 256, 768, 2, 4,
       2, 1024, false, 1000000.0, "qwen3_moe", 8, 2, 128, 64},
      {"qwen3-30b-a3b", "Qwen3-30B-A3B (128 experts, top 8)", 2048, 6144, 48, 32, 4, 151936,
       false, 1000000.0, "qwen3_moe", 128, 8, 768, 128},
      {"mixtral-8x7b", "Mixtral-8x7B (8 experts, top 2)", 4096, 14336, 32, 32, 8, 32000, false,
       1000000.0, "mixtral", 8, 2, 14336, 128},
      {"tiny-deepseek", "a small DeepSeek-V3 (MLA, 8 experts in 4 groups, top 2) for demos and tests",
       256, 768, 3, 4, 4, 1024, false, 10000.0, "deepseek_v3", 8, 2, 128, 0, 96, 64, 32, 16, 32, 4,
       2, 1, 1, 2.5, 4.0},
      {"deepseek-v3", "DeepSeek-V3 (MLA, 256 experts in 8 groups, top 8)", 7168, 18432, 61, 128,
       128, 129280, false, 10000.0, "deepseek_v3", 256, 8, 2048, 0, 1536, 512, 128, 64, 128, 8, 4,
       1, 3, 2.5, 40.0},
      {"gpt-oss-20b", "gpt-oss-20b (32 experts, top 4; the BF16 hub layout)", 2880, 2880, 24, 64, 8,
       201088, false, 150000.0, "gpt_oss", 32, 4, 2880, 64, 0, 0, 0, 0, 0, 1, 1, 0, 0, 1.0, 32.0},
      {.name = "tiny-nemotron-h",
       .description = "a small Nemotron-H (Mamba2, attention, MLP and MoE layers) for demos and tests",
       .hidden = 256, .intermediate = 512, .layers = 6, .heads = 4, .kv_heads = 2, .vocab = 1024,
       .tie_word_embeddings = false, .rope_theta = 0, .model_type = "nemotron_h", .experts = 8,
       .top_k = 2, .expert_intermediate = 128, .head_dim = 64, .routed_scaling_factor = 2.5,
       .hybrid_pattern = "M*M-ME", .mamba_heads = 8, .mamba_head_dim = 32, .ssm_state = 32,
       .mamba_groups = 2, .chunk_size = 64, .shared_intermediate = 256},
      // 52 layers, 23 Mamba2 / 23 MoE / 6 attention (the model card); the exact order of the
      // released pattern is not in ../shared/specs, this one spreads the attention layers.
      {.name = "nemotron-3-nano",
       .description = "Nemotron-3-Nano-30B-A3B (hybrid Mamba2/MoE, 128 experts, top 6)",
       .hidden = 2688, .intermediate = 1856, .layers = 52, .heads = 32, .kv_heads = 2,
       .vocab = 131072, .tie_word_embeddings = false, .rope_theta = 0, .model_type = "nemotron_h",
       .experts = 128, .top_k = 6, .expert_intermediate = 1856, .head_dim = 128,
       .routed_scaling_factor = 2.5,
       .hybrid_pattern = "MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME", .mamba_heads = 64,
       .mamba_head_dim = 64, .ssm_state = 128, .mamba_groups = 8, .chunk_size = 128,
       .shared_intermediate = 3712},
  };
  return shapes;
}

const NamedShape& find_named_shape(const std::string& name) {
  std::vector<std::string> known;
  for (const auto& s : named_shapes()) {
    if (s.name == name) return s;
    known.push_back(s.name);
  }
  fail("{}", unknown_name_message("shape", name, known));
}

SynthReport write_synthetic_checkpoint(const fs::path& out_dir, const SynthOptions& o) {
  const auto start = std::chrono::steady_clock::now();
  const NamedShape& shape = find_named_shape(o.shape);
  if (!is_quantizable_float(o.dtype)) fail("--dtype must be f32, f16 or bf16");
  const int64_t layers = o.layers > 0 ? o.layers : shape.layers;
  const std::string& family = shape.model_type;
  const bool deepseek = family == "deepseek_v3";
  const bool gpt_oss = family == "gpt_oss";
  const bool nemotron = family == "nemotron_h";
  if (nemotron && layers > int64_t(shape.hybrid_pattern.size()))
    fail("--layers {}: the {} pattern has {} layers", layers, shape.name, shape.hybrid_pattern.size());
  // DeepSeek-V3's config.json says head_dim = qk_rope_head_dim (transformers derives it so).
  const int64_t head_dim = deepseek             ? shape.qk_rope_head_dim
                           : shape.head_dim > 0 ? shape.head_dim
                                                : shape.hidden / shape.heads;

  nlohmann::ordered_json config;
  config["architectures"] = {family == "qwen3_moe"   ? "Qwen3MoeForCausalLM"
                             : family == "mixtral"   ? "MixtralForCausalLM"
                             : deepseek              ? "DeepseekV3ForCausalLM"
                             : gpt_oss               ? "GptOssForCausalLM"
                             : nemotron              ? "NemotronHForCausalLM"
                                                     : "LlamaForCausalLM"};
  config["model_type"] = family;
  config["hidden_size"] = shape.hidden;
  config["intermediate_size"] = shape.intermediate;
  config["num_hidden_layers"] = layers;
  config["num_attention_heads"] = shape.heads;
  config["num_key_value_heads"] = shape.kv_heads;
  config["head_dim"] = head_dim;
  config["vocab_size"] = shape.vocab;
  config["max_position_embeddings"] =
      deepseek ? int64_t(4096 * shape.yarn_factor) : int64_t(131072);
  config["rms_norm_eps"] = deepseek ? 1e-6 : 1e-5;
  config["rope_theta"] = shape.rope_theta;
  if (gpt_oss)  // as openai/gpt-oss-20b's config.json
    config["rope_scaling"] = {{"beta_fast", 32.0}, {"beta_slow", 1.0},
                              {"factor", shape.yarn_factor},
                              {"original_max_position_embeddings", 4096},
                              {"rope_type", "yarn"}, {"truncate", false}};
  if (deepseek && shape.yarn_factor > 1)
    config["rope_scaling"] = {{"beta_fast", 32},  {"beta_slow", 1},
                              {"factor", shape.yarn_factor},
                              {"mscale", 1.0},    {"mscale_all_dim", 1.0},
                              {"original_max_position_embeddings", 4096},
                              {"type", "yarn"}};
  config["hidden_act"] = "silu";
  config["tie_word_embeddings"] = shape.tie_word_embeddings;
  config["attention_bias"] = gpt_oss;
  if (family == "llama") config["mlp_bias"] = false;
  if (family == "qwen3_moe") {
    config["num_experts"] = shape.experts;
    config["num_experts_per_tok"] = shape.top_k;
    config["moe_intermediate_size"] = shape.expert_intermediate;
    config["norm_topk_prob"] = true;
    config["decoder_sparse_step"] = 1;
    config["mlp_only_layers"] = nlohmann::ordered_json::array();
  } else if (family == "mixtral") {
    config["num_local_experts"] = shape.experts;
    config["num_experts_per_tok"] = shape.top_k;
  } else if (deepseek) {
    config["q_lora_rank"] = shape.q_lora_rank;
    config["kv_lora_rank"] = shape.kv_lora_rank;
    config["qk_nope_head_dim"] = shape.qk_nope_head_dim;
    config["qk_rope_head_dim"] = shape.qk_rope_head_dim;
    config["v_head_dim"] = shape.v_head_dim;
    config["rope_interleave"] = true;
    config["n_routed_experts"] = shape.experts;
    config["num_experts_per_tok"] = shape.top_k;
    config["moe_intermediate_size"] = shape.expert_intermediate;
    config["n_shared_experts"] = shape.shared_experts;
    config["n_group"] = shape.n_group;
    config["topk_group"] = shape.topk_group;
    config["routed_scaling_factor"] = shape.routed_scaling_factor;
    config["norm_topk_prob"] = true;
    config["first_k_dense_replace"] = shape.first_k_dense;
    config["scoring_func"] = "sigmoid";
    config["topk_method"] = "noaux_tc";
  } else if (gpt_oss) {
    config["num_local_experts"] = shape.experts;
    config["num_experts_per_tok"] = shape.top_k;
    config["experts_per_token"] = shape.top_k;
    config["sliding_window"] = 128;
    auto types = nlohmann::ordered_json::array();
    for (int64_t l = 0; l < layers; ++l)
      types.push_back(l % 2 == 0 ? "sliding_attention" : "full_attention");
    config["layer_types"] = types;
    config["swiglu_limit"] = 7.0;
  }
  if (nemotron) {
    // NemotronHConfig's keys (transformers 5.24); the Llama keys above that it does not read
    // are removed.
    for (const char* key : {"rms_norm_eps", "rope_theta", "hidden_act", "attention_bias"})
      config.erase(key);
    config["hybrid_override_pattern"] = shape.hybrid_pattern.substr(0, size_t(layers));
    config["max_position_embeddings"] = 262144;
    config["layer_norm_epsilon"] = 1e-5;
    config["mlp_hidden_act"] = "relu2";
    config["mlp_bias"] = false;
    config["use_bias"] = false;
    config["mamba_num_heads"] = shape.mamba_heads;
    config["mamba_head_dim"] = shape.mamba_head_dim;
    config["ssm_state_size"] = shape.ssm_state;
    config["n_groups"] = shape.mamba_groups;
    config["conv_kernel"] = shape.conv_kernel;
    config["use_conv_bias"] = true;
    config["chunk_size"] = shape.chunk_size;
    config["mamba_hidden_act"] = "silu";
    config["n_routed_experts"] = shape.experts;
    config["num_experts_per_tok"] = shape.top_k;
    config["moe_intermediate_size"] = shape.expert_intermediate;
    config["moe_shared_expert_intermediate_size"] = shape.shared_intermediate;
    config["n_shared_experts"] = 1;
    config["n_group"] = shape.n_group;
    config["topk_group"] = shape.topk_group;
    config["norm_topk_prob"] = true;
    config["routed_scaling_factor"] = shape.routed_scaling_factor;
    if (shape.moe_latent > 0) config["moe_latent_size"] = shape.moe_latent;
  }
  config["bos_token_id"] = 1;
  config["eos_token_id"] = 2;
  config["torch_dtype"] = o.dtype == DType::BF16 ? "bfloat16" : o.dtype == DType::F16 ? "float16" : "float32";
  config["qforge_synthetic"] = {{"shape", shape.name}, {"seed", o.seed}};
  // The tensors are the ones the layer specs name, so a synthetic checkpoint always matches
  // what the engine and the quantizer expect of its config.
  const Architecture arch =
      Architecture::from_config(nlohmann::json::parse(config.dump()), "synthetic config");
  std::vector<SynthTensor> tensors;
  const float embed_scale = 0.02f;
  auto add = [&](std::string name, Shape s, bool norm = false) {
    const float scale = norm ? 1.f : 0.7f / std::sqrt(float(s.back()));
    tensors.push_back({{std::move(name), o.dtype, std::move(s)}, scale, norm});
  };
  add(arch.embed_name, {shape.vocab, shape.hidden});
  tensors.back().scale = embed_scale;
  for (const LayerSpec& layer : arch.layers) {
    auto norm = [&](NormSlot slot) {
      if (layer.has(slot)) add(layer.norm(slot), {arch.norm_size(slot)}, true);
    };
    auto linears = [&](bool attention) {
      for (size_t i : layer.linears) {
        const LinearModule& m = arch.linears[i];
        const bool in_attention = m.input == LayerInput::attn_norm ||
                                  m.input == LayerInput::attn_out ||
                                  m.input == LayerInput::q_latent ||
                                  m.input == LayerInput::kv_latent ||
                                  m.input == LayerInput::ssm_out;
        if (in_attention != attention) continue;
        add(m.weight_name(), {m.out_features, m.in_features});
        if (m.bias) add(m.name + ".bias", {m.out_features});
      }
    };
    norm(NormSlot::attn_in);
    linears(true);
    if (layer.is_mamba) {
      // Values of the ranges Mamba's initialisation gives: dt = softplus(dt_bias) around 0.01,
      // A = -exp(A_log) around -e, D around 1.
      const MambaSpec& m = arch.mamba;
      const MambaTensors& t = layer.mamba;
      add(t.conv_weight, {m.conv_dim(), 1, m.conv_kernel});
      if (!t.conv_bias.empty()) {
        add(t.conv_bias, {m.conv_dim()});
        tensors.back().scale = 0.05f;
      }
      add(t.dt_bias, {m.heads});
      tensors.back().scale = 0.5f;
      tensors.back().offset = -4.6f;
      add(t.a_log, {m.heads});
      tensors.back().scale = 0.5f;
      tensors.back().offset = 1.f;
      add(t.d, {m.heads}, true);
      add(t.norm, {m.inner()}, true);
    }
    norm(NormSlot::q);
    norm(NormSlot::k);
    norm(NormSlot::q_a);
    norm(NormSlot::kv_a);
    norm(NormSlot::attn_out);
    norm(NormSlot::mlp_in);
    if (!layer.sinks.empty()) {
      add(layer.sinks, {shape.heads});
      tensors.back().scale = 0.5f;
    }
    if (layer.is_moe) {
      add(layer.moe.router + ".weight", {layer.moe.num_experts, shape.hidden});
      if (layer.moe.router_bias) add(layer.moe.router + ".bias", {layer.moe.num_experts});
      if (!layer.moe.shared_gate.empty()) add(layer.moe.shared_gate + ".weight", {1, shape.hidden});
      if (!layer.moe.score_bias.empty()) {
        add(layer.moe.score_bias, {layer.moe.num_experts});
        tensors.back().scale = 0.02f;  // small next to the sigmoid scores it corrects
      }
    }
    if (layer.is_moe && layer.moe.gate_up_interleaved) {
      // gpt-oss: the hub's fused, transposed expert tensors (model/expert_tensors.h), each
      // weight scaled by its fan-in (dimension 1, not the last).
      const std::string block = layer.moe.router.substr(0, layer.moe.router.rfind('.') + 1);
      const int64_t e = layer.moe.num_experts, h = shape.hidden, i = layer.moe.expert_intermediate;
      add(block + "experts.gate_up_proj", {e, h, 2 * i});
      tensors.back().scale = 0.7f / std::sqrt(float(h));
      add(block + "experts.gate_up_proj_bias", {e, 2 * i});
      add(block + "experts.down_proj", {e, i, h});
      tensors.back().scale = 0.7f / std::sqrt(float(i));
      add(block + "experts.down_proj_bias", {e, h});
    } else {
      linears(false);
    }
    norm(NormSlot::mlp_out);
  }
  add(arch.final_norm_name, {shape.hidden}, true);
  if (!shape.tie_word_embeddings) {
    add(arch.head_name, {shape.vocab, shape.hidden});
    tensors.back().scale = embed_scale;
  }

  // Shards in order, cut at max_shard_bytes.
  uint64_t total_bytes = 0;
  SynthReport report;
  report.output = out_dir;
  std::vector<uint64_t> sizes;
  for (const auto& t : tensors) {
    sizes.push_back(t.spec.nbytes());
    total_bytes += sizes.back();
    report.parameters += shape_numel(t.spec.shape);
  }
  const auto shards = plan_shards(sizes, o.max_shard_bytes);

  StagedDirectory staged(out_dir, o.force);
  ThreadPool pool(o.threads > 0 ? o.threads : ThreadPool::hardware_threads());
  Progress progress("synth: write", ProgressUnit::bytes, double(total_bytes), o.progress);
  constexpr int64_t kChunk = 1 << 20;  // elements per generator stream
  std::map<std::string, std::string> weight_map;
  std::vector<std::byte> buffer;
  for (size_t s = 0; s < shards.size(); ++s) {
    const std::string file = shard_file_name(s, shards.size());
    std::vector<TensorSpec> specs;
    for (size_t i : shards[s]) {
      specs.push_back(tensors[i].spec);
      weight_map[tensors[i].spec.name] = file;
    }
    SafetensorsWriter writer(staged.path() / file, specs);
    for (size_t i : shards[s]) {
      const SynthTensor& t = tensors[i];
      const int64_t n = shape_numel(t.spec.shape);
      buffer.resize(size_t(n) * dtype_size(o.dtype));
      const int64_t chunks = (n + kChunk - 1) / kChunk;
      pool.parallel_for(chunks, [&](int64_t c) {
        const int64_t begin = c * kChunk, count = std::min(kChunk, n - begin);
        std::vector<float> values(static_cast<size_t>(count));
        fill_chunk(t, o.seed, c, values.data(), values.size());
        convert_from_f32(o.dtype, values.data(), buffer.data() + size_t(begin) * dtype_size(o.dtype),
                         values.size());
      });
      writer.write(t.spec.name, buffer);
      progress.advance(buffer.size());
    }
    writer.finish();
    report.bytes += fs::file_size(staged.path() / file);
  }
  progress.finish();
  buffer = {};
  report.shards = int(shards.size());
  if (shards.size() > 1) write_shard_index(staged.path(), total_bytes, weight_map);

  write_json_file(staged.path() / "config.json", config);
  // Calibration, generate and eval need text in and out, even on random weights.
  write_synthetic_tokenizer(staged.path(), shape.vocab);
  staged.commit();
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return report;
}

}  // namespace qf

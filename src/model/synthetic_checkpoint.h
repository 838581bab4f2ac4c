// Synthetic checkpoints with the layer shapes of real models (Llama dense, Qwen3-MoE, Mixtral
// and DeepSeek-V3 mixtures of experts) and heavy-tailed random weights, for benchmarks and
// demos where downloading a real model is not possible.
#pragma once

#include "core/dtype.h"

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace qf {

struct NamedShape {
  std::string name;         // "llama-8b"
  std::string description;  // "Llama-3.1-8B"
  int64_t hidden, intermediate, layers, heads, kv_heads, vocab;
  bool tie_word_embeddings;
  double rope_theta;
  // Mixtures of experts: the family ("llama" for dense shapes), routed experts per layer,
  // experts per token and each expert's intermediate size; head_dim 0: hidden / heads.
  std::string model_type = "llama";
  int64_t experts = 0, top_k = 0, expert_intermediate = 0, head_dim = 0;
  // DeepSeek-V3: multi-head latent attention's ranks and head dims, expert groups and the
  // groups kept, shared experts, the dense layers before the first MoE layer, the routing
  // weights' multiplier and the YaRN factor over 4096 original positions.
  int64_t q_lora_rank = 0, kv_lora_rank = 0, qk_nope_head_dim = 0, qk_rope_head_dim = 0,
          v_head_dim = 0;
  int64_t n_group = 1, topk_group = 1, shared_experts = 0, first_k_dense = 0;
  double routed_scaling_factor = 1.0, yarn_factor = 1.0;
  // Nemotron-H: the layer pattern (M Mamba2, * attention, - MLP, E MoE; --layers N keeps its
  // first N), the Mamba2 mixer's heads, head size, state, groups, convolution and chunk, the
  // shared expert's width and the MoE latent size (0: none).
  std::string hybrid_pattern;
  int64_t mamba_heads = 0, mamba_head_dim = 0, ssm_state = 0, mamba_groups = 0, conv_kernel = 4,
          chunk_size = 128, shared_intermediate = 0, moe_latent = 0;
};

const std::vector<NamedShape>& named_shapes();
// Throws qf::Error listing the known names if `name` is unknown.
const NamedShape& find_named_shape(const std::string& name);

struct SynthOptions {
  std::string shape = "tiny";
  int64_t layers = 0;  // 0 = the shape's own count
  DType dtype = DType::BF16;  // F32, F16 or BF16
  uint64_t seed = 0;
  uint64_t max_shard_bytes = 5'000'000'000;
  bool force = false;
  int threads = 0;
  bool progress = true;
};

struct SynthReport {
  std::filesystem::path output;
  int64_t parameters = 0;
  uint64_t bytes = 0;  // safetensors files
  int shards = 0;
  double seconds = 0;
};

// Writes config.json, safetensors shards (with an index when there is more than one) and a
// made-up byte-level tokenizer covering the vocabulary (io/synthetic_tokenizer.h) to
// `out_dir`, via a temporary directory. The same options always give the same bytes.
SynthReport write_synthetic_checkpoint(const std::filesystem::path& out_dir,
                                       const SynthOptions& options);

}  // namespace qf

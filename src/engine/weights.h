// A decoder model's weights as the checkpoint stores them: Linear layers as views of the mapped
// bytes (float or quantized, with their scales), small vectors (norms, biases) as float32 copies,
// the token embedding as a view. Quantized Linears are recognized from the checkpoint's
// quantization config, read by the target that wrote it (targets/target.h), and checked against
// the tensors present.
#pragma once

#include "engine/activation_quant.h"
#include "io/checkpoint.h"
#include "kernels/linear.h"
#include "model/architecture.h"

#include <array>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace qf {

// One Linear module: the weight plus what some checkpoints add around it.
struct EngineLinear {
  std::string name;               // HF module name
  LinearWeight w;
  std::vector<float> bias;        // [out] or empty
  std::vector<float> pre_scale;   // [in] or empty (AWQ / SmoothQuant input channel scales)
  ActQuant act = ActQuant::none;  // input quantization (W4A4, W8A8), applied after pre_scale
  float input_scale = 0.f;        // its static scale, amax / maxbound (as the reader converts it)
  // Owns `w.data` when the weight was made in memory (dequantized INT8, fake-quantized
  // calibration weights, the [out, in] copies of quantized codes and scales stored transposed:
  // ModelOpt's fused gpt-oss experts); null for views of the checkpoint.
  std::shared_ptr<const void> storage;
};

// One decoder layer's weights, laid out by its LayerSpec (model/architecture.h).
struct LayerWeights {
  // The multipliers each norm applies (Gemma's x * (1 + w) is stored as 1 + w), present where
  // the spec has the norm, of Architecture::norm_size elements.
  std::array<std::vector<float>, kNormSlots> norms;
  std::vector<EngineLinear> linears;  // parallel to LayerSpec::linears
  float k_scale = 0.f, v_scale = 0.f;  // FP8 KV cache scales; 0: float32 cache
  std::vector<float> sinks;  // per-head attention sink logits [num_heads] (gpt-oss) or empty
  // MoE layers: the router [num_experts, hidden] (with its bias where the spec says) and the
  // shared expert's gate [1, hidden] (where the spec has one), never quantized; the router's
  // score bias [num_experts] (sigmoid_grouped routing).
  EngineLinear router, shared_gate;
  std::vector<float> score_bias;
  // Mamba2 layers (LayerSpec::is_mamba): conv1d [conv_dim, K] and its bias [conv_dim] (empty
  // without one), dt_bias [heads], A = -exp(A_log) [heads] (float32, as the kernels take it), D
  // [heads], the gated norm's weight [inner].
  struct Mamba {
    std::vector<float> conv_weight, conv_bias, dt_bias, a, d, norm;
  } mamba;

  const std::vector<float>& norm(NormSlot s) const { return norms[size_t(s)]; }
  // The Linear of `role`, which the spec must have.
  const EngineLinear& linear(const LayerSpec& spec, LinearRole role) const {
    return linears[size_t(spec.slot_of(role))];
  }
};

// The DType of a float weight format (f32, f16, bf16); nullopt for the quantized ones.
std::optional<DType> float_weight_dtype(WeightFormat f);

// The token embedding table as stored: F32, F16 or BF16 [vocab, hidden], or ggml blocks (a
// GGUF's token_embd: `blocks`, format ggml, used when its data is set).
struct EmbeddingView {
  DType dtype = DType::F32;
  const void* data = nullptr;
  LinearWeight blocks;
  int64_t rows = 0, cols = 0;
  // Writes row `id` as float32 to out[cols].
  void row(int64_t id, float* out) const;
};

struct ModelWeights {
  std::shared_ptr<const Checkpoint> checkpoint;  // owns the mappings every view points into
  std::shared_ptr<const void> gguf;  // instead, when loaded from a GGUF file: its mapping
  Architecture arch;
  std::string quantization;  // "none", or the target's name and its algo ("modelopt W4A16_NVFP4")
  EmbeddingView embed;
  std::vector<LayerWeights> layers;
  std::vector<float> final_norm;
  EngineLinear lm_head;

  // Bytes of weights one decode step reads: every Linear (with scales) and the output head,
  // of MoE layers the router, the shared expert and top_k routed experts (the average expert's
  // bytes times top_k: which experts a token picks is not known ahead).
  uint64_t weight_bytes_per_token() const;

  // Copies the weights (`data`: values, codes or ggml blocks; separate block scales stay) of
  // every Linear of at least `min_bytes`, and the output head, into memory backed by 2 MB pages
  // where the system grants them (core/huge_pages.h): what a decode loop that streams them every
  // token wants. `release_file_pages`: the weights not already copied are views of read-only
  // file mappings (a model loaded from its path), whose pages are then dropped, so the copies
  // replace them in memory (plus one tensor while copying); otherwise both stay. NVFP4, MXFP4
  // and INT4 weights are repacked instead where this CPU has the kernel for it
  // (kernels/q4_rows16.h), every size of them (below min_bytes into ordinary memory).
  void move_to_huge_pages(bool release_file_pages, uint64_t min_bytes = uint64_t(2) << 20);

  // Loads `dir`, or a GGUF file (load_gguf). Throws qf::Error, starting with the directory and
  // naming the tensor, for a missing or malformed tensor, or a quantization config that does not
  // match the tensors.
  static ModelWeights load(const std::filesystem::path& dir);
  // A GGUF file of llama.cpp's "llama" architecture (engine/gguf_weights.cpp): errors name the
  // file and the key or tensor (another architecture, rope settings qforge does not implement,
  // a type it cannot decode, a missing or misshapen tensor).
  static ModelWeights load_gguf(const std::filesystem::path& path);
  // The same from a checkpoint already opened (shared: the views point into its mappings).
  static ModelWeights load(std::shared_ptr<const Checkpoint> checkpoint);
};

}  // namespace qf

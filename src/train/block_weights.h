// The shape and the weights of one dense Llama decoder block as the training code holds them:
// plain row-major arrays of the scalar T (float, double), read from an engine's ModelWeights.
#pragma once

#include "engine/weights.h"
#include "model/architecture.h"

#include <cstdint>
#include <vector>

namespace qf {

// A pre-norm Llama block: hidden size, query and key/value heads, head size, MLP width, the
// norms' epsilon and the attention's softmax scale.
struct BlockShape {
  int64_t hidden = 0, heads = 0, kv_heads = 0, head_dim = 0, intermediate = 0;
  double eps = 1e-6;
  double attention_scale = 0;
  int64_t q_width() const { return heads * head_dim; }
  int64_t kv_width() const { return kv_heads * head_dim; }
};

// The block's weights, each [out, in] row-major as the checkpoint stores it (norms [hidden]).
// The same struct holds their gradients (block_backward).
template <typename T>
struct BlockWeights {
  std::vector<T> attn_norm, mlp_norm;  // input_layernorm, post_attention_layernorm [hidden]
  std::vector<T> q, k, v, o;           // [q_width, hidden], [kv_width, hidden] x2, [hidden, q_width]
  std::vector<T> gate, up, down;       // [intermediate, hidden] x2, [hidden, intermediate]
  // All zero, sized for `s` (a gradient accumulator).
  static BlockWeights zeros(const BlockShape& s);
};

// The shape of decoder layer `layer` of `arch`. Throws qf::Error naming the model type and
// the feature when the layer is not the plain Llama block the training code differentiates:
// it must have attention with separate q/k/v/o and a dense SiLU-gated MLP with separate
// gate/up/down, no biases, plain pre-norms only (no q/k norms, no post-norms, no x·(1+w)), no
// sliding window, soft-capping, sinks, residual scaling, MoE, MLA or Mamba, RoPE over a value
// head as wide as the query head.
BlockShape block_shape(const Architecture& arch, int64_t layer);

// Layer `layer`'s weights dequantized to float (dequantize_weight_rows: exactly what the
// engine's exact kernels multiply by) and widened to T. Throws qf::Error as block_shape does,
// and for a Linear whose input the engine transforms (AWQ pre-scale, activation quantization).
template <typename T>
BlockWeights<T> block_weights(const ModelWeights& weights, int64_t layer);

}  // namespace qf

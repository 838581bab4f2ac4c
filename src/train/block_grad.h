// One dense Llama decoder block, forward and backward, composed from the ops of this folder:
//   h = x + o_proj(attention(rope(q_proj(n1)), rope(k_proj(n1)), v_proj(n1))), n1 = rmsnorm(x)
//   y = h + down(silu(gate(n2)) · up(n2)),                                     n2 = rmsnorm(h)
// The forward keeps the activations of this one block (BlockSaved), so a caller tuning block by
// block holds one block's worth at a time. Templated on the scalar (float, double).
#pragma once

#include "train/block_weights.h"
#include "train/mlp_grad.h"
#include "train/rope_grad.h"

#include <cstdint>
#include <vector>

namespace qf {

// What block_backward needs from the forward, for `tokens` rows. Sizes (T = tokens):
// x, h, n1, n2 [T, hidden]; q [T, q_width], k, v [T, kv_width] (q and k after RoPE);
// probs [heads, T, T]; att [T, q_width]; inv_rms1, inv_rms2 [T]; the MLP's [T, intermediate] x3.
// About T·(5·hidden + 2·q_width + 2·kv_width + 3·intermediate) + heads·T² scalars.
template <typename T>
struct BlockSaved {
  int64_t tokens = 0;
  std::vector<T> x, n1, inv_rms1, q, k, v, probs, att, h, n2, inv_rms2;
  MlpSaved<T> mlp;
};

// y [tokens, hidden] from x [tokens, hidden] at positions [0, tokens) (rope.positions >=
// tokens); fills `saved`. y may alias x. In float with the engine's weights it computes what
// Model::forward_layer computes (exact kernels; sums in a different order).
template <typename T>
void block_forward(const BlockShape& s, const BlockWeights<T>& w, const RopeTable<T>& rope,
                   const T* x, int64_t tokens, T* y, BlockSaved<T>& saved);

// Given dy = dL/dy [tokens, hidden] and the forward's `saved`: dx [tokens, hidden] is written
// (dx may alias dy); every weight's gradient is added to `grads` (sized as BlockWeights::zeros).
template <typename T>
void block_backward(const BlockShape& s, const BlockWeights<T>& w, const RopeTable<T>& rope,
                    const BlockSaved<T>& saved, const T* dy, T* dx, BlockWeights<T>& grads);

}  // namespace qf

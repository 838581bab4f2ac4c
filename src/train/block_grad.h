// One dense Llama decoder block, forward and backward, composed from the ops of this folder:
//   h = x + o_proj(attention(rope(q_proj(n1)), rope(k_proj(n1)), v_proj(n1))), n1 = rmsnorm(x)
//   y = h + down(silu(gate(n2)) · up(n2)),                                     n2 = rmsnorm(h)
// The forward keeps the activations of this one block (BlockSaved), so a caller tuning block by
// block holds one block's worth at a time. Templated on the scalar (float, double).
#pragma once

#include "core/act_quant.h"
#include "train/block_weights.h"
#include "train/mlp_grad.h"
#include "train/rope_grad.h"

#include <cstdint>
#include <vector>

namespace qf {

class ThreadPool;

// Fake quantization of the block's Linear inputs (W4A4 / W8A8), with the static input scales
// the export writes: the forward applies the engine's own fake_quantize_activations
// (engine/activation_quant.h) to each Linear input, so the block computes what the engine
// computes for the quantized checkpoint; the backward passes the gradient straight through,
// 0 where the input lies beyond the calibrated range (|x| > input_scale · the format's largest
// value: 6·448 for NVFP4, 448 for FP8, 127 for INT8), where the quantizer saturates.
struct BlockActQuant {
  ActQuant mode = ActQuant::none;
  // The input scales of q/k/v (one shared input), o_proj, gate/up, down_proj; 0 for an input
  // the engine does not quantize (its Linear kept unquantized).
  float attn_in = 0.f, o_in = 0.f, mlp_in = 0.f, down_in = 0.f;
};

// What block_backward needs from the forward, for `tokens` rows. Sizes (T = tokens):
// x, h, n1, n2 [T, hidden]; q [T, q_width], k, v [T, kv_width] (q and k after RoPE);
// probs [heads, T, T]; att [T, q_width]; inv_rms1, inv_rms2 [T]; the MLP's [T, intermediate] x3.
// About T·(5·hidden + 2·q_width + 2·kv_width + 3·intermediate) + heads·T² scalars.
template <typename T>
struct BlockSaved {
  int64_t tokens = 0;
  std::vector<T> x, n1, inv_rms1, q, k, v, probs, att, h, n2, inv_rms2;
  MlpSaved<T> mlp;
  // With activation quantization (BlockActQuant): n1, att, n2 and mlp.act hold the quantized
  // inputs the Linears multiplied, and these masks (1: the gradient passes) their STE ranges.
  std::vector<uint8_t> pass_n1, pass_att, pass_n2, pass_act;
};

// y [tokens, hidden] from x [tokens, hidden] at positions [0, tokens) (rope.positions >=
// tokens); fills `saved`. y may alias x. In float with the engine's weights it computes what
// Model::forward_layer computes (exact kernels; sums in a different order).
// `act` (may be null): fake-quantized Linear inputs. `pool` (may be null; float only, ignored
// for double): the Linears run on the engine's f32 kernels (train/linear_fast) and attention
// one head per task; results do not depend on the pool's size.
template <typename T>
void block_forward(const BlockShape& s, const BlockWeights<T>& w, const RopeTable<T>& rope,
                   const T* x, int64_t tokens, T* y, BlockSaved<T>& saved,
                   const BlockActQuant* act = nullptr, ThreadPool* pool = nullptr);

// Given dy = dL/dy [tokens, hidden] and the forward's `saved`: dx [tokens, hidden] is written
// (dx may alias dy); every weight's gradient is added to `grads` (sized as BlockWeights::zeros).
// `act` and `pool` as the forward's (the same `act`).
template <typename T>
void block_backward(const BlockShape& s, const BlockWeights<T>& w, const RopeTable<T>& rope,
                    const BlockSaved<T>& saved, const T* dy, T* dx, BlockWeights<T>& grads,
                    const BlockActQuant* act = nullptr, ThreadPool* pool = nullptr);

}  // namespace qf

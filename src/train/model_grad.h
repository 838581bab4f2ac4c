// A whole dense Llama model as a distillation loss: token embeddings (given) -> decoder blocks
// -> final norm -> lm_head -> KL(teacher ‖ student) per token, averaged over the tokens of a
// window and over the windows of a batch, with the gradient of that loss with respect to every
// block's weights (and, when asked, the head's and the input hidden states'). Memory is bounded
// by gradient checkpointing: the forward keeps only each block's input hidden states; the
// backward recomputes one block's forward at a time, so the activations beyond the hidden
// states are one block's per window. Each window has its own
// one-block gradient buffer; the buffers are summed in window order. With a ThreadPool, float
// runs the windows one after another with every product on the engine's f32 kernels and the
// attention heads as tasks (block_grad's pooled path), double runs the windows as parallel
// tasks in plain loops; results do not depend on the thread count either way. Templated on the
// scalar (float, double).
#pragma once

#include "core/thread_pool.h"
#include "train/block_grad.h"
#include "train/head_grad.h"

#include <cstdint>
#include <span>
#include <vector>

namespace qf {

// The dense Llama model the training code differentiates (embedding excluded: callers embed).
template <typename T>
struct DenseModel {
  BlockShape block;
  int64_t vocab = 0;
  double final_eps = 1e-6;
  std::vector<BlockWeights<T>> blocks;  // one per decoder layer
  std::vector<T> final_norm;            // [hidden]
  std::vector<T> head;                  // lm_head [vocab, hidden]
  RopeTable<T> rope;                    // positions >= the windows' length
  // Per layer, the Linear inputs' fake quantization (W4A4 / W8A8: block_forward's); empty for
  // weight-only models.
  std::vector<BlockActQuant> act;
  const BlockActQuant* act_of(size_t layer) const { return act.empty() ? nullptr : &act[layer]; }
};

// The layers' shapes and the float weights of an engine's model (block_weights per layer, the
// final norm and the dequantized lm_head), with a RoPE table for `positions`. Throws qf::Error
// (block_shape's message) for a model that is not made of plain Llama blocks, or whose head
// soft-caps or scales its logits.
DenseModel<float> dense_model(const ModelWeights& weights, int64_t positions);

// One batch: each window's input hidden states x0 [tokens, hidden] (the embeddings) and the
// teacher's logits [tokens, vocab]; every window has `tokens` rows.
template <typename T>
struct DistillBatch {
  int64_t tokens = 0;
  std::vector<const T*> x0;
  std::vector<const T*> teacher_logits;
};

// The gradients of the loss beyond the blocks' (each wanted when not null): `head`
// [vocab * hidden] is accumulated (dL/d lm_head), `x0` is resized to the batch's windows and
// receives each window's dL/dx0 [tokens * hidden] (the input hidden states: the embedding rows,
// which the caller maps back to token ids). A tied model's embedding gradient is the sum of both.
template <typename T>
struct EmbeddingGrads {
  std::vector<T>* head = nullptr;
  std::vector<std::vector<T>>* x0 = nullptr;
};

// Mean over the windows of head_kl (itself the mean over a window's tokens). When `grads` is
// not null it is resized to the model's layers (BlockWeights::zeros) if needed and the gradient
// of the mean is added to it; `embedding` asks for the head's and the inputs' gradients too (they
// need `grads`). `window_loss` (when not null) receives each window's loss. `pool` null: one
// thread.
template <typename T>
double model_kl(const DenseModel<T>& model, const DistillBatch<T>& batch,
                std::vector<BlockWeights<T>>* grads, ThreadPool* pool,
                std::vector<double>* window_loss = nullptr,
                const EmbeddingGrads<T>& embedding = {});

// The student's logits [tokens, vocab] of one window (for tests and evaluation). `pool` (float
// only; ignored for double): the products and attention heads as parallel tasks, the same
// bits at any thread count.
template <typename T>
void model_logits(const DenseModel<T>& model, const T* x0, int64_t tokens, T* logits,
                  ThreadPool* pool = nullptr);

}  // namespace qf

// Block-wise quantization-aware tuning (issue 12, `--algo tune`): the seven Linears of one dense
// Llama block become TunableLinears on their initialising algorithm's scales, and their rounding
// offsets are learnt to minimise the mean squared error of the block's output against a target
// (the original block's output), on calibration windows, by SignRound's signed gradient descent
// or Adam. Memory: one block's weights x (original, offsets, optimiser state) plus the saved
// activations of one window and the caller's inputs and targets.
#pragma once

#include "formats/quantized_tensor.h"
#include "train/block_grad.h"
#include "train/tunable_linear.h"

#include <array>
#include <cstdint>
#include <functional>

namespace qf {

class ThreadPool;

struct BlockTuneOptions {
  int64_t iters = 200;  // optimiser steps
  float lr = 0.f;       // 0: 1/iters (SignRound's default)
  int64_t batch = 8;    // windows per step (<= the windows given)
  TuneOptimizer optimizer = TuneOptimizer::sign;
  TuneParams params = TuneParams::rounding;
  uint64_t seed = 0;    // which windows each step takes
};

// The Linears in the order tune_block takes them: q, k, v, o, gate, up, down.
constexpr int kBlockLinears = 7;

struct BlockTuneResult {
  // The tuned tensors, empty where the init was null (a Linear left as it is).
  std::array<QuantizedTensor, kBlockLinears> tensors;
  double mse_init = 0, mse_tuned = 0;  // mean over all windows and elements
  bool kept_init = false;  // tuning did not lower the error over all windows: the init is kept
  double first_loss = 0, last_loss = 0;  // the first and last steps' batch losses
};

// inputs, targets: [windows, seq, hidden] float32 (the block's inputs and the outputs to reach).
// original: the block's float weights (the Linears' W; norms as they are). init[r] is Linear r's
// initialising QuantizedTensor, or null to keep original's matrix unquantized. act: activation
// fake quantization (may be null). on_step (may be empty) is called after every step. Results
// do not depend on the pool's size. Throws qf::Error when batch > windows or a shape mismatches.
BlockTuneResult tune_block(const BlockShape& shape, const BlockWeights<float>& original,
                           const RopeTable<float>& rope,
                           const std::array<const QuantizedTensor*, kBlockLinears>& init,
                           const BlockActQuant* act, const float* inputs, const float* targets,
                           int64_t windows, int64_t seq, const BlockTuneOptions& options,
                           ThreadPool* pool, const std::function<void()>& on_step = {});

// Linear r's matrix of a BlockWeights (r in the order above).
std::vector<float>& block_matrix(BlockWeights<float>& w, int r);
const std::vector<float>& block_matrix(const BlockWeights<float>& w, int r);

}  // namespace qf

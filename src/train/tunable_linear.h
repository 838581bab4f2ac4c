// One Linear under block-wise quantization-aware tuning (issue 12, `--algo tune`): the original
// weights, the frozen scales of the initialising algorithm's QuantizedTensor (RTN, local_hessian,
// GPTQ, ...), and learnable SignRound rounding offsets V, bounded to ±0.5 in units of each
// scale's step d_j (train/fake_quant_ste.h). The forward is the format's own encoder and
// dequantizer (FakeQuantSte), so export() is bit for bit the tensor the forward multiplied by.
//
// The base the offsets move: element i starts from W_i where the init's code is the one round to
// nearest gives under the init's scales (max, mse, local_hessian, four_over_six: every element),
// and from the init's own dequantized value Ŵ_i where the init chose another code (GPTQ's
// error feedback). So V = 0 reproduces the init exactly, and every element may move up to half a
// step of its scale either way from there.
//
// Why units of d_j and not of the local grid step: for INT4, INT8 and FP8 within one binade the
// two coincide; for E2M1 (steps 0.5, 1 and 2 of d) ±0.5 d reaches the neighbouring codes below
// |2d| and the rounding boundary above it, the same reach SignRound gives these formats. The
// units are those of the LSQ scale gradient, so one learning rate serves every format.
#pragma once

#include "formats/quantized_tensor.h"
#include "train/adam.h"
#include "train/fake_quant_ste.h"

#include <cstdint>
#include <vector>

namespace qf {

enum class TuneOptimizer { sign, adam };

// What is learnt: SignRound's rounding offsets (|V| <= 0.5 of a step), or the weights
// themselves (the same offsets without the bound: W + V d moves freely, the straight-through
// estimator carries the gradient across codes).
enum class TuneParams { rounding, weights };

class TunableLinear {
 public:
  // w [rows, cols] float32 (the original weights), init: rows x cols with the format's scales.
  // Throws qf::Error for a shape mismatch (and as FakeQuantSte does).
  TunableLinear(std::vector<float> w, const QuantizedTensor& init,
                TuneParams params = TuneParams::rounding);

  int64_t rows() const { return ste_.rows(); }
  int64_t cols() const { return ste_.cols(); }

  // w_hat [rows, cols] = Ŵ for the current offsets.
  void forward(float* w_hat) const;
  // One optimiser step from g = dL/dŴ [rows, cols]: SignRound's signed gradient descent
  // (V -= lr · sign(dL/dV)) or Adam on dL/dV; V is clamped to [-0.5, 0.5] after the step.
  void step(const float* g, TuneOptimizer optimizer, float lr);
  // Back to the init (V = 0).
  void reset();

  // The tuned tensor: the init's scales, the codes of the current offsets. dequantize() of it
  // equals forward() bit for bit.
  QuantizedTensor export_tensor() const;
  const std::vector<float>& offsets() const { return v_; }

 private:
  // base + V d per element (the encoder's input), from the current offsets.
  void shifted(std::vector<float>& out) const;

  std::vector<float> base_, v_;
  float bound_ = 0.5f;
  FakeQuantSte ste_;
  AdamState adam_;
  FakeQuantGrads grads_;
};

}  // namespace qf

// Fake quantization of a weight matrix for quantization-aware tuning: the forward is the
// format's own quantize-then-dequantize against frozen scales (the format row's frozen_divisor
// and encode_frozen, the functions quantize_rtn's codes come from), so what is tuned is exactly
// what is exported; the backward is the straight-through estimator for the weights, LSQ for the
// scales and SignRound for learnable rounding offsets. Plain loops, no threads, like the rest
// of train/.
//
// Notation, per element i of W [rows, cols] covered by scale j:
//   d_j   the scale's divisor (frozen_divisor: NVFP4 e4m3_j * weight_scale_2, MXFP4 2^k,
//         FP8 / INT4 / INT8 the float scale), the step of the code grid in weight units;
//   x_i   = W_i / d_j, the unrounded code;  V_i the rounding offset, in units of d_j;
//   q_i   the code value the format's encoder gives for W_i + V_i d_j, Ŵ_i its dequantized value
//         (≈ d_j q_i; exactly the dequantizer's product, e.g. NVFP4 e2m1 * e4m3 * g);
//   [lo, hi] the format's code range (E2M1 ±6, E4M3 ±448, INT4 [-8, 7], INT8 [-128, 127]).
// Element i is in range when lo <= x_i + V_i <= hi; outside it the encoder clips.
#pragma once

#include "formats/quantized_tensor.h"
#include "formats/registry.h"

#include <cstdint>
#include <vector>

namespace qf {

// Gradients of a loss L(Ŵ) given g = dL/dŴ. Sized by FakeQuantSte::backward.
struct FakeQuantGrads {
  // dL/dW [rows, cols]: the straight-through estimator, g_i in range, 0 where the element clips.
  std::vector<float> w;
  // dL/dd_j, one per scale in the order of QuantizedTensor::block_scales / scales (LSQ):
  //   Σ_{i in j} g_i * (q_i - x_i) in range (the code minus the unrounded value: the derivative
  //   of d * round(W/d + V) with the rounding passed straight through), g_i * q_i at the clip
  //   (q_i = lo or hi, the derivative of d * clamp). For NVFP4 chain to the stored scales
  //   through d_j = e4m3_j * g: dL/de4m3_j = g * dL/dd_j.
  std::vector<float> scale;
  // NVFP4 only (0 otherwise): dL/d(weight_scale_2) = Σ_j e4m3_j * dL/dd_j.
  float tensor_scale = 0.f;
  // dL/dV [rows, cols], SignRound's offsets: g_i * d_j in range, 0 at the clip. The forward
  // clamps V to [-0.5, 0.5]; the gradient passes through that clamp (SignRound clamps after
  // each step), so an offset held at a bound can move back. Empty when the backward got no V.
  std::vector<float> v;
};

class FakeQuantSte {
 public:
  // Freezes the scales of `scales` (its format, rows, cols, block, block_scales / scales,
  // global_scale; codes not read): typically quantize_rtn's result, so the scales are the
  // format's reference rule on the weights' own amaxes. Throws qf::Error for a shape the block
  // does not divide or a scale count that does not match (as FrozenQuantizer).
  explicit FakeQuantSte(const QuantizedTensor& scales);

  int64_t rows() const { return rows_; }
  int64_t cols() const { return cols_; }
  int64_t scale_count() const { return int64_t(divisor_.size()); }
  // d_j, in the order of the stored scales.
  const std::vector<float>& divisors() const { return divisor_; }
  // The code range [lo, hi] (in units of d), read off the format's own encoder.
  float code_lo() const { return lo_; }
  float code_hi() const { return hi_; }

  // w_hat [rows, cols] = Ŵ of w [rows, cols] (float32, row-major). `v` [rows, cols] is the
  // rounding offsets or null (all zero); each is clamped to [-0.5, 0.5]. With v null the
  // result is bit for bit dequantize(quantized w) with these scales.
  void forward(const float* w, const float* v, float* w_hat) const;

  // The QuantizedTensor the forward dequantizes: the frozen scales and the codes the format's
  // encoder gives for W + clamp(V) d (v null: V = 0). dequantize() of it is the forward's Ŵ bit
  // for bit, so it is what an exporter writes for the tuned weights.
  QuantizedTensor quantize(const float* w, const float* v) const;

  // Gradients for the upstream gradient g = dL/dŴ [rows, cols] at the same w and v as the
  // forward. grads.v is filled only when v is not null (v null means V = 0 and no V gradient).
  void backward(const float* w, const float* v, const float* g, FakeQuantGrads& grads) const;

 private:
  const FormatInfo* row_;
  int64_t rows_, cols_, span_, scales_per_row_;
  QuantizedTensor scales_;      // the frozen scales, codes empty
  std::vector<float> divisor_;  // d_j
  std::vector<float> value_;    // the factor the dequantizer applies before the tensor scale
  float g_ = 1.f;               // the tensor scale (NVFP4), 1 otherwise
  float lo_ = 0.f, hi_ = 0.f;
};

}  // namespace qf

// Simulated (quantize-dequantize) activation and KV-cache quantization on the CPU, as the
// engines that run W4A4 / W8A8 / FP8-KV checkpoints apply it, so `qforge eval` measures them.
#pragma once

#include <cstdint>
#include <string_view>

namespace qf {

// How a Linear's input is quantized before the product.
enum class ActQuant : uint8_t {
  none,
  nvfp4,  // dynamic E4M3 scale per 16 elements under the static global 1/input_scale (§6.1)
  fp8,    // static per-tensor E4M3: e4m3(x / input_scale) * input_scale
  int8,   // static per-tensor INT8: clamp(rne(x / input_scale), -128, 127) * input_scale
};

std::string_view act_quant_name(ActQuant a);

// In place over x[0, n) (n a multiple of 16 for nvfp4; blocks run along the row, so rows of
// length % 16 == 0 are never split). input_scale > 0.
// nvfp4 (specs modelopt-nvfp4 §6.1, TRT-LLM's kernel): G = 1/input_scale; per block of 16,
//   s8 = e4m3_satfinite(bamax * G / 6); a block with s8 == 0 becomes 0; else
//   x = e2m1_rne(clamp(x * (G / s8), -6, 6)) * (s8 / G).
// fp8: x = e4m3_satfinite(x / scale) * scale.   int8: as above, round half to even.
void fake_quantize_activations(ActQuant mode, float input_scale, float* x, int64_t n);

// FP8 KV cache: x = e4m3_satfinite(x / scale) * scale over x[0, n). scale > 0.
void fake_quantize_fp8(float scale, float* x, int64_t n);

}  // namespace qf

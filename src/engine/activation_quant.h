// Simulated (quantize-dequantize) activation and KV-cache quantization on the CPU, as the
// engines that run W4A4 / W8A8 / FP8-KV checkpoints apply it, so `qforge eval` measures them.
#pragma once

#include "core/act_quant.h"

#include <cstdint>

namespace qf {

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

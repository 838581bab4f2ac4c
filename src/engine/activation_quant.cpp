// Quantize-dequantize of activations and KV entries; scalar code (a small share of a forward
// next to the weight products).
#include "engine/activation_quant.h"

#include "core/numeric.h"

#include <algorithm>
#include <cmath>

namespace qf {

void fake_quantize_fp8(float scale, float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = e4m3_to_f32(f32_to_e4m3_satfinite(x[i] / scale)) * scale;
}

void fake_quantize_activations(ActQuant mode, float input_scale, float* x, int64_t n) {
  switch (mode) {
    case ActQuant::none: return;
    case ActQuant::fp8: fake_quantize_fp8(input_scale, x, n); return;
    case ActQuant::int8:
      for (int64_t i = 0; i < n; ++i) {
        const float q = std::clamp(std::nearbyint(x[i] / input_scale), -128.f, 127.f);
        x[i] = q * input_scale;
      }
      return;
    case ActQuant::nvfp4: {
      const float g = 1.0f / input_scale;
      for (int64_t b = 0; b + 16 <= n; b += 16) {
        float* blk = x + b;
        float bamax = 0.f;
        for (int i = 0; i < 16; ++i) bamax = std::max(bamax, std::fabs(blk[i]));
        const float s8 = e4m3_to_f32(f32_to_e4m3_satfinite(bamax * g / 6.0f));
        if (!(s8 > 0.f)) {
          std::fill_n(blk, 16, 0.f);
          continue;
        }
        const float enc = g / s8, dec = s8 / g;
        for (int i = 0; i < 16; ++i) {
          const float q = std::clamp(blk[i] * enc, -6.f, 6.f);
          const float m = kE2M1Values[e2m1_index_rne(std::fabs(q))];
          blk[i] = (q < 0.f ? -m : m) * dec;
        }
      }
      return;
    }
  }
}

}  // namespace qf

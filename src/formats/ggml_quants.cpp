// ggml's 32- and 64-element block formats (Q4_0, Q8_0, MXFP4, NVFP4) and the float types. Each
// quantizer repeats ggml's reference arithmetic operation for operation, because the point is
// identical bytes: tests/formats/ggml_quants_test.cpp holds them to vectors made by ggml itself.
#include "formats/ggml_quants.h"

#include "core/numeric.h"
#include "formats/ggml_quants_internal.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace qf {

float ggml_ue4m3_to_f32_half(uint8_t x) {
  if (x == 0 || x == 0x7F) return 0.f;
  const int exp = (x >> 3) & 0xF;
  const int man = x & 0x7;
  const float raw = exp == 0 ? std::ldexp(float(man), -9)
                             : std::ldexp(1.f + float(man) / 8.f, exp - 7);
  return raw * 0.5f;
}

uint8_t ggml_f32_to_ue4m3(float x) {
  if (!(x > 0.f)) return 0;
  x = std::min(x, 448.f);
  const uint32_t bits = f32_bits(x);
  const int exp = int((bits >> 23) & 0xFF) - 127 + 7;
  if (exp <= 0) {
    // ggml rounds the subnormal range through x * 512 + 0.5 and an int cast (round half up of
    // the true quotient, not of the mantissa bits as in the normal range).
    const int man = std::min(7, int(x * 512.f + 0.5f));
    return man < 1 ? 0 : uint8_t(man);
  }
  if (exp >= 15) return 0x7E;
  int man = int((bits >> 20) & 0x7) + int((bits >> 19) & 1);
  int e = exp;
  if (man > 7) {
    man = 0;
    if (++e >= 15) return 0x7E;
  }
  return uint8_t((e << 3) | man);
}

float ggml_e8m0_to_f32_half(uint8_t e) {
  // 2^(e-128) is subnormal for e < 2; as bit patterns 2^-128 and 2^-127.
  if (e < 2) return f32_from_bits(0x00200000u << e);
  return f32_from_bits(uint32_t(e - 1) << 23);
}

uint8_t ggml_fp4_best_index(float x, float d) {
  uint8_t best = 0;
  float best_err = std::fabs(float(kGgmlFp4Values[0]) * d - x);
  for (uint8_t i = 1; i < 16; ++i) {
    const float err = std::fabs(float(kGgmlFp4Values[i]) * d - x);
    if (err < best_err) {  // strict: the first minimum wins
      best = i;
      best_err = err;
    }
  }
  return best;
}

void ggml_quantize_q4_0(const float* x, uint8_t* out, int64_t n) {
  for (int64_t b = 0; b < n / 32; ++b, x += 32, out += 18) {
    // The signed value of largest magnitude, first on ties, so d = max / -8 maps it to q = 0.
    float amax = 0.f, max = 0.f;
    for (int j = 0; j < 32; ++j) {
      if (amax < std::fabs(x[j])) {
        amax = std::fabs(x[j]);
        max = x[j];
      }
    }
    const float d = max / -8;
    const float id = d != 0.f ? 1.f / d : 0.f;
    ggml_store_f16(out, d);
    for (int j = 0; j < 16; ++j) {
      // ggml truncates x*id + 8.5 through an int8 cast: the argument is >= 0.5, so that is
      // round half up of x*id + 8.
      const int q0 = std::min(15, int(int8_t(x[j] * id + 8.5f)));
      const int q1 = std::min(15, int(int8_t(x[j + 16] * id + 8.5f)));
      out[2 + j] = uint8_t(q0 | (q1 << 4));
    }
  }
}

void ggml_dequantize_q4_0(const uint8_t* in, float* y, int64_t n) {
  for (int64_t b = 0; b < n / 32; ++b, in += 18, y += 32) {
    const float d = f16_to_f32(ggml_load_u16(in));
    for (int j = 0; j < 16; ++j) {
      y[j] = float((in[2 + j] & 0xF) - 8) * d;
      y[j + 16] = float((in[2 + j] >> 4) - 8) * d;
    }
  }
}

void ggml_quantize_q8_0(const float* x, uint8_t* out, int64_t n) {
  for (int64_t b = 0; b < n / 32; ++b, x += 32, out += 34) {
    float amax = 0.f;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127;
    const float id = d != 0.f ? 1.f / d : 0.f;
    ggml_store_f16(out, d);
    for (int j = 0; j < 32; ++j) out[2 + j] = uint8_t(int8_t(std::round(x[j] * id)));
  }
}

void ggml_dequantize_q8_0(const uint8_t* in, float* y, int64_t n) {
  for (int64_t b = 0; b < n / 32; ++b, in += 34, y += 32) {
    const float d = f16_to_f32(ggml_load_u16(in));
    for (int j = 0; j < 32; ++j) y[j] = float(int8_t(in[2 + j])) * d;
  }
}

void ggml_quantize_mxfp4(const float* x, uint8_t* out, int64_t n) {
  for (int64_t b = 0; b < n / 32; ++b, x += 32, out += 17) {
    float amax = 0.f;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[j]));
    uint8_t e = 0;
    if (amax > 0.f) {
      const float biased = std::floor(std::log2(amax)) - 2 + 127;
      e = biased < 0.f ? 0 : uint8_t(biased);
    }
    const float d = ggml_e8m0_to_f32_half(e);
    out[0] = e;
    for (int j = 0; j < 16; ++j)
      out[1 + j] = uint8_t(ggml_fp4_best_index(x[j], d) | (ggml_fp4_best_index(x[j + 16], d) << 4));
  }
}

void ggml_dequantize_mxfp4(const uint8_t* in, float* y, int64_t n) {
  for (int64_t b = 0; b < n / 32; ++b, in += 17, y += 32) {
    const float d = ggml_e8m0_to_f32_half(in[0]);
    for (int j = 0; j < 16; ++j) {
      y[j] = float(kGgmlFp4Values[in[1 + j] & 0xF]) * d;
      y[j + 16] = float(kGgmlFp4Values[in[1 + j] >> 4]) * d;
    }
  }
}

void ggml_quantize_nvfp4(const float* x, uint8_t* out, int64_t n) {
  for (int64_t b = 0; b < n / 64; ++b, out += 36) {
    for (int s = 0; s < 4; ++s, x += 16) {
      float amax = 0.f;
      for (int j = 0; j < 16; ++j) amax = std::max(amax, std::fabs(x[j]));
      const uint8_t ue = ggml_f32_to_ue4m3(amax / 6.f);
      out[s] = ue;
      const float d = ggml_ue4m3_to_f32_half(ue);
      for (int j = 0; j < 8; ++j)
        out[4 + 8 * s + j] =
            uint8_t(ggml_fp4_best_index(x[j], d) | (ggml_fp4_best_index(x[j + 8], d) << 4));
    }
  }
}

void ggml_dequantize_nvfp4(const uint8_t* in, float* y, int64_t n) {
  for (int64_t b = 0; b < n / 64; ++b, in += 36) {
    for (int s = 0; s < 4; ++s, y += 16) {
      const float d = ggml_ue4m3_to_f32_half(in[s]);
      for (int j = 0; j < 8; ++j) {
        const uint8_t q = in[4 + 8 * s + j];
        y[j] = float(kGgmlFp4Values[q & 0xF]) * d;
        y[j + 8] = float(kGgmlFp4Values[q >> 4]) * d;
      }
    }
  }
}

void ggml_quantize_f32(const float* x, uint8_t* out, int64_t n) {
  std::memcpy(out, x, size_t(n) * 4);
}
void ggml_dequantize_f32(const uint8_t* in, float* y, int64_t n) {
  std::memcpy(y, in, size_t(n) * 4);
}
void ggml_quantize_f16(const float* x, uint8_t* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) ggml_store_f16(out + 2 * i, x[i]);
}
void ggml_dequantize_f16(const uint8_t* in, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = f16_to_f32(ggml_load_u16(in + 2 * i));
}
void ggml_quantize_bf16(const float* x, uint8_t* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) ggml_store_u16(out + 2 * i, f32_to_bf16(x[i]));
}
void ggml_dequantize_bf16(const uint8_t* in, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = bf16_to_f32(ggml_load_u16(in + 2 * i));
}

}  // namespace qf

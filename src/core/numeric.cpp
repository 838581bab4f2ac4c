#include "core/numeric.h"

namespace qf {

float f16_to_f32(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1Fu;
  const uint32_t man = h & 0x3FFu;
  if (exp == 0x1F) return f32_from_bits(sign | 0x7F800000u | (man << 13));
  if (exp == 0) {
    // Subnormal (or zero): man * 2^-24, exact in float32.
    const float v = float(man) * 0x1p-24f;
    return sign ? -v : v;
  }
  return f32_from_bits(sign | ((exp + 112u) << 23) | (man << 13));
}

uint16_t f32_to_f16(float x) {
  const uint32_t u = f32_bits(x);
  const uint16_t sign = uint16_t((u >> 16) & 0x8000u);
  const uint32_t a = u & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return uint16_t(sign | 0x7E00u | ((a >> 13) & 0x3FFu));  // NaN
  if (a >= 0x477FF000u) return uint16_t(sign | 0x7C00u);  // rounds to >= 65536: infinity
  if (a < 0x38800000u) {
    // Result is subnormal in FP16 (|x| < 2^-14): quantum 2^-24. Adding 0.5 (exponent 2^-1)
    // makes the FPU round |x| to a multiple of 2^-24 with round-to-nearest-even.
    const float r = f32_from_bits(a) + 0.5f;
    return uint16_t(sign | uint16_t(f32_bits(r) - f32_bits(0.5f)));
  }
  // Normal: drop 13 mantissa bits with round to nearest even; a carry into the exponent is
  // the correct result (it can reach 0x7C00 only when the input was >= 65520, handled above).
  const uint32_t rounded = a + 0xFFFu + ((a >> 13) & 1u);
  return uint16_t(sign | ((rounded - 0x38000000u) >> 13));
}

float e4m3_to_f32(uint8_t code) {
  const bool neg = code & 0x80;
  const uint32_t exp = (code >> 3) & 0xF;
  const uint32_t man = code & 0x7;
  float v;
  if (exp == 0xF && man == 0x7) {
    v = std::nanf("");
  } else if (exp == 0) {
    v = float(man) * 0x1p-9f;
  } else {
    v = f32_from_bits(((exp + 120u) << 23) | (man << 20));
  }
  return neg ? -v : v;
}

namespace {
// Shared rounding core of E4M3 for |x| given as float bits, |x| < 480 and not NaN.
uint8_t e4m3_round_magnitude(uint32_t a) {
  if (a < (121u << 23)) {
    // |x| < 2^-6: subnormal range, quantum 2^-9. Adding 2^-(9-23+127)... i.e. a float whose
    // ulp is 2^-9 makes the FPU round to a multiple of 2^-9 with round-to-nearest-even.
    const float magic = f32_from_bits(141u << 23);  // 2^14, ulp 2^-9
    const float r = f32_from_bits(a) + magic;
    return uint8_t(f32_bits(r) - f32_bits(magic));
  }
  const uint32_t mant_odd = (a >> 20) & 1u;
  uint32_t r = a + ((uint32_t(7 - 127) << 23) + 0x7FFFFu);
  r += mant_odd;
  return uint8_t(r >> 20);
}
}  // namespace

uint8_t f32_to_e4m3(float x) {
  const uint32_t u = f32_bits(x);
  const uint8_t sign = uint8_t((u >> 24) & 0x80u);
  const uint32_t a = u & 0x7FFFFFFFu;
  if (a >= 0x43F00000u) return uint8_t(sign | 0x7F);  // >= 480, Inf, NaN
  return uint8_t(sign | e4m3_round_magnitude(a));     // [464, 480) rounds to 0x7F (NaN) too
}

uint8_t f32_to_e4m3_satfinite(float x) {
  const uint32_t u = f32_bits(x);
  const uint8_t sign = uint8_t((u >> 24) & 0x80u);
  const uint32_t a = u & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return uint8_t(sign | 0x7F);
  if (a >= 0x43E00000u) return uint8_t(sign | 0x7E);  // >= 448
  return uint8_t(sign | e4m3_round_magnitude(a));
}

float e5m2_to_f32(uint8_t code) {
  // E5M2 is the top byte of an FP16.
  return f16_to_f32(uint16_t(code) << 8);
}

uint8_t f32_to_e5m2(float x) {
  const uint32_t u = f32_bits(x);
  const uint8_t sign = uint8_t((u >> 24) & 0x80u);
  const uint32_t a = u & 0x7FFFFFFFu;
  if (a >= (143u << 23)) return uint8_t(sign | (a > 0x7F800000u ? 0x7F : 0x7C));
  if (a < (113u << 23)) {
    // |x| < 2^-14: subnormal, quantum 2^-16.
    const float magic = f32_from_bits(134u << 23);  // 2^7, ulp 2^-16
    const float r = f32_from_bits(a) + magic;
    return uint8_t(sign | uint8_t(f32_bits(r) - f32_bits(magic)));
  }
  const uint32_t mant_odd = (a >> 21) & 1u;
  uint32_t r = a + ((uint32_t(15 - 127) << 23) + 0xFFFFFu);
  r += mant_odd;
  return uint8_t(sign | uint8_t(r >> 21));
}

}  // namespace qf

// ggml's k-quants Q4_K, Q5_K and Q6_K: 256-element super-blocks of 8 (Q4_K, Q5_K: scale and
// min per 32) or 16 (Q6_K: signed scale per 16) sub-blocks whose scales are themselves
// quantized against one fp16 super-scale. The scale searches (make_qkx2_quants,
// make_qx_quants) are repeated operation for operation, in ggml's order of float operations,
// because the goal is ggml's exact bytes (this file is built with -ffp-contract=off so the
// compiler does not fuse a multiply and an add that ggml keeps apart).
#include "formats/ggml_quants.h"

#include "formats/ggml_quants_internal.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace qf {

float ggml_make_qx(int n, int nmax, const float* x, int8_t* L, const float* qw) {
  float max = 0, amax = 0;
  for (int i = 0; i < n; ++i) {
    const float ax = std::fabs(x[i]);
    if (ax > amax) {
      amax = ax;
      max = x[i];
    }
  }
  if (amax < 1e-15f) {  // GROUP_MAX_EPS
    for (int i = 0; i < n; ++i) L[i] = 0;
    return 0.f;
  }
  float iscale = float(-nmax) / max;
  float sumlx = 0, suml2 = 0;
  for (int i = 0; i < n; ++i) {
    int l = ggml_nearest_int(iscale * x[i]);
    l = std::max(-nmax, std::min(nmax - 1, l));
    L[i] = int8_t(l + nmax);
    const float w = qw ? qw[i] : x[i] * x[i];
    sumlx += w * x[i] * float(l);
    suml2 += w * float(l) * float(l);
  }
  float scale = suml2 != 0.f ? sumlx / suml2 : 0.f;
  float best = scale * sumlx;
  for (int is = -9; is <= 9; ++is) {
    if (is == 0) continue;
    iscale = -(float(nmax) + 0.1f * float(is)) / max;
    sumlx = suml2 = 0;
    for (int i = 0; i < n; ++i) {
      int l = ggml_nearest_int(iscale * x[i]);
      l = std::max(-nmax, std::min(nmax - 1, l));
      const float w = qw ? qw[i] : x[i] * x[i];
      sumlx += w * x[i] * float(l);
      suml2 += w * float(l) * float(l);
    }
    if (suml2 > 0 && sumlx * sumlx > best * suml2) {
      for (int i = 0; i < n; ++i) {
        const int l = ggml_nearest_int(iscale * x[i]);
        L[i] = int8_t(nmax + std::max(-nmax, std::min(nmax - 1, l)));
      }
      scale = sumlx / suml2;
      best = scale * sumlx;
    }
  }
  return scale;
}

float ggml_make_scale_min(int n, int nmax, const float* x, const float* weights, uint8_t* L,
                          float* neg_min, uint8_t* Laux, float rmin, float rdelta, int nstep) {
  float min = x[0], max = x[0];
  float sum_w = weights[0];
  float sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    if (x[i] < min) min = x[i];
    if (x[i] > max) max = x[i];
    const float w = weights[i];
    sum_w += w;
    sum_x += w * x[i];
  }
  if (min > 0) min = 0;
  if (max == min) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    *neg_min = -min;
    return 0.f;
  }
  float iscale = float(nmax) / (max - min);
  float scale = 1 / iscale;
  float best_error = 0;
  for (int i = 0; i < n; ++i) {
    const int l = ggml_nearest_int(iscale * (x[i] - min));
    L[i] = uint8_t(std::max(0, std::min(nmax, l)));
    float diff = scale * float(L[i]) + min - x[i];
    diff = diff * diff;
    best_error += weights[i] * diff;
  }
  for (int is = 0; is <= nstep; ++is) {
    iscale = (rmin + rdelta * float(is) + float(nmax)) / (max - min);
    float sum_l = 0, sum_l2 = 0, sum_xl = 0;
    for (int i = 0; i < n; ++i) {
      int l = ggml_nearest_int(iscale * (x[i] - min));
      l = std::max(0, std::min(nmax, l));
      Laux[i] = uint8_t(l);
      const float w = weights[i];
      sum_l += w * float(l);
      sum_l2 += w * float(l) * float(l);
      sum_xl += w * float(l) * x[i];
    }
    const float D = sum_w * sum_l2 - sum_l * sum_l;
    if (D > 0) {
      float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
      float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
      if (this_min > 0) {
        this_min = 0;
        this_scale = sum_xl / sum_l2;
      }
      float cur_error = 0;
      for (int i = 0; i < n; ++i) {
        float diff = this_scale * float(Laux[i]) + this_min - x[i];
        diff = diff * diff;
        cur_error += weights[i] * diff;
      }
      if (cur_error < best_error) {
        std::memcpy(L, Laux, size_t(n));
        best_error = cur_error;
        scale = this_scale;
        min = this_min;
      }
    }
  }
  *neg_min = -min;
  return scale;
}

namespace {

constexpr int kQK = 256;



// Shared by Q4_K and Q5_K: header (d, dmin, 12 scale bytes at out[0..15]) and the final levels
// L[256] in [0, nmax].
void quantize_scale_min_superblock(const float* x, int nmax, float rmin, int nstep, uint8_t* out,
                                   uint8_t* L) {
  uint8_t Laux[32];
  float weights[32];
  float mins[8], scales[8];
  float max_scale = 0, max_min = 0;
  for (int j = 0; j < 8; ++j) {
    const float* xs = x + 32 * j;
    float sum_x2 = 0;
    for (int l = 0; l < 32; ++l) sum_x2 += xs[l] * xs[l];
    const float av_x = std::sqrt(sum_x2 / 32);
    for (int l = 0; l < 32; ++l) weights[l] = av_x + std::fabs(xs[l]);
    scales[j] = ggml_make_scale_min(32, nmax, xs, weights, L + 32 * j, &mins[j], Laux, rmin,
                                    0.1f, nstep);
    if (scales[j] > max_scale) max_scale = scales[j];
    if (mins[j] > max_min) max_min = mins[j];
  }
  const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
  const float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
  uint8_t ls[8], lm[8];
  for (int j = 0; j < 8; ++j) {
    // ggml stores nearest_int into a uint8_t before the min: the conversion wraps modulo 256.
    ls[j] = std::min<uint8_t>(63, uint8_t(ggml_nearest_int(inv_scale * scales[j])));
    lm[j] = std::min<uint8_t>(63, uint8_t(ggml_nearest_int(inv_min * mins[j])));
  }
  ggml_k4_pack_scale_min(ls, lm, out + 4);
  ggml_store_f16(out, max_scale / 63.f);
  ggml_store_f16(out + 2, max_min / 63.f);
  ggml_k4_levels(x, out, nmax, L);
}

}  // namespace

// ggml's get_scale_min_k4: bytes 0..3 scales 0..3, 4..7 mins 0..3, 8..11 low nibbles of
// scales/mins 4..7 whose top two bits sit in the top bits of bytes 0..7.
void ggml_k4_scale_min(int j, const uint8_t* q, uint8_t* d, uint8_t* m) {
  if (j < 4) {
    *d = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *d = uint8_t((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    *m = uint8_t((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

void ggml_pack_q4_k_levels(const uint8_t* L, uint8_t* blk) {
  uint8_t* q = blk + 16;
  for (int j = 0; j < kQK; j += 64, q += 32)
    for (int l = 0; l < 32; ++l) q[l] = uint8_t(L[j + l] | (L[j + l + 32] << 4));
}
void ggml_pack_q5_k_levels(const uint8_t* L, uint8_t* blk) {
  uint8_t* qh = blk + 16;
  uint8_t* ql = blk + 48;
  std::memset(qh, 0, 32);
  uint8_t m1 = 1, m2 = 2;
  for (int n = 0; n < kQK; n += 64, ql += 32) {
    for (int j = 0; j < 32; ++j) {
      int l1 = L[n + j], l2 = L[n + j + 32];
      if (l1 > 15) {
        l1 -= 16;
        qh[j] |= m1;
      }
      if (l2 > 15) {
        l2 -= 16;
        qh[j] |= m2;
      }
      ql[j] = uint8_t(l1 | (l2 << 4));
    }
    m1 = uint8_t(m1 << 2);
    m2 = uint8_t(m2 << 2);
  }
}
void ggml_pack_q6_k_levels(const uint8_t* L, uint8_t* blk) {
  uint8_t* ql = blk;
  uint8_t* qh = blk + 128;
  for (int j = 0; j < kQK; j += 128, ql += 64, qh += 32) {
    for (int l = 0; l < 32; ++l) {
      const int a = L[j + l], b = L[j + l + 32], c = L[j + l + 64], e = L[j + l + 96];
      ql[l] = uint8_t((a & 0xF) | ((c & 0xF) << 4));
      ql[l + 32] = uint8_t((b & 0xF) | ((e & 0xF) << 4));
      qh[l] = uint8_t((a >> 4) | ((b >> 4) << 2) | ((c >> 4) << 4) | ((e >> 4) << 6));
    }
  }
}

void ggml_k4_pack_scale_min(const uint8_t* ls, const uint8_t* lm, uint8_t* sc) {
  for (int j = 0; j < 8; ++j) {
    if (j < 4) {
      sc[j] = ls[j];
      sc[j + 4] = lm[j];
    } else {
      sc[j + 4] = uint8_t((ls[j] & 0xF) | ((lm[j] & 0xF) << 4));
      sc[j - 4] |= uint8_t((ls[j] >> 4) << 6);
      sc[j] |= uint8_t((lm[j] >> 4) << 6);
    }
  }
}

void ggml_k4_levels(const float* x, const uint8_t* block, int nmax, uint8_t* L) {
  const float dd = ggml_load_f16(block), dmin = ggml_load_f16(block + 2);
  for (int j = 0; j < 8; ++j) {
    uint8_t s, m;
    ggml_k4_scale_min(j, block + 4, &s, &m);
    const float d = dd * float(s);
    if (d == 0.f) continue;
    const float dm = dmin * float(m);
    for (int ii = 0; ii < 32; ++ii) {
      const int l = ggml_nearest_int((x[32 * j + ii] + dm) / d);
      L[32 * j + ii] = uint8_t(std::max(0, std::min(nmax, l)));
    }
  }
}

void ggml_quantize_q4_k(const float* x, uint8_t* out, int64_t n) {
  uint8_t L[kQK];
  for (int64_t b = 0; b < n / kQK; ++b, x += kQK, out += 144) {
    quantize_scale_min_superblock(x, 15, -1.f, 20, out, L);
    ggml_pack_q4_k_levels(L, out);
  }
}

void ggml_dequantize_q4_k(const uint8_t* in, float* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK; ++b, in += 144) {
    const float d = ggml_load_f16(in), min = ggml_load_f16(in + 2);
    const uint8_t* q = in + 16;
    for (int j = 0, is = 0; j < kQK; j += 64, q += 32, is += 2) {
      uint8_t sc, m;
      ggml_k4_scale_min(is, in + 4, &sc, &m);
      const float d1 = d * float(sc), m1 = min * float(m);
      ggml_k4_scale_min(is + 1, in + 4, &sc, &m);
      const float d2 = d * float(sc), m2 = min * float(m);
      for (int l = 0; l < 32; ++l) *y++ = d1 * float(q[l] & 0xF) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * float(q[l] >> 4) - m2;
    }
  }
}

void ggml_quantize_q5_k(const float* x, uint8_t* out, int64_t n) {
  uint8_t L[kQK];
  for (int64_t b = 0; b < n / kQK; ++b, x += kQK, out += 176) {
    quantize_scale_min_superblock(x, 31, -0.5f, 15, out, L);
    ggml_pack_q5_k_levels(L, out);
  }
}

void ggml_dequantize_q5_k(const uint8_t* in, float* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK; ++b, in += 176) {
    const float d = ggml_load_f16(in), min = ggml_load_f16(in + 2);
    const uint8_t* qh = in + 16;
    const uint8_t* ql = in + 48;
    uint8_t u1 = 1, u2 = 2;
    for (int j = 0, is = 0; j < kQK; j += 64, ql += 32, is += 2) {
      uint8_t sc, m;
      ggml_k4_scale_min(is, in + 4, &sc, &m);
      const float d1 = d * float(sc), m1 = min * float(m);
      ggml_k4_scale_min(is + 1, in + 4, &sc, &m);
      const float d2 = d * float(sc), m2 = min * float(m);
      for (int l = 0; l < 32; ++l) *y++ = d1 * float((ql[l] & 0xF) + (qh[l] & u1 ? 16 : 0)) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * float((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
      u1 = uint8_t(u1 << 2);
      u2 = uint8_t(u2 << 2);
    }
  }
}

// Q6_K layout: ql[128] low nibbles, qh[64] high 2 bits, int8 scales[16], fp16 d (at 208).
void ggml_quantize_q6_k_block(const float* x, const float* qw, uint8_t* out) {
  int8_t L[kQK];
  float scales[16];
  float max_scale = 0, max_abs_scale = 0;
  for (int ib = 0; ib < 16; ++ib) {
    const float* w = qw ? qw + 16 * ib : nullptr;
    const float scale = ggml_make_qx(16, 32, x + 16 * ib, L + 16 * ib, w);
    scales[ib] = scale;
    if (std::fabs(scale) > max_abs_scale) {
      max_abs_scale = std::fabs(scale);
      max_scale = scale;
    }
  }
  if (max_abs_scale < 1e-15f) {  // GROUP_MAX_EPS
    std::memset(out, 0, 210);
    return;
  }
  const float iscale = -128.f / max_scale;
  ggml_store_f16(out + 208, 1 / iscale);
  int8_t* sc = reinterpret_cast<int8_t*>(out + 192);
  for (int ib = 0; ib < 16; ++ib)
    sc[ib] = int8_t(std::min(127, ggml_nearest_int(iscale * scales[ib])));
  const float dd = ggml_load_f16(out + 208);
  for (int j = 0; j < 16; ++j) {
    const float d = dd * float(sc[j]);
    if (d == 0.f) continue;
    for (int ii = 0; ii < 16; ++ii) {
      const int l = ggml_nearest_int(x[16 * j + ii] / d);
      L[16 * j + ii] = int8_t(std::max(-32, std::min(31, l)) + 32);
    }
  }
  ggml_pack_q6_k_levels(reinterpret_cast<const uint8_t*>(L), out);
}

void ggml_quantize_q6_k(const float* x, uint8_t* out, int64_t n) {
  for (int64_t b = 0; b < n / kQK; ++b)
    ggml_quantize_q6_k_block(x + b * kQK, nullptr, out + b * 210);
}

void ggml_dequantize_q6_k(const uint8_t* in, float* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK; ++b, in += 210) {
    const float d = ggml_load_f16(in + 208);
    const uint8_t* ql = in;
    const uint8_t* qh = in + 128;
    const int8_t* sc = reinterpret_cast<const int8_t*>(in + 192);
    for (int j = 0; j < kQK; j += 128, y += 128, ql += 64, qh += 32, sc += 8) {
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        y[l] = d * float(sc[is]) * float(q1);
        y[l + 32] = d * float(sc[is + 2]) * float(q2);
        y[l + 64] = d * float(sc[is + 4]) * float(q3);
        y[l + 96] = d * float(sc[is + 6]) * float(q4);
      }
    }
  }
}

}  // namespace qf

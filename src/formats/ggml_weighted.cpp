// Importance-weighted ggml quantizers and the frozen-scale grid (see the header). The searches
// repeat ggml's float operations in ggml's order, because the goal is llama-quantize's exact
// bytes; this file is built with -ffp-contract=off like the reference quantizers.
#include "formats/ggml_weighted.h"

#include "core/error.h"
#include "formats/ggml_quants.h"
#include "formats/ggml_quants_internal.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace qf {
namespace {

constexpr int kQK = 256;
constexpr float kGroupMaxEps = 1e-15f;  // ggml's GROUP_MAX_EPS

// ggml's make_qp_quants: a positive super-scale for the n non-negative values x (the sub-block
// scales or mins) as scale * L, L in [0, nmax], chosen among 9 candidates by weighted squared
// error and then refined by up to 5 passes that move single levels while the weighted
// least-squares fit improves.
float make_qp(int n, int nmax, const float* x, uint8_t* L, const float* qw) {
  float max = 0;
  for (int i = 0; i < n; ++i) max = std::max(max, x[i]);
  if (max < kGroupMaxEps) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    return 0.f;
  }
  float iscale = float(nmax) / max;
  for (int i = 0; i < n; ++i) L[i] = uint8_t(ggml_nearest_int(iscale * x[i]));
  const float scale = 1 / iscale;
  float best_mse = 0;
  for (int i = 0; i < n; ++i) {
    const float diff = x[i] - scale * float(L[i]);
    best_mse += qw[i] * diff * diff;
  }
  for (int is = -4; is <= 4; ++is) {
    if (is == 0) continue;
    const float iscale_is = (0.1f * float(is) + float(nmax)) / max;
    const float scale_is = 1 / iscale_is;
    float mse = 0;
    for (int i = 0; i < n; ++i) {
      const int l = std::min(nmax, ggml_nearest_int(iscale_is * x[i]));
      const float diff = x[i] - scale_is * float(l);
      mse += qw[i] * diff * diff;
    }
    if (mse < best_mse) {
      best_mse = mse;
      iscale = iscale_is;
    }
  }
  float sumlx = 0, suml2 = 0;
  for (int i = 0; i < n; ++i) {
    const int l = std::min(nmax, ggml_nearest_int(iscale * x[i]));
    L[i] = uint8_t(l);
    const float w = qw[i];
    sumlx += w * x[i] * float(l);
    suml2 += w * float(l) * float(l);
  }
  for (int itry = 0; itry < 5; ++itry) {
    int n_changed = 0;
    for (int i = 0; i < n; ++i) {
      const float w = qw[i];
      float slx = sumlx - w * x[i] * float(L[i]);
      float sl2 = suml2 - w * float(L[i]) * float(L[i]);
      if (slx > 0 && sl2 > 0) {
        const int new_l = std::min(nmax, ggml_nearest_int(x[i] * sl2 / slx));
        if (new_l != L[i]) {
          slx += w * x[i] * float(new_l);
          sl2 += w * float(new_l) * float(new_l);
          if (slx * slx * suml2 > sumlx * sumlx * sl2) {
            L[i] = uint8_t(new_l);
            sumlx = slx;
            suml2 = sl2;
            ++n_changed;
          }
        }
      }
    }
    if (!n_changed) break;
  }
  return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}


// --- code packing, shared by the weighted quantizers and ggml_pack_codes -------------------

void pack_q4_0(const uint8_t* L, uint8_t* blk) {
  for (int j = 0; j < 16; ++j) blk[2 + j] = uint8_t(L[j] | (L[j + 16] << 4));
}
// MXFP4 (32: element j low nibble of qs[j], j + 16 high) and each 16 of NVFP4 (element j low
// nibble of qs[j], j + 8 high): ggml's split halves.
void pack_fp4(const uint8_t* L, int n, uint8_t* qs) {
  for (int j = 0; j < n / 2; ++j) qs[j] = uint8_t(L[j] | (L[j + n / 2] << 4));
}

// --- ggml's weighted quantizers, one row ---------------------------------------------------

void q4_0_row(const float* x, uint8_t* out, int64_t n, const float* qw) {
  float sum_x2 = 0;
  for (int64_t j = 0; j < n; ++j) sum_x2 += x[j] * x[j];
  const float sigma2 = sum_x2 / float(n);
  float weight[32];
  int8_t L[32];
  for (int64_t ib = 0; ib < n / 32; ++ib, out += 18) {
    const float* xb = x + 32 * ib;
    const float* w = qw + 32 * ib;
    for (int j = 0; j < 32; ++j) weight[j] = w[j] * std::sqrt(sigma2 + xb[j] * xb[j]);
    const float d = ggml_make_qx(32, 8, xb, L, weight);
    ggml_store_f16(out, d);
    pack_q4_0(reinterpret_cast<const uint8_t*>(L), out);
  }
}

// Q4_K (nmax 15) and Q5_K (nmax 31): ggml's quantize_row_q{4,5}_K_impl.
void scale_min_k_row(const float* x, uint8_t* out, int64_t n, const float* qw, int nmax) {
  const int block_bytes = nmax == 15 ? 144 : 176;
  uint8_t L[kQK], Laux[32], Ls[8], Lm[8];
  float weights[32], sw[8], mins[8], scales[8];
  for (int64_t i = 0; i < n / kQK; ++i, x += kQK, qw += kQK, out += block_bytes) {
    float sum_x2 = 0;
    for (int l = 0; l < kQK; ++l) sum_x2 += x[l] * x[l];
    const float sigma2 = 2 * sum_x2 / kQK;
    for (int j = 0; j < 8; ++j) {
      const float* w = qw + 32 * j;
      for (int l = 0; l < 32; ++l)
        weights[l] = w[l] * std::sqrt(sigma2 + x[32 * j + l] * x[32 * j + l]);
      float sumw = 0;
      for (int l = 0; l < 32; ++l) sumw += weights[l];
      sw[j] = sumw;
      scales[j] = ggml_make_scale_min(32, nmax, x + 32 * j, weights, L + 32 * j, &mins[j], Laux,
                                      -0.9f, 0.05f, 36);
    }
    const float d_block = make_qp(8, 63, scales, Ls, sw);
    const float m_block = make_qp(8, 63, mins, Lm, sw);
    for (int j = 0; j < 8; ++j) {
      Ls[j] = std::min<uint8_t>(63, Ls[j]);
      Lm[j] = std::min<uint8_t>(63, Lm[j]);
    }
    ggml_k4_pack_scale_min(Ls, Lm, out + 4);
    ggml_store_f16(out, d_block);
    ggml_store_f16(out + 2, m_block);
    ggml_k4_levels(x, out, nmax, L);
    if (nmax == 15)
      ggml_pack_q4_k_levels(L, out);
    else
      ggml_pack_q5_k_levels(L, out);
  }
}

void q6_k_row(const float* x, uint8_t* out, int64_t n, const float* qw) {
  for (int64_t b = 0; b < n / kQK; ++b)
    ggml_quantize_q6_k_block(x + b * kQK, qw + b * kQK, out + b * 210);
}

}  // namespace

bool ggml_type_uses_importance(GgmlType type) {
  return type == GgmlType::Q4_0 || type == GgmlType::Q4_K || type == GgmlType::Q5_K ||
         type == GgmlType::Q6_K;
}

void ggml_quantize_row_weighted(GgmlType type, const float* x, uint8_t* out, int64_t n_per_row,
                                const float* importance) {
  const GgmlTypeInfo& info = ggml_type_info(type);
  if (!info.quantize || type == GgmlType::F32 || type == GgmlType::F16 || type == GgmlType::BF16)
    fail("ggml_quantize_row_weighted: {} is not a quantized type qforge writes", info.name);
  if (n_per_row % info.block_size != 0)
    fail("ggml_quantize_row_weighted: row of {} is not a multiple of {}'s block {}", n_per_row,
         info.name, info.block_size);
  if (!importance || !ggml_type_uses_importance(type)) {
    info.quantize(x, out, n_per_row);
    return;
  }
  switch (type) {
    case GgmlType::Q4_0: q4_0_row(x, out, n_per_row, importance); break;
    case GgmlType::Q4_K: scale_min_k_row(x, out, n_per_row, importance, 15); break;
    case GgmlType::Q5_K: scale_min_k_row(x, out, n_per_row, importance, 31); break;
    default: q6_k_row(x, out, n_per_row, importance); break;
  }
}

void qforge_quantize_mxfp4_weighted(const float* x, uint8_t* out, int64_t n, const float* w) {
  uint8_t L[32], best_L[32] = {};
  for (int64_t b = 0; b < n / 32; ++b, x += 32, w += 32, out += 17) {
    float amax = 0.f;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[j]));
    int e0 = 0;
    if (amax > 0.f) e0 = std::max(0, int(std::floor(std::log2(amax)) - 2 + 127));
    float best = INFINITY;
    int best_e = e0;
    for (int e : {e0, e0 - 1, e0 + 1}) {
      if (e < 0 || e > 254) continue;
      const float d = ggml_e8m0_to_f32_half(uint8_t(e));
      float err = 0.f;
      for (int j = 0; j < 32; ++j) {
        L[j] = ggml_fp4_best_index(x[j], d);
        const float diff = x[j] - float(kGgmlFp4Values[L[j]]) * d;
        err += w[j] * diff * diff;
      }
      if (err < best) {
        best = err;
        best_e = e;
        std::memcpy(best_L, L, 32);
      }
    }
    out[0] = uint8_t(best_e);
    pack_fp4(best_L, 32, out + 1);
  }
}

void qforge_quantize_nvfp4_weighted(const float* x, uint8_t* out, int64_t n, float g,
                                    const float* w, const float* h) {
  uint8_t L[16], best_L[16] = {};
  float dw[16];
  for (int64_t b = 0; b < n / 64; ++b, out += 36) {
    for (int s = 0; s < 4; ++s, x += 16) {
      const int64_t blk = b * 4 + s;
      float amax = 0.f;
      for (int j = 0; j < 16; ++j) amax = std::max(amax, std::fabs(x[j]));
      if (amax == 0.f || g <= 0.f) {
        out[s] = 0;
        std::memset(out + 4 + 8 * s, 0, 8);
        continue;
      }
      // Candidates: from two binades below the max-based code to one above (an error-weighted
      // search never gains from scales far from the block's range).
      const int c0 = ggml_f32_to_ue4m3(amax / 6.f / g);
      const int lo = std::max(1, c0 - 16), hi = std::min(0x7E, c0 + 8);
      float best = INFINITY;
      int best_c = std::max(1, c0);
      for (int c = lo; c <= hi; ++c) {
        const float d = ggml_ue4m3_to_f32_half(uint8_t(c)) * g;
        for (int j = 0; j < 16; ++j) {
          L[j] = ggml_fp4_best_index(x[j], d);
          dw[j] = x[j] - float(kGgmlFp4Values[L[j]]) * d;
        }
        float err = 0.f;
        if (h) {
          const float* hb = h + blk * 256;
          for (int i = 0; i < 16; ++i) {
            float row = 0.f;
            for (int k = 0; k < 16; ++k) row += hb[i * 16 + k] * dw[k];
            err += dw[i] * row;
          }
        } else {
          const float* wb = w + blk * 16;
          for (int j = 0; j < 16; ++j) err += wb[j] * dw[j] * dw[j];
        }
        if (err < best) {
          best = err;
          best_c = c;
          std::memcpy(best_L, L, 16);
        }
      }
      if (!(best < INFINITY)) {  // no candidate evaluated (cannot happen for finite x)
        const float d = ggml_ue4m3_to_f32_half(uint8_t(best_c)) * g;
        for (int j = 0; j < 16; ++j) best_L[j] = ggml_fp4_best_index(x[j], d);
      }
      out[s] = uint8_t(best_c);
      pack_fp4(best_L, 16, out + 4 + 8 * s);
    }
  }
}

// --- the frozen grid -----------------------------------------------------------------------

void ggml_frozen_row(GgmlType type, const uint8_t* row, int64_t n, float g, GgmlFrozenRow& r) {
  r.type = type;
  r.fp4 = type == GgmlType::MXFP4 || type == GgmlType::NVFP4;
  r.scale.assign(size_t(n), 0.f);
  r.offset.assign(size_t(n), 0.f);
  r.codes.assign(size_t(n), 0);
  float* sc = r.scale.data();
  float* of = r.offset.data();
  uint8_t* L = r.codes.data();
  switch (type) {
    case GgmlType::Q4_0:
      r.levels = 16;
      for (int64_t b = 0; b < n / 32; ++b, row += 18) {
        const float d = ggml_load_f16(row);
        for (int j = 0; j < 16; ++j) {
          L[32 * b + j] = row[2 + j] & 0xF;
          L[32 * b + j + 16] = row[2 + j] >> 4;
        }
        for (int j = 0; j < 32; ++j) sc[32 * b + j] = d;
      }
      break;
    case GgmlType::Q8_0:
      r.levels = 256;
      for (int64_t b = 0; b < n / 32; ++b, row += 34) {
        const float d = ggml_load_f16(row);
        for (int j = 0; j < 32; ++j) {
          L[32 * b + j] = uint8_t(int(int8_t(row[2 + j])) + 128);
          sc[32 * b + j] = d;
        }
      }
      break;
    case GgmlType::Q4_K:
    case GgmlType::Q5_K: {
      const bool q5 = type == GgmlType::Q5_K;
      r.levels = q5 ? 32 : 16;
      for (int64_t b = 0; b < n / kQK; ++b, row += q5 ? 176 : 144) {
        const float d = ggml_load_f16(row), dmin = ggml_load_f16(row + 2);
        const uint8_t* ql = row + (q5 ? 48 : 16);
        const uint8_t* qh = row + 16;
        for (int j = 0; j < 8; ++j) {
          uint8_t s, m;
          ggml_k4_scale_min(j, row + 4, &s, &m);
          for (int l = 0; l < 32; ++l) {
            sc[kQK * b + 32 * j + l] = d * float(s);
            of[kQK * b + 32 * j + l] = dmin * float(m);
          }
        }
        for (int c = 0; c < 4; ++c)  // chunks of 64: 32 low nibbles then 32 high
          for (int l = 0; l < 32; ++l) {
            int lo = ql[32 * c + l] & 0xF, hi = ql[32 * c + l] >> 4;
            if (q5) {
              lo += (qh[l] >> (2 * c)) & 1 ? 16 : 0;
              hi += (qh[l] >> (2 * c + 1)) & 1 ? 16 : 0;
            }
            L[kQK * b + 64 * c + l] = uint8_t(lo);
            L[kQK * b + 64 * c + 32 + l] = uint8_t(hi);
          }
      }
      break;
    }
    case GgmlType::Q6_K:
      r.levels = 64;
      for (int64_t b = 0; b < n / kQK; ++b, row += 210) {
        const float d = ggml_load_f16(row + 208);
        const int8_t* s8 = reinterpret_cast<const int8_t*>(row + 192);
        for (int j = 0; j < kQK; ++j) sc[kQK * b + j] = d * float(s8[j / 16]);
        for (int h = 0; h < 2; ++h) {
          const uint8_t* ql = row + 64 * h;
          const uint8_t* qh = row + 128 + 32 * h;
          for (int l = 0; l < 32; ++l) {
            const int64_t base = kQK * b + 128 * h + l;
            L[base] = uint8_t((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4));
            L[base + 32] = uint8_t((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4));
            L[base + 64] = uint8_t((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4));
            L[base + 96] = uint8_t((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4));
          }
        }
      }
      break;
    case GgmlType::MXFP4:
      r.levels = 16;
      for (int64_t b = 0; b < n / 32; ++b, row += 17) {
        const float d = ggml_e8m0_to_f32_half(row[0]);
        for (int j = 0; j < 16; ++j) {
          L[32 * b + j] = row[1 + j] & 0xF;
          L[32 * b + j + 16] = row[1 + j] >> 4;
        }
        for (int j = 0; j < 32; ++j) sc[32 * b + j] = d;
      }
      break;
    case GgmlType::NVFP4:
      r.levels = 16;
      for (int64_t b = 0; b < n / 64; ++b, row += 36)
        for (int s = 0; s < 4; ++s) {
          const float d = ggml_ue4m3_to_f32_half(row[s]) * g;
          for (int j = 0; j < 8; ++j) {
            L[64 * b + 16 * s + j] = row[4 + 8 * s + j] & 0xF;
            L[64 * b + 16 * s + j + 8] = row[4 + 8 * s + j] >> 4;
          }
          for (int j = 0; j < 16; ++j) sc[64 * b + 16 * s + j] = d;
        }
      break;
    default:
      fail("ggml_frozen_row: {} has no frozen grid", ggml_type_info(type).name);
  }
}

namespace {
// The code that value 0 has in an integer grid (value = scale * (L - zero) - offset).
int grid_zero(GgmlType t) {
  return t == GgmlType::Q4_0 ? 8 : t == GgmlType::Q8_0 ? 128 : t == GgmlType::Q6_K ? 32 : 0;
}
}  // namespace

uint8_t ggml_frozen_round(const GgmlFrozenRow& r, int64_t i, float x, float* value) {
  const float s = r.scale[size_t(i)], o = r.offset[size_t(i)];
  if (r.fp4) {
    const uint8_t c = ggml_fp4_best_index(x, s);
    *value = float(kGgmlFp4Values[c]) * s;
    return c;
  }
  const int zero = grid_zero(r.type);
  int c = zero;
  if (s != 0.f) {
    const float t = std::nearbyint((x + o) / s);
    c = int(std::clamp(t, float(-zero), float(r.levels - 1 - zero))) + zero;
  }
  *value = s * float(c - zero) - o;
  return uint8_t(c);
}

void ggml_pack_codes(const GgmlFrozenRow& r, uint8_t* row) {
  const int64_t n = int64_t(r.codes.size());
  const uint8_t* L = r.codes.data();
  switch (r.type) {
    case GgmlType::Q4_0:
      for (int64_t b = 0; b < n / 32; ++b) pack_q4_0(L + 32 * b, row + 18 * b);
      break;
    case GgmlType::Q8_0:
      for (int64_t b = 0; b < n / 32; ++b)
        for (int j = 0; j < 32; ++j)
          row[34 * b + 2 + j] = uint8_t(int8_t(int(L[32 * b + j]) - 128));
      break;
    case GgmlType::Q4_K:
      for (int64_t b = 0; b < n / kQK; ++b) ggml_pack_q4_k_levels(L + kQK * b, row + 144 * b);
      break;
    case GgmlType::Q5_K:
      for (int64_t b = 0; b < n / kQK; ++b) ggml_pack_q5_k_levels(L + kQK * b, row + 176 * b);
      break;
    case GgmlType::Q6_K:
      for (int64_t b = 0; b < n / kQK; ++b) ggml_pack_q6_k_levels(L + kQK * b, row + 210 * b);
      break;
    case GgmlType::MXFP4:
      for (int64_t b = 0; b < n / 32; ++b) pack_fp4(L + 32 * b, 32, row + 17 * b + 1);
      break;
    case GgmlType::NVFP4:
      for (int64_t b = 0; b < n / 64; ++b)
        for (int s = 0; s < 4; ++s) pack_fp4(L + 64 * b + 16 * s, 16, row + 36 * b + 4 + 8 * s);
      break;
    default:
      fail("ggml_pack_codes: {} has no frozen grid", ggml_type_info(r.type).name);
  }
}

}  // namespace qf

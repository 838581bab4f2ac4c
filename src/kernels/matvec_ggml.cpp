// GGUF weights in ggml blocks against activations quantized as ggml-cpu does (Q8_0 / Q8_K): the
// activation quantizers, the scalar model of ggml's integer-sum arithmetic (also the portable
// fallback), and the driver that splits rows over the pool and tiles tokens for prefill.
#include "kernels/ggml_rows8.h"
#include "kernels/ggml_vec_dot.h"

#include "core/numeric.h"
#include "core/thread_pool.h"
#include "formats/ggml_quants.h"
#include "formats/ggml_types.h"
#include "kernels/kernels_internal.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace qf::kernels {
namespace {

constexpr int64_t kQK = 256;

float load_f16(const uint8_t* p) { return f16_to_f32(uint16_t(p[0] | (p[1] << 8))); }

// ggml's nearest_int: round half to even through the 1.5 * 2^23 trick (|x| < 2^22).
int nearest_int(float x) {
  const float v = x + 12582912.f;
  uint32_t bits;
  std::memcpy(&bits, &v, 4);
  return int(bits & 0x007FFFFF) - 0x00400000;
}

uint64_t row_stride(const LinearWeight& w) {
  const GgmlTypeInfo& info = ggml_type_info(GgmlType(w.ggml_type));
  return uint64_t(w.cols / info.block_size) * uint64_t(info.block_bytes);
}

// ---- Q8_0-activation types: per 32 (NVFP4: per 16) an integer sum, then float --------------
float dot_q4_0(const uint8_t* b, int64_t nb, const int8_t* q, const float* d) {
  float sum = 0.f;
  for (int64_t i = 0; i < nb; ++i, b += 18, q += 32) {
    int isum = 0;
    for (int j = 0; j < 16; ++j)
      isum += (int(b[2 + j] & 0xF) - 8) * q[j] + (int(b[2 + j] >> 4) - 8) * q[j + 16];
    sum += float(isum) * load_f16(b) * d[i];
  }
  return sum;
}
float dot_q8_0(const uint8_t* b, int64_t nb, const int8_t* q, const float* d) {
  float sum = 0.f;
  for (int64_t i = 0; i < nb; ++i, b += 34, q += 32) {
    int isum = 0;
    for (int j = 0; j < 32; ++j) isum += int(int8_t(b[2 + j])) * q[j];
    sum += float(isum) * load_f16(b) * d[i];
  }
  return sum;
}
float dot_mxfp4(const uint8_t* b, int64_t nb, const int8_t* q, const float* d) {
  float sum = 0.f;
  for (int64_t i = 0; i < nb; ++i, b += 17, q += 32) {
    int isum = 0;
    for (int j = 0; j < 16; ++j)
      isum += kGgmlFp4Values[b[1 + j] & 0xF] * q[j] + kGgmlFp4Values[b[1 + j] >> 4] * q[j + 16];
    sum += (d[i] * ggml_e8m0_to_f32_half(b[0])) * float(isum);
  }
  return sum;
}
float dot_nvfp4(const uint8_t* b, int64_t nb, const int8_t* q, const float* d) {
  float sum = 0.f;
  for (int64_t i = 0; i < nb; ++i, b += 36, q += 64) {
    for (int s = 0; s < 4; ++s) {
      const uint8_t* qs = b + 4 + 8 * s;
      const int8_t* qa = q + 16 * s;
      int isum = 0;
      for (int j = 0; j < 8; ++j)
        isum += kGgmlFp4Values[qs[j] & 0xF] * qa[j] + kGgmlFp4Values[qs[j] >> 4] * qa[j + 8];
      sum += d[2 * i + s / 2] * ggml_ue4m3_to_f32_half(b[s]) * float(isum);
    }
  }
  return sum;
}

// ---- Q8_K-activation types: a super-block decoded to small integers, then integer sums -----
// Q4_K / Q5_K: q in [0, 15] / [0, 31], scale and min per 32.
void unpack_q4_k_scales(const uint8_t* b, int* sc, int* m) {
  for (int j = 0; j < 8; ++j) {
    uint8_t s, mm;
    ggml_k4_scale_min(j, b + 4, &s, &mm);
    sc[j] = s;
    m[j] = mm;
  }
}
float dot_k_with_mins(const uint8_t* b, const int8_t* wq, const int8_t* q, float d,
                      const int16_t* bsums) {
  int sc[8], m[8];
  unpack_q4_k_scales(b, sc, m);
  int isum = 0, mins = 0;
  for (int j = 0; j < 8; ++j) {
    int s = 0;
    for (int l = 0; l < 32; ++l) s += int(wq[32 * j + l]) * q[32 * j + l];
    isum += sc[j] * s;
    mins += m[j] * (bsums[2 * j] + bsums[2 * j + 1]);
  }
  return (load_f16(b) * d) * float(isum) - (load_f16(b + 2) * d) * float(mins);
}
float dot_q4_k(const uint8_t* b, int64_t nb, const int8_t* q, const float* d,
               const int16_t* bsums) {
  float sum = 0.f;
  int8_t wq[kQK];
  for (int64_t i = 0; i < nb; ++i, b += 144, q += kQK, bsums += 16) {
    const uint8_t* qs = b + 16;
    for (int j = 0; j < 4; ++j)
      for (int l = 0; l < 32; ++l) {
        wq[64 * j + l] = int8_t(qs[32 * j + l] & 0xF);
        wq[64 * j + 32 + l] = int8_t(qs[32 * j + l] >> 4);
      }
    sum += dot_k_with_mins(b, wq, q, d[i], bsums);
  }
  return sum;
}
float dot_q5_k(const uint8_t* b, int64_t nb, const int8_t* q, const float* d,
               const int16_t* bsums) {
  float sum = 0.f;
  int8_t wq[kQK];
  for (int64_t i = 0; i < nb; ++i, b += 176, q += kQK, bsums += 16) {
    const uint8_t* qh = b + 16;
    const uint8_t* qs = b + 48;
    for (int j = 0; j < 4; ++j)
      for (int l = 0; l < 32; ++l) {
        wq[64 * j + l] = int8_t((qs[32 * j + l] & 0xF) | (((qh[l] >> (2 * j)) & 1) << 4));
        wq[64 * j + 32 + l] = int8_t((qs[32 * j + l] >> 4) | (((qh[l] >> (2 * j + 1)) & 1) << 4));
      }
    sum += dot_k_with_mins(b, wq, q, d[i], bsums);
  }
  return sum;
}
// Q6_K: q in [-32, 31], a signed int8 scale per 16.
float dot_q6_k(const uint8_t* b, int64_t nb, const int8_t* q, const float* d) {
  float sum = 0.f;
  int8_t wq[kQK];
  for (int64_t i = 0; i < nb; ++i, b += 210, q += kQK) {
    const uint8_t* ql = b;
    const uint8_t* qh = b + 128;
    const auto* sc = reinterpret_cast<const int8_t*>(b + 192);
    for (int h = 0; h < 2; ++h)
      for (int l = 0; l < 32; ++l) {
        const uint8_t* L = ql + 64 * h;
        const uint8_t H = qh[32 * h + l];
        int8_t* o = wq + 128 * h;
        o[l] = int8_t(((L[l] & 0xF) | (((H >> 0) & 3) << 4)) - 32);
        o[l + 32] = int8_t(((L[l + 32] & 0xF) | (((H >> 2) & 3) << 4)) - 32);
        o[l + 64] = int8_t(((L[l] >> 4) | (((H >> 4) & 3) << 4)) - 32);
        o[l + 96] = int8_t(((L[l + 32] >> 4) | (((H >> 6) & 3) << 4)) - 32);
      }
    int isum = 0;
    for (int j = 0; j < 16; ++j) {
      int s = 0;
      for (int l = 0; l < 16; ++l) s += int(wq[16 * j + l]) * q[16 * j + l];
      isum += int(sc[j]) * s;
    }
    sum += (load_f16(b + 208) * d[i]) * float(isum);
  }
  return sum;
}

}  // namespace

void ggml_quantize_act_q8_0(const float* x, int64_t n, int8_t* q, float* d) {
  // x86's quantize_row_q8_0: the inverse scale is 127 / amax rather than 1 / d, and the
  // rounding is to nearest even (_mm256_round_ps).
  for (int64_t b = 0; b < n / 32; ++b) {
    const float* xb = x + 32 * b;
    float amax = 0.f;
    for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(xb[i]));
    d[b] = f16_to_f32(f32_to_f16(amax / 127.f));
    const float id = amax != 0.f ? 127.f / amax : 0.f;
    for (int i = 0; i < 32; ++i) q[32 * b + i] = int8_t(std::nearbyint(xb[i] * id));
  }
}

void ggml_quantize_act_q8_k(const float* x, int64_t n, int8_t* q, float* d, int16_t* bsums) {
  for (int64_t b = 0; b < n / kQK; ++b) {
    const float* xb = x + kQK * b;
    int8_t* qb = q + kQK * b;
    float max = 0.f, amax = 0.f;
    for (int j = 0; j < kQK; ++j) {
      const float ax = std::fabs(xb[j]);
      if (ax > amax) {
        amax = ax;
        max = xb[j];
      }
    }
    if (amax == 0.f) {
      d[b] = 0.f;
      std::memset(qb, 0, kQK);
      std::fill(bsums + 16 * b, bsums + 16 * b + 16, int16_t(0));
      continue;
    }
    const float iscale = -127.f / max;
    for (int j = 0; j < kQK; ++j) qb[j] = int8_t(std::min(127, nearest_int(iscale * xb[j])));
    for (int j = 0; j < 16; ++j) {
      int sum = 0;
      for (int i = 0; i < 16; ++i) sum += qb[16 * j + i];
      bsums[16 * b + j] = int16_t(sum);
    }
    d[b] = 1 / iscale;
  }
}

GgmlActKind ggml_act_kind(const LinearWeight& w) {
  if (w.format != WeightFormat::ggml || w.transposed) return GgmlActKind::none;
  switch (GgmlType(w.ggml_type)) {
    case GgmlType::Q4_0:
    case GgmlType::Q8_0:
    case GgmlType::MXFP4:
      return w.cols % 32 == 0 ? GgmlActKind::q8_0 : GgmlActKind::none;
    case GgmlType::NVFP4:
      return w.cols % 64 == 0 ? GgmlActKind::q8_0 : GgmlActKind::none;
    case GgmlType::Q4_K:
    case GgmlType::Q5_K:
    case GgmlType::Q6_K:
      return w.cols % kQK == 0 ? GgmlActKind::q8_k : GgmlActKind::none;
    default:
      return GgmlActKind::none;
  }
}

void ggml_quantize_activations(GgmlActKind kind, const float* x, int64_t tokens, int64_t cols,
                               GgmlActivations& out) {
  out.kind = kind;
  out.cols = cols;
  out.tokens = tokens;
  const int64_t unit = kind == GgmlActKind::q8_k ? kQK : 128;
  out.padded = (cols + unit - 1) / unit * unit;
  out.q.assign(size_t(tokens * out.padded), 0);
  out.d.assign(size_t(tokens * out.d_stride()), 0.f);
  if (kind == GgmlActKind::q8_k) out.bsums.assign(size_t(tokens * out.padded / 16), 0);
  for (int64_t t = 0; t < tokens; ++t) {
    int8_t* q = out.q.data() + t * out.padded;
    float* d = out.d.data() + t * out.d_stride();
    if (kind == GgmlActKind::q8_0) {
      if (!ggml_quantize_act_q8_0_simd(x + t * cols, cols, q, d))
        ggml_quantize_act_q8_0(x + t * cols, cols, q, d);
    } else {
      ggml_quantize_act_q8_k(x + t * cols, cols, q, d, out.bsums.data() + t * out.padded / 16);
    }
  }
}

float ggml_vec_dot_scalar(const LinearWeight& w, int64_t row, const GgmlActivations& a,
                          int64_t token) {
  thread_local std::vector<uint8_t> scratch;
  const uint8_t* b = ggml_stored_row(w, row, scratch);
  const int8_t* q = a.q.data() + token * a.padded;
  const float* d = a.d.data() + token * a.d_stride();
  const int16_t* bs = a.kind == GgmlActKind::q8_k ? a.bsums.data() + token * a.padded / 16 : nullptr;
  const int64_t cols = w.cols;
  switch (GgmlType(w.ggml_type)) {
    case GgmlType::Q4_0: return dot_q4_0(b, cols / 32, q, d);
    case GgmlType::Q8_0: return dot_q8_0(b, cols / 32, q, d);
    case GgmlType::MXFP4: return dot_mxfp4(b, cols / 32, q, d);
    case GgmlType::NVFP4: return dot_nvfp4(b, cols / 64, q, d);
    case GgmlType::Q4_K: return dot_q4_k(b, cols / kQK, q, d, bs);
    case GgmlType::Q5_K: return dot_q5_k(b, cols / kQK, q, d, bs);
    case GgmlType::Q6_K: return dot_q6_k(b, cols / kQK, q, d);
    default: return 0.f;  // ggml_act_kind refuses every other type
  }
}

void matmul_ggml_int8(const LinearWeight& w, const float* x, int64_t tokens, float* y,
                      ThreadPool* pool) {
  GgmlActivations a;
  ggml_quantize_activations(ggml_act_kind(w), x, tokens, w.cols, a);
  const bool simd = !w.ggml_rows8 && ggml_has_simd(w);
  if (simd) ggml_prepare_simd(w, a);
  const bool avx2 = !simd && ggml_has_avx2_kernel(w);
  if (w.ggml_rows8) {
    a.block_sum8.assign(size_t(tokens * a.d_stride()), 0);
    for (int64_t i = 0; i < tokens * a.d_stride(); ++i) {
      int32_t sum = 0;
      for (int64_t j = 0; j < 32; ++j) sum += a.q[size_t(32 * i + j)];
      a.block_sum8[size_t(i)] = 8 * sum;
    }
  }
  const float factor = w.global_scale;
  // Tasks of about 512 KB of weights (a long sequential stream per task, see
  // matvec_q4_avx512vnni.cpp), their count a multiple of the pool's size so that no core idles
  // at the end of a product. Every output is computed the same way whatever the split, so the
  // bytes do not depend on the pool (only the speed does).
  const int threads = pool ? std::max(1, pool->size()) : 1;
  const uint64_t bytes = row_stride(w) * uint64_t(w.rows);
  const int64_t per_thread = std::max<int64_t>(1, int64_t(bytes / (uint64_t(threads) << 19)));
  const int64_t tasks = std::min<int64_t>(threads * per_thread, std::max<int64_t>(1, w.rows / 4));
  // A multiple of 8: repacked Q4_0 rows (kernels/ggml_rows8.h) go 8 at a time, so that a row's
  // path, and so its bits, does not depend on the split.
  const int64_t rows_per_task = ((w.rows + tasks - 1) / tasks + 7) / 8 * 8;
  // Prefill: each task walks its rows once per group of tokens, so its weights (~512 KB) come
  // from memory once and from L2 for the later groups; the kernels reuse each decoded weight
  // vector for 4 tokens in registers.
  constexpr int64_t kTokenGroup = 64;
  for_row_tasks(pool, w.rows, rows_per_task, [&](int64_t r0, int64_t r1) {
    for (int64_t t0 = 0; t0 < tokens; t0 += kTokenGroup) {
      const int64_t t1 = std::min(tokens, t0 + kTokenGroup);
      if (simd && ggml_rows_simd(w, a, r0, r1, t0, t1, factor, y)) continue;
      if (avx2) {
        ggml_rows_avx2(w, a, r0, r1, t0, t1, factor, y);
        continue;
      }
      for (int64_t t = t0; t < t1; ++t)
        for (int64_t r = r0; r < r1; ++r) y[t * w.rows + r] = ggml_vec_dot_scalar(w, r, a, t) * factor;
    }
  });
}

}  // namespace qf::kernels

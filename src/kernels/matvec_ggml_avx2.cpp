// AVX2 kernels for ggml blocks, for x86 CPUs without AVX-512 VNNI (most laptops and desktops:
// AMD Zen 2-3, Intel client cores since Alder Lake), where the scalar model of ggml's arithmetic
// was the only path, ten times slower than memory: Q4_0, Q8_0, MXFP4 and NVFP4 against Q8_0
// activations, Q4_K and Q6_K (the types of Q4_K_M files) against Q8_K.
//
// The integer sums are ggml's AVX2 idiom: vpmaddubsw multiplies unsigned by signed bytes, so a
// signed weight x meets the activation y as |x| . sign(y, x) (vpsignb), and vpmaddwd sums the
// 16-bit pairs into 32-bit lanes; the K-quants' unsigned levels meet y directly and vpmaddwd
// applies their sub-block scales. Sums are exact. The Q8_0-activation types combine blocks in
// float lanes (weight scale x activation scale per block, added per lane, lanes summed at the
// end of the row): the scalar model's results to float rounding. The K-quants combine each
// super-block in the scalar model's own float order, so they equal it bit for bit, as the
// AVX-512 kernels do. In prefill each weight block is decoded once for 4 tokens (the same
// arithmetic per token: a token's result does not depend on its group).
#include "kernels/ggml_rows8.h"
#include "kernels/ggml_vec_dot.h"
#include "kernels/kernels_internal.h"

#include "core/error.h"
#include "core/numeric.h"
#include "formats/ggml_quants.h"
#include "formats/ggml_types.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstring>

#define QF_AVX2_TARGET __attribute__((target("avx2,fma,f16c")))

namespace qf::kernels {
namespace {

constexpr int64_t kQK = 256;

QF_AVX2_TARGET inline float f16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

QF_AVX2_TARGET inline __m256i load32(const int8_t* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}

// Exact 32-bit lane sums of x . y for signed bytes x and y (8 lanes of 4 products each).
QF_AVX2_TARGET inline __m256i dot_i8(__m256i x, __m256i y) {
  const __m256i p = _mm256_maddubs_epi16(_mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x));
  return _mm256_madd_epi16(p, _mm256_set1_epi16(1));
}

QF_AVX2_TARGET inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}

QF_AVX2_TARGET inline int32_t hsum_i32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
  return _mm_cvtsi128_si32(_mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1)));
}

// 16 bytes of nibbles to 32 bytes: the low nibbles (elements 0..15), then the high ones.
QF_AVX2_TARGET inline __m256i nibbles(const uint8_t* p) {
  const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  const __m128i m = _mm_set1_epi8(0x0F);
  return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(b, 4), m), _mm_and_si128(b, m));
}

// ggml's half-scale decoders as tables (the functions take a few ldexp per call).
const float* ue4m3_half_table() {
  static const std::array<float, 256> t = [] {
    std::array<float, 256> v{};
    for (int i = 0; i < 256; ++i) v[size_t(i)] = ggml_ue4m3_to_f32_half(uint8_t(i));
    return v;
  }();
  return t.data();
}
const float* e8m0_half_table() {
  static const std::array<float, 256> t = [] {
    std::array<float, 256> v{};
    for (int i = 0; i < 256; ++i) v[size_t(i)] = ggml_e8m0_to_f32_half(uint8_t(i));
    return v;
  }();
  return t.data();
}

QF_AVX2_TARGET inline __m256i fp4_values(__m256i nib) {
  const __m256i lut = _mm256_broadcastsi128_si256(
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(kGgmlFp4Values)));
  return _mm256_shuffle_epi8(lut, nib);
}

// One row against T tokens' Q8_0 activations (q[t] [cols], d[t] [cols / 32]) into out[t]: each
// block's weights decoded once (|x| for vpmaddubsw) for the T tokens. A token's arithmetic is
// the same for any T.
template <int T>
QF_AVX2_TARGET void row_q8_0_act(GgmlType type, const uint8_t* b, int64_t cols,
                                 const int8_t* const* q, const float* const* d, float* out) {
  __m256 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();
  const float* ue4m3 = ue4m3_half_table();
  const float* e8m0 = e8m0_half_table();
  // The products of signed weight bytes x (|x| given) with block e of every token, each scaled
  // by scale(t) (a vector).
  auto blocks = [&](__m256i x, int64_t e, auto scale) QF_AVX2_TARGET {
    const __m256i ax = _mm256_sign_epi8(x, x);
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) {
      const __m256i p = _mm256_maddubs_epi16(ax, _mm256_sign_epi8(load32(q[t] + e), x));
      acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_madd_epi16(p, _mm256_set1_epi16(1))),
                               scale(t), acc[t]);
    }
  };
  switch (type) {
    case GgmlType::Q4_0:
      for (int64_t i = 0; i < cols / 32; ++i, b += 18) {
        const float dw = f16(b);
        blocks(_mm256_sub_epi8(nibbles(b + 2), _mm256_set1_epi8(8)), 32 * i,
               [&](int t) QF_AVX2_TARGET { return _mm256_set1_ps(dw * d[t][i]); });
      }
      break;
    case GgmlType::Q8_0:
      for (int64_t i = 0; i < cols / 32; ++i, b += 34) {
        const float dw = f16(b);
        blocks(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 2)), 32 * i,
               [&](int t) QF_AVX2_TARGET { return _mm256_set1_ps(dw * d[t][i]); });
      }
      break;
    case GgmlType::MXFP4:
      for (int64_t i = 0; i < cols / 32; ++i, b += 17) {
        const float dw = e8m0[b[0]];
        blocks(fp4_values(nibbles(b + 1)), 32 * i,
               [&](int t) QF_AVX2_TARGET { return _mm256_set1_ps(d[t][i] * dw); });
      }
      break;
    case GgmlType::NVFP4:
      // 64 elements per block, 4 sub-blocks of 16 (each 8 bytes: low nibbles, then high).
      for (int64_t i = 0; i < cols / 64; ++i, b += 36) {
        const __m128i m = _mm_set1_epi8(0x0F);
        for (int h = 0; h < 2; ++h) {
          const __m128i w = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 4 + 16 * h));
          const __m128i lo = _mm_and_si128(w, m), hi = _mm_and_si128(_mm_srli_epi16(w, 4), m);
          const float s0 = ue4m3[b[2 * h]], s1 = ue4m3[b[2 * h + 1]];
          blocks(fp4_values(_mm256_set_m128i(_mm_unpackhi_epi64(lo, hi), _mm_unpacklo_epi64(lo, hi))),
                 64 * i + 32 * h, [&](int t) QF_AVX2_TARGET {
                   const float dx = d[t][2 * i + h];
                   return _mm256_set_m128(_mm_set1_ps(dx * s1), _mm_set1_ps(dx * s0));
                 });
        }
      }
      break;
    default:
      break;
  }
  for (int t = 0; t < T; ++t) out[t] = hsum(acc[t]);
}

// Q4_K / Q6_K against Q8_K for T tokens (q[t], d[t], bsums[t]) into out[t]: per super-block the
// weights decoded once, each token's exact integer sum, then the scalar model's float combine
// (its order, so the same bits, whatever T).
template <int T>
QF_AVX2_TARGET void row_q4_k(const uint8_t* b, int64_t cols, const int8_t* const* q,
                             const float* const* d, const int16_t* const* bsums, float* out) {
  __m128 sum[T];
  for (int t = 0; t < T; ++t) sum[t] = _mm_setzero_ps();
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  for (int64_t i = 0; i < cols / kQK; ++i, b += 144) {
    uint8_t sm[16];  // scales, then mins
    ggml_k4_scales_mins(b + 4, sm);
    const uint8_t* sc = sm;
    const uint8_t* mn = sm + 8;
    __m256i isum[T];
    for (int t = 0; t < T; ++t) isum[t] = _mm256_setzero_si256();
    for (int j = 0; j < 4; ++j) {
      const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 16 + 32 * j));
      const __m256i lo = _mm256_and_si256(w, m4), hi = _mm256_and_si256(_mm256_srli_epi16(w, 4), m4);
      const __m256i s0 = _mm256_set1_epi16(sc[2 * j]), s1 = _mm256_set1_epi16(sc[2 * j + 1]);
#pragma GCC unroll 4
      for (int t = 0; t < T; ++t) {
        const int8_t* y = q[t] + i * kQK + 64 * j;
        const __m256i p0 = _mm256_maddubs_epi16(lo, load32(y));
        const __m256i p1 = _mm256_maddubs_epi16(hi, load32(y + 32));
        isum[t] = _mm256_add_epi32(isum[t], _mm256_madd_epi16(p0, s0));
        isum[t] = _mm256_add_epi32(isum[t], _mm256_madd_epi16(p1, s1));
      }
    }
    for (int t = 0; t < T; ++t) {
      const int16_t* bs = bsums[t] + i * 16;
      int mins = 0;
      for (int j = 0; j < 8; ++j) mins += mn[j] * (bs[2 * j] + bs[2 * j + 1]);
      // (d * dx) * isum - (dmin * dx) * mins, never contracted into a fused multiply-add.
      const __m128 dx = _mm_set_ss(d[t][i]);
      const __m128 x1 = _mm_mul_ss(_mm_mul_ss(_mm_set_ss(f16(b)), dx),
                                   _mm_cvtsi32_ss(dx, hsum_i32(isum[t])));
      const __m128 x2 =
          _mm_mul_ss(_mm_mul_ss(_mm_set_ss(f16(b + 2)), dx), _mm_cvtsi32_ss(dx, mins));
      sum[t] = _mm_add_ss(sum[t], _mm_sub_ss(x1, x2));
    }
  }
  for (int t = 0; t < T; ++t) out[t] = _mm_cvtss_f32(sum[t]);
}

template <int T>
QF_AVX2_TARGET void row_q6_k(const uint8_t* b, int64_t cols, const int8_t* const* q,
                             const float* const* d, const int16_t* const* bsums, float* out) {
  __m128 sum[T];
  for (int t = 0; t < T; ++t) sum[t] = _mm_setzero_ps();
  const __m256i m4 = _mm256_set1_epi8(0x0F), m2 = _mm256_set1_epi8(0x30);
  for (int64_t i = 0; i < cols / kQK; ++i, b += 210) {
    const auto* sc = reinterpret_cast<const int8_t*>(b + 192);
    __m256i isum[T];
    for (int t = 0; t < T; ++t) isum[t] = _mm256_setzero_si256();
    for (int h = 0; h < 2; ++h) {
      const __m256i l0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 64 * h));
      const __m256i l1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 64 * h + 32));
      const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 128 + 32 * h));
      // Levels q + 32 in [0, 63]: a nibble of ql and two bits of qh, moved to bits 4-5.
      const __m256i u[4] = {
          _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 4), m2)),
          _mm256_or_si256(_mm256_and_si256(l1, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 2), m2)),
          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4), _mm256_and_si256(qh, m2)),
          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                          _mm256_and_si256(_mm256_srli_epi16(qh, 2), m2))};
      for (int k = 0; k < 4; ++k) {
        const int e = 128 * h + 32 * k;  // elements e .. e+31: sub-blocks e/16, e/16 + 1
        const __m256i s = _mm256_set_m128i(_mm_set1_epi16(sc[e / 16 + 1]), _mm_set1_epi16(sc[e / 16]));
#pragma GCC unroll 4
        for (int t = 0; t < T; ++t) {
          const __m256i y = load32(q[t] + i * kQK + e);
          isum[t] = _mm256_add_epi32(isum[t], _mm256_madd_epi16(_mm256_maddubs_epi16(u[k], y), s));
        }
      }
    }
    for (int t = 0; t < T; ++t) {
      // The levels carry +32: less 32 * sum_j sc_j * bsum_j.
      const int16_t* bs = bsums[t] + i * 16;
      int corr = 0;
      for (int j = 0; j < 16; ++j) corr += int(sc[j]) * bs[j];
      const __m128 dx = _mm_set_ss(d[t][i]);
      sum[t] = _mm_add_ss(sum[t], _mm_mul_ss(_mm_mul_ss(_mm_set_ss(f16(b + 208)), dx),
                                             _mm_cvtsi32_ss(dx, hsum_i32(isum[t]) - 32 * corr)));
    }
  }
  for (int t = 0; t < T; ++t) out[t] = _mm_cvtss_f32(sum[t]);
}

// Rows 8g .. 8g+7 of repacked Q4_0 (kernels/ggml_rows8.h; b: the group's first block) against T
// tokens' Q8_0 activations (q[t], d[t], s8[t]: 8 x each block's activation sum), lane k of
// acc[t] row 8g+k: per block one scale conversion for the 8 rows, the unsigned nibbles against
// the token's 4 activation bytes broadcast to every row's lane (16-bit sums of at most 8 x 2 x 15
// x 127 = 30480: no saturation), the offset 8 taken off as 8 x the block's activation sum, one
// multiply-add per token for the 8 rows. Integer sums exact; a token's arithmetic is the same
// for any T. kPrefetch: L2 prefetches kOneStreamPrefetchBytes ahead (one_stream_wants_prefetch).
template <int T, bool kPrefetch>
QF_AVX2_TARGET void rows8_q4_0(const uint8_t* b, int64_t blocks, const int8_t* const* q,
                               const float* const* d, const int32_t* const* s8, __m256* acc) {
  const __m256i m4 = _mm256_set1_epi8(0x0F), ones = _mm256_set1_epi16(1);
  for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();
  for (int64_t i = 0; i < blocks; ++i, b += kGgmlRows8BlockBytes) {
    if constexpr (kPrefetch) {
      const char* p = reinterpret_cast<const char*>(b) + kOneStreamPrefetchBytes;
      for (int64_t line = 0; line < kGgmlRows8BlockBytes; line += 64)
        _mm_prefetch(p + line, _MM_HINT_T1);
    }
    const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b)));
    __m256i lo[4], hi[4];
    for (int v = 0; v < 4; ++v) {
      const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 16 + 32 * v));
      lo[v] = _mm256_and_si256(w, m4);
      hi[v] = _mm256_and_si256(_mm256_srli_epi16(w, 4), m4);
    }
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) {
      const int8_t* y = q[t] + 32 * i;
      __m256i s = _mm256_setzero_si256();
      for (int v = 0; v < 4; ++v) {
        int32_t ylo, yhi;
        std::memcpy(&ylo, y + 4 * v, 4);
        std::memcpy(&yhi, y + 16 + 4 * v, 4);
        s = _mm256_add_epi16(s, _mm256_maddubs_epi16(lo[v], _mm256_set1_epi32(ylo)));
        s = _mm256_add_epi16(s, _mm256_maddubs_epi16(hi[v], _mm256_set1_epi32(yhi)));
      }
      const __m256i isum = _mm256_sub_epi32(_mm256_madd_epi16(s, ones), _mm256_set1_epi32(s8[t][i]));
      acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_mul_ps(dw, _mm256_set1_ps(d[t][i])),
                               acc[t]);
    }
  }
}

// Groups [g0, g1) of 8 repacked Q4_0 rows against tokens [t0, t1): 4 tokens at a time, then one.
void rows8_tokens(const LinearWeight& w, const GgmlActivations& a, int64_t g0, int64_t g1,
                  int64_t t0, int64_t t1, float factor, float* y) {
  const uint64_t group_bytes = uint64_t(w.cols / 32) * 18 * kGgmlRows8;
  const auto* data = static_cast<const uint8_t*>(w.data);
  const bool prefetch = one_stream_wants_prefetch();
  auto run = [&]<int T>(int64_t g, int64_t t) QF_AVX2_TARGET {
    const int8_t* q[T];
    const float* d[T];
    const int32_t* s8[T];
    for (int k = 0; k < T; ++k) {
      q[k] = a.q.data() + (t + k) * a.padded;
      d[k] = a.d.data() + (t + k) * a.d_stride();
      s8[k] = a.block_sum8.data() + (t + k) * a.d_stride();
    }
    __m256 acc[T];
    const uint8_t* b = data + uint64_t(g) * group_bytes;
    if (prefetch) rows8_q4_0<T, true>(b, w.cols / 32, q, d, s8, acc);
    else rows8_q4_0<T, false>(b, w.cols / 32, q, d, s8, acc);
    for (int k = 0; k < T; ++k) {
      alignas(32) float v[8];
      _mm256_store_ps(v, _mm256_mul_ps(acc[k], _mm256_set1_ps(factor)));
      std::memcpy(y + (t + k) * w.rows + g * kGgmlRows8, v, sizeof v);
    }
  };
  for (int64_t g = g0; g < g1; ++g) {
    int64_t t = t0;
    for (; t + 4 <= t1; t += 4) run.template operator()<4>(g, t);
    for (; t < t1; ++t) run.template operator()<1>(g, t);
  }
}

// Row r against T tokens from t: the type's kernel.
template <int T>
QF_AVX2_TARGET void row_tokens(GgmlType type, const uint8_t* row, int64_t cols,
                               const GgmlActivations& a, int64_t t, float* out) {
  const int8_t* q[T];
  const float* d[T];
  const int16_t* bs[T];
  for (int k = 0; k < T; ++k) {
    q[k] = a.q.data() + (t + k) * a.padded;
    d[k] = a.d.data() + (t + k) * a.d_stride();
    bs[k] = type == GgmlType::Q4_K || type == GgmlType::Q6_K
                ? a.bsums.data() + (t + k) * a.padded / 16
                : nullptr;
  }
  if (type == GgmlType::Q4_K) row_q4_k<T>(row, cols, q, d, bs, out);
  else if (type == GgmlType::Q6_K) row_q6_k<T>(row, cols, q, d, bs, out);
  else row_q8_0_act<T>(type, row, cols, q, d, out);
}

}  // namespace

bool cpu_has_avx2() {
  static const bool ok = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                         __builtin_cpu_supports("f16c");
  return ok;
}

bool one_stream_wants_prefetch() {
  static const bool yes = !__builtin_cpu_is("amd");
  return yes;
}

bool ggml_has_avx2_kernel(const LinearWeight& w) {
  if (!cpu_has_avx2() || ggml_act_kind(w) == GgmlActKind::none) return false;
  switch (GgmlType(w.ggml_type)) {
    case GgmlType::Q4_0:
    case GgmlType::Q8_0:
    case GgmlType::MXFP4:
    case GgmlType::NVFP4:
    case GgmlType::Q4_K:
    case GgmlType::Q6_K:
      return true;
    default:
      return false;
  }
}

void ggml_rows_avx2(const LinearWeight& w, const GgmlActivations& a, int64_t r0, int64_t r1,
                    int64_t t0, int64_t t1, float factor, float* y) {
  const GgmlTypeInfo& info = ggml_type_info(GgmlType(w.ggml_type));
  const uint64_t row_bytes = uint64_t(w.cols / info.block_size) * uint64_t(info.block_bytes);
  const auto* data = static_cast<const uint8_t*>(w.data);
  const GgmlType type = GgmlType(w.ggml_type);
  if (w.ggml_rows8) {
    // Whole groups of 8 (task splits are multiples of 8), then the stored tail rows.
    const int64_t full = w.rows / kGgmlRows8 * kGgmlRows8;
    const int64_t g0 = (r0 + kGgmlRows8 - 1) / kGgmlRows8, g1 = std::min(r1, full) / kGgmlRows8;
    if ((r0 % kGgmlRows8 != 0 && r0 < full) || (g1 > g0 && t1 > t0 && a.block_sum8.empty()))
      throw Error("ggml_rows_avx2: repacked Q4_0 rows from " + std::to_string(r0) +
                  " (groups of 8 start at multiples of 8 and need a.block_sum8)");
    if (g1 > g0) rows8_tokens(w, a, g0, g1, t0, t1, factor, y);
    r0 = std::max(r0, full);
  }
  // Each weight block decoded once for 4 tokens, the rest one at a time.
  for (int64_t r = r0; r < r1; ++r) {
    const uint8_t* row = data + uint64_t(r) * row_bytes;
    int64_t t = t0;
    float v[4];
    for (; t + 4 <= t1; t += 4) {
      row_tokens<4>(type, row, w.cols, a, t, v);
      for (int k = 0; k < 4; ++k) y[(t + k) * w.rows + r] = v[k] * factor;
    }
    for (; t < t1; ++t) {
      row_tokens<1>(type, row, w.cols, a, t, v);
      y[t * w.rows + r] = v[0] * factor;
    }
  }
}

}  // namespace qf::kernels

#else

namespace qf::kernels {
bool cpu_has_avx2() { return false; }
bool one_stream_wants_prefetch() { return false; }
bool ggml_has_avx2_kernel(const LinearWeight&) { return false; }
void ggml_rows_avx2(const LinearWeight&, const GgmlActivations&, int64_t, int64_t, int64_t,
                    int64_t, float, float*) {}
}  // namespace qf::kernels

#endif

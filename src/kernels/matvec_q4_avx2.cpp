// 4-bit matrix-vector products (NVFP4, MXFP4, both INT4 layouts) with int8 activations on
// AVX2, for x86 CPUs without AVX-512 VNNI (AMD Zen 2-3, Intel client cores since Alder Lake).
// There the float kernels (matvec_fp4.cpp) turn every nibble into a float and run
// compute-bound: measured on a 2-core AMD EPYC VM, NVFP4 decode of the llama-1b shape was no
// faster than BF16 (6.71 vs 6.81 tok/s) though it reads 2.3x fewer bytes.
//
// The VNNI kernels' scheme in 256-bit halves of their 128-element chunks, on the same activation
// layout (q4_int8_activation.h): a 32-byte load of nibbles (64 elements) costs a mask, a shift,
// two vpshufb (E2M1 doubled + 12, or INT4's q + 8 as stored), two vpmaddubsw (unsigned weight x
// signed activation: pairs of at most 2 x 24 x 127, no saturation), one 16-bit add and one
// vpmaddwd against ones. The 32-bit lanes (8 elements each, exact) start from the activation's
// lane bias -offset x sum(x bytes) and are scaled per lane in float: weight block scale x
// activation block scale. NVFP4's whole chunks add the two halves' 16-bit sums in pairs first,
// so that each lane holds one 16-element block (chunk_dot_blocks16); the row-pair INT4 layout
// reads a natural-order activation against two rows per byte (row_pairs_dot). Each (row,
// token)'s arithmetic is the same whatever the grouping of rows and tokens, so a token's result
// does not depend on the batch or the thread count.
#include "kernels/q4_int8_activation.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))

#include <immintrin.h>

#include <cstring>
#include <type_traits>

#define QF_AVX2_TARGET __attribute__((target("avx2,fma,f16c")))

namespace qf::kernels::q4 {
namespace {

constexpr int64_t kHalf = kChunk / 2;  // elements per 256-bit load of nibbles

// Weight scales of a row: per lane of half h of whole chunk c (`half`; NVFP4: per block of a
// whole chunk, `chunk`), and `at` (the scale of element e, scalar) to build the last chunk's
// lanes.
struct Nvfp4Scales {
  const uint8_t* codes;  // [rows, cols / 16] E4M3
  int64_t per_row;
  void prefetch(int64_t row, int64_t c, int64_t ahead) const {
    _mm_prefetch(reinterpret_cast<const char*>(codes + row * per_row + c * 8) + ahead / 8,
                 _MM_HINT_T1);
  }
  // E4M3 -> F16 is a shift (see matvec_q4_avx512vnni.cpp): 2^-8 times the scale, exactly.
  // The 8 scales of whole chunk c in kHaddBlock order, code j in the high byte of 16-bit lane j.
  QF_AVX2_TARGET __m256 chunk(int64_t row, int64_t c) const {
    const __m128i v = _mm_shuffle_epi8(
        _mm_loadl_epi64(reinterpret_cast<const __m128i*>(codes + row * per_row + c * 8)),
        _mm_setr_epi8(-1, 0, -1, 1, -1, 4, -1, 5, -1, 2, -1, 3, -1, 6, -1, 7));
    return _mm256_cvtph_ps(_mm_and_si128(_mm_srai_epi16(v, 1), _mm_set1_epi16(-0x4001)));
  }
  float at(int64_t row, int64_t e) const {
    return e4m3_table()[codes[row * per_row + e / 16]] * (1.f / 256.f);
  }
};

struct Mxfp4Scales {
  const uint8_t* codes;  // [rows, cols / 32] E8M0
  int64_t per_row;
  const float* table;  // e8m0_table()
  void prefetch(int64_t row, int64_t c, int64_t ahead) const {
    _mm_prefetch(reinterpret_cast<const char*>(codes + row * per_row + c * 4) + ahead / 16,
                 _MM_HINT_T1);
  }
  QF_AVX2_TARGET __m256 half(int64_t row, int64_t c, int h) const {
    const uint8_t* s = codes + row * per_row + c * 4 + 2 * h;
    return _mm256_set_m128(_mm_set1_ps(table[s[1]]), _mm_set1_ps(table[s[0]]));
  }
  float at(int64_t row, int64_t e) const { return table[codes[row * per_row + e / 32]]; }
};

struct Int4Scales {
  const float* scales;  // [rows, cols / group]
  int64_t per_row;
  int64_t group;  // a multiple of 8 that divides 128 or is a multiple of it
  int32_t idx[8];   // lane l -> 8l / group (group < 64)
  int32_t mask[8];  // the 64 / group scales of a half (group < 64)
  void prefetch(int64_t row, int64_t c, int64_t ahead) const {
    _mm_prefetch(reinterpret_cast<const char*>(scales + row * per_row + c * kChunk / group) +
                     ahead * 8 / group,
                 _MM_HINT_T1);
  }
  QF_AVX2_TARGET __m256 half(int64_t row, int64_t c, int h) const {
    const float* s = scales + row * per_row + (c * kChunk + h * kHalf) / group;
    if (group >= kHalf) return _mm256_set1_ps(*s);
    const __m256 v = _mm256_maskload_ps(s, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(mask)));
    return _mm256_permutevar8x32_ps(v, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(idx)));
  }
  float at(int64_t row, int64_t e) const { return scales[row * per_row + e / group]; }
};

QF_AVX2_TARGET inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}

// 32 bytes of nibbles as unsigned bytes: lo the low nibbles (even elements), hi the high ones;
// kLut: through the E2M1 table (doubled + 12), else as stored (INT4's q + 8).
template <bool kLut>
QF_AVX2_TARGET inline void decode_nibbles(__m256i wb, __m256i& lo, __m256i& hi) {
  // E2M1 doubled + 12: {0, .5, 1, 1.5, 2, 3, 4, 6} * 2 + 12, then the negatives.
  const __m256i lut = _mm256_broadcastsi128_si256(
      _mm_setr_epi8(12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0));
  const __m256i low = _mm256_set1_epi8(0x0F);
  lo = _mm256_and_si256(wb, low);
  hi = _mm256_and_si256(_mm256_srli_epi16(wb, 4), low);
  if constexpr (kLut) {
    lo = _mm256_shuffle_epi8(lut, lo);
    hi = _mm256_shuffle_epi8(lut, hi);
  }
}

// One half's 16 exact 16-bit sums of 4 products (element 4k .. 4k+3 of the half in lane k, at
// most 4 x 24 x 127): decoded weights lo (even elements) and hi (odd) against the activation
// bytes at x (evens) and x + 64 (odds).
QF_AVX2_TARGET inline __m256i half_products(__m256i lo, __m256i hi, const int8_t* x) {
  const __m256i xe = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x));
  const __m256i xo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + 64));
  return _mm256_add_epi16(_mm256_maddubs_epi16(lo, xe), _mm256_maddubs_epi16(hi, xo));
}

// The 8 exact lane sums of one half (8 elements each), from the lane biases at b.
QF_AVX2_TARGET inline __m256i half_lanes(__m256i lo, __m256i hi, const int8_t* x,
                                         const int32_t* b) {
  return _mm256_add_epi32(_mm256_madd_epi16(half_products(lo, hi, x), _mm256_set1_epi16(1)),
                          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b)));
}

// acc[i * T + t] += chunk c of rows r0 .. r0+R against activation t < T, each row's weights
// decoded once for the T activations. kTail: the last chunk, `count` < 128 valid elements (a
// multiple of 16): the weight bytes past it are not read and their lanes' scales are 0.
template <int R, int T, bool kLut, bool kTail, class Scales>
QF_AVX2_TARGET inline void chunk_dot(const uint8_t* data, int64_t row_bytes, int64_t ahead,
                                     int64_t r0, int64_t c, int64_t count, const QuantizedX& qx,
                                     const Scales& scales, __m256* acc) {
  const int8_t* xq0 = qx.q.data() + c * T * kChunk;
  const int32_t* xb0 = qx.lane_bias.data() + c * T * kLanes;
  const float* xs0 = qx.lane_scale.data() + c * T * kLanes;
  // Unrolled whole, so that the R x T accumulators live in registers.
#pragma GCC unroll 8
  for (int i = 0; i < R; ++i) {
    const uint8_t* p = data + (r0 + i) * row_bytes + c * (kChunk / 2);
    _mm_prefetch(reinterpret_cast<const char*>(p) + kPrefetchBytes, _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(p) + ahead, _MM_HINT_T1);
    if (c % 4 == 0) scales.prefetch(r0 + i, c, ahead);
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      __m256i wb;
      __m256 ws;
      if constexpr (kTail) {
        const int64_t words = std::clamp<int64_t>(count / 2 - 32 * h, 0, 32) / 4;
        const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
        wb = _mm256_maskload_epi32(reinterpret_cast<const int*>(p + 32 * h),
                                   _mm256_cmpgt_epi32(_mm256_set1_epi32(int32_t(words)), lanes));
        alignas(32) float s[8];
        for (int l = 0; l < 8; ++l) {
          const int64_t e = h * kHalf + 8 * l;
          s[l] = e < count ? scales.at(r0 + i, c * kChunk + e) : 0.f;
        }
        ws = _mm256_load_ps(s);
      } else {
        wb = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 32 * h));
        ws = scales.half(r0 + i, c, h);
      }
      __m256i lo, hi;
      decode_nibbles<kLut>(wb, lo, hi);
      const int8_t* xq = xq0 + 32 * h;
      const int32_t* xb = xb0 + 8 * h;
      const float* xs = xs0 + 8 * h;
#pragma GCC unroll 8
      for (int t = 0; t < T; ++t) {
        const __m256i d = half_lanes(lo, hi, xq + t * kChunk, xb + t * kLanes);
        acc[i * T + t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d),
                                         _mm256_mul_ps(ws, _mm256_loadu_ps(xs + t * kLanes)),
                                         acc[i * T + t]);
      }
    }
  }
}

// The same for a whole chunk of NVFP4 (16-element blocks): the two halves' 16-bit sums of 4
// products are added in pairs by vphaddw (at most 8 x 24 x 127 = 24384: no wrap) before one
// vpmaddwd, so that each 32-bit lane holds one block (in kHaddBlock order) and one scale
// conversion, one bias add and one float multiply-add serve 16 elements instead of 8.
template <int R, int T>
QF_AVX2_TARGET inline void chunk_dot_blocks16(const uint8_t* data, int64_t row_bytes,
                                              int64_t ahead, int64_t r0, int64_t c,
                                              const QuantizedX& qx, const Nvfp4Scales& scales,
                                              __m256* acc) {
  const int8_t* xq = qx.q.data() + c * T * kChunk;
  const int32_t* xb = qx.block_bias.data() + c * T * 8;
  const float* xs = qx.block_scale.data() + c * T * 8;
  const __m256i ones = _mm256_set1_epi16(1);
#pragma GCC unroll 8
  for (int i = 0; i < R; ++i) {
    const uint8_t* p = data + (r0 + i) * row_bytes + c * (kChunk / 2);
    _mm_prefetch(reinterpret_cast<const char*>(p) + kPrefetchBytes, _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(p) + ahead, _MM_HINT_T1);
    if (c % 4 == 0) scales.prefetch(r0 + i, c, ahead);
    const __m256i w0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    const __m256i w1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 32));
    __m256i lo0, hi0, lo1, hi1;
    decode_nibbles<true>(w0, lo0, hi0);
    decode_nibbles<true>(w1, lo1, hi1);
    const __m256 ws = scales.chunk(r0 + i, c);
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) {
      const int8_t* x = xq + t * kChunk;
      const __m256i sums =
          _mm256_hadd_epi16(half_products(lo0, hi0, x), half_products(lo1, hi1, x + 32));
      const __m256i d =
          _mm256_add_epi32(_mm256_madd_epi16(sums, ones),
                           _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb + t * 8)));
      acc[i * T + t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d),
                                       _mm256_mul_ps(ws, _mm256_loadu_ps(xs + t * 8)),
                                       acc[i * T + t]);
    }
  }
}

// y[t * y_stride + i] = the dot products of rows r0 + i (i < R) with activation t < T, in the
// scale units of Scales (the caller applies the per-tensor factor).
template <int R, int T, bool kLut, class Scales>
QF_AVX2_TARGET void rows_dot(const uint8_t* data, int64_t row_bytes, int64_t ahead, int64_t r0,
                             int64_t cols, const QuantizedX& qx, const Scales& scales, float* y,
                             int64_t y_stride) {
  __m256 acc[R * T];
  for (int i = 0; i < R * T; ++i) acc[i] = _mm256_setzero_ps();
  const int64_t full = cols / kChunk;
  for (int64_t c = 0; c < full; ++c) {
    if constexpr (std::is_same_v<Scales, Nvfp4Scales>)
      chunk_dot_blocks16<R, T>(data, row_bytes, ahead, r0, c, qx, scales, acc);
    else
      chunk_dot<R, T, kLut, false>(data, row_bytes, ahead, r0, c, kChunk, qx, scales, acc);
  }
  const int64_t rem = cols - full * kChunk;
  if (rem > 0) chunk_dot<R, T, kLut, true>(data, row_bytes, ahead, r0, full, rem, qx, scales, acc);
  for (int i = 0; i < R; ++i)
    for (int t = 0; t < T; ++t) y[t * y_stride + i] = hsum(acc[i * T + t]);
}

// Rows [r0, r1) against T activations: R rows at a time, the rest one by one.
template <int R, int T, bool kLut, class Scales>
void row_range(const uint8_t* data, int64_t row_bytes, int64_t ahead, int64_t r0, int64_t r1,
               int64_t cols, const QuantizedX& qx, const Scales& scales, float* y,
               int64_t y_stride) {
  int64_t r = r0;
  for (; r + R <= r1; r += R)
    rows_dot<R, T, kLut>(data, row_bytes, ahead, r, cols, qx, scales, y + r, y_stride);
  for (; r < r1; ++r)
    rows_dot<1, T, kLut>(data, row_bytes, ahead, r, cols, qx, scales, y + r, y_stride);
}

// x [tokens, cols] -> y [tokens, rows]; the row tasks read the weights once per token group.
// R x T accumulators stay within the 16 YMM registers with the decoded weights.
// Rows of at most kShortRowBytes are read one at a time for every token count. On a Zen 3 VM, one
// thread, one token, 32 MB NVFP4 matrices from memory, medians of 5 alternating runs, GB/s, 4
// rows -> 1 row at a time: 2048 columns 7.7 -> 11.6, 4096 10.2 -> 11.5. Longer rows keep 4
// (8192: 12.4 against 10.2, 14336: 12.2 against 11.5): each row is its own page stream and x is
// loaded once per 4. A Llama-1B layer's seven products (KernelMatVecLayerLlama1bNvfp4, medians
// of 4 alternating runs) 8.7 -> 10.0 GB/s on one thread, 12.3 -> 16.8 on two; `bench --batch 4`
// (2 rows at a time before) 42 -> 47 tok/s, `--batch 2` 32-38 -> 35-38.
template <bool kLut, class Scales>
void run(const LinearWeight& w, const float* x, int64_t tokens, float* y, ThreadPool* pool,
         int offset, const Scales& scales, float factor) {
  const auto* data = static_cast<const uint8_t*>(w.data);
  const int64_t row_bytes = w.cols / 2, cols = w.cols, rows = w.rows;
  const int64_t ahead = prefetch_ahead_bytes(row_bytes);
  const bool short_rows = row_bytes <= kShortRowBytes;
  run_row_tasks(w, x, tokens, y, pool, offset, factor,
                [&](int64_t r0, int64_t r1, const TokenGroup& g, float* yt) {
    switch (g.size) {
      case 8: row_range<1, 8, kLut>(data, row_bytes, ahead, r0, r1, cols, g.qx, scales, yt, rows); break;
      case 4:
        if (short_rows) row_range<1, 4, kLut>(data, row_bytes, ahead, r0, r1, cols, g.qx, scales, yt, rows);
        else row_range<2, 4, kLut>(data, row_bytes, ahead, r0, r1, cols, g.qx, scales, yt, rows);
        break;
      case 2:
        if (short_rows) row_range<1, 2, kLut>(data, row_bytes, ahead, r0, r1, cols, g.qx, scales, yt, rows);
        else row_range<2, 2, kLut>(data, row_bytes, ahead, r0, r1, cols, g.qx, scales, yt, rows);
        break;
      default:
        if (short_rows) row_range<1, 1, kLut>(data, row_bytes, ahead, r0, r1, cols, g.qx, scales, yt, rows);
        else row_range<4, 1, kLut>(data, row_bytes, ahead, r0, r1, cols, g.qx, scales, yt, rows);
        break;
    }
  });
}

// One 32-column half of P row pairs against T tokens: wb[i] the half's 32 bytes of pair i
// (low nibble: the even row) XORed with 0x88 (nibble ^ 8 is q + 8), sa[i] / sb[i] the per-lane
// scales of its even / odd row, xq / xb / xs the tokens' activation bytes, lane biases and lane
// scales at the half. Lane l covers columns 4l .. 4l+3; acc[(2i + b) * T + t].
template <int P, int T>
QF_AVX2_TARGET inline void row_pairs_half(const __m256i* wb, const __m256* sa, const __m256* sb,
                                          const int8_t* const* xq, const int32_t* const* xb,
                                          const float* const* xs, __m256* acc) {
  const __m256i ones = _mm256_set1_epi16(1);
#pragma GCC unroll 2
  for (int i = 0; i < P; ++i) {
    __m256i lo, hi;
    decode_nibbles<false>(wb[i], lo, hi);
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) {
      const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq[t]));
      const __m256i bias = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb[t]));
      const __m256 s = _mm256_loadu_ps(xs[t]);
      const __m256i da =
          _mm256_add_epi32(_mm256_madd_epi16(_mm256_maddubs_epi16(lo, x), ones), bias);
      const __m256i db =
          _mm256_add_epi32(_mm256_madd_epi16(_mm256_maddubs_epi16(hi, x), ones), bias);
      __m256& a0 = acc[2 * i * T + t];
      __m256& a1 = acc[(2 * i + 1) * T + t];
      a0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(da), _mm256_mul_ps(sa[i], s), a0);
      a1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(db), _mm256_mul_ps(sb[i], s), a1);
    }
  }
}

// Rows r0 .. r0+2P of the row-pair INT4 layout against T tokens (quantize_x_natural, qx[t]):
// a 32-byte load holds 32 columns of two rows, decoded once for the T tokens (row_pairs_half).
// Each lane's columns lie within one group (group % 4 == 0, dividing 64 or a multiple of it).
// Whole halves run in a loop with the pointers and the group index kept in registers (group a
// multiple of 32: one scale per row and half; smaller groups: a scale per lane by a permute);
// the last half may hold 16 columns: bytes past them are not read, and their lanes' scales are
// 0. Outputs y[t * y_stride + i] for row r0 + i; each (row, token)'s arithmetic is the same for
// any T.
template <int P, int T>
QF_AVX2_TARGET void row_pairs_dot(const uint8_t* data, const float* scales, int64_t group,
                                  int64_t r0, int64_t cols, int64_t ahead, const QuantizedX* qx,
                                  float* y, int64_t y_stride) {
  const int64_t groups = cols / group;
  const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  // Lane l -> group (e0 + 4l) / group - e0 / group for a half starting at e0, and the half's
  // groups to load (group < 32).
  const int shift = __builtin_ctzll(uint64_t(group));
  const __m256i idx = group >= 32 ? _mm256_setzero_si256()
                                  : _mm256_srli_epi32(_mm256_slli_epi32(lanes, 2), shift);
  const __m256i smask = _mm256_cmpgt_epi32(_mm256_set1_epi32(int32_t(32 / group)), lanes);
  const __m256i flip = _mm256_set1_epi8(int8_t(0x88));
  const uint8_t* rp[P];
  const float* sr[2 * P];
  for (int i = 0; i < P; ++i) {
    rp[i] = data + ((r0 + 2 * i) / 2) * cols;
    sr[2 * i] = scales + (r0 + 2 * i) * groups;
    sr[2 * i + 1] = sr[2 * i] + groups;
  }
  const int8_t* xq[T];
  const int32_t* xb[T];
  const float* xs[T];
  for (int t = 0; t < T; ++t) {
    xq[t] = qx[t].q.data();
    xb[t] = qx[t].lane_bias.data();
    xs[t] = qx[t].lane_scale.data();
  }
  __m256 acc[2 * P * T];
  for (int i = 0; i < 2 * P * T; ++i) acc[i] = _mm256_setzero_ps();
  __m256i wb[P];
  __m256 sa[P], sb[P];
  const int64_t full = cols / 32;
  int64_t g = 0, next = group;  // the group of column e0 (group >= 32), and where it ends
  for (int64_t k = 0; k < full; ++k) {
    const int64_t e0 = 32 * k;
    for (int i = 0; i < P; ++i) {
      if (k % 2 == 0) {
        _mm_prefetch(reinterpret_cast<const char*>(rp[i] + e0) + kPrefetchBytes, _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(rp[i] + e0) + ahead, _MM_HINT_T1);
      }
      wb[i] = _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(rp[i] + e0)),
                               flip);
    }
    if (group >= 32) {
      if (e0 == next) {
        ++g;
        next += group;
      }
      for (int i = 0; i < P; ++i) {
        sa[i] = _mm256_broadcast_ss(sr[2 * i] + g);
        sb[i] = _mm256_broadcast_ss(sr[2 * i + 1] + g);
      }
    } else {
      for (int i = 0; i < P; ++i) {
        sa[i] = _mm256_permutevar8x32_ps(
            _mm256_maskload_ps(sr[2 * i] + (e0 >> shift), smask), idx);
        sb[i] = _mm256_permutevar8x32_ps(
            _mm256_maskload_ps(sr[2 * i + 1] + (e0 >> shift), smask), idx);
      }
    }
    row_pairs_half<P, T>(wb, sa, sb, xq, xb, xs, acc);
    for (int t = 0; t < T; ++t) {
      xq[t] += 32;
      xb[t] += 8;
      xs[t] += 8;
    }
  }
  if (const int64_t e0 = full * 32, valid = cols - e0; valid > 0) {
    // Padding bytes decode to 8 (q = 0 + 8) and meet x = 0.
    const __m256i vmask = _mm256_cmpgt_epi32(_mm256_set1_epi32(int32_t(valid / 4)), lanes);
    for (int i = 0; i < P; ++i) {
      wb[i] = _mm256_xor_si256(
          _mm256_maskload_epi32(reinterpret_cast<const int*>(rp[i] + e0), vmask), flip);
      alignas(32) float a[8], b[8];
      for (int l = 0; l < 8; ++l) {
        const bool in = 4 * l < valid;
        a[l] = in ? sr[2 * i][(e0 + 4 * l) / group] : 0.f;
        b[l] = in ? sr[2 * i + 1][(e0 + 4 * l) / group] : 0.f;
      }
      sa[i] = _mm256_load_ps(a);
      sb[i] = _mm256_load_ps(b);
    }
    row_pairs_half<P, T>(wb, sa, sb, xq, xb, xs, acc);
  }
  for (int i = 0; i < 2 * P; ++i)
    for (int t = 0; t < T; ++t) y[t * y_stride + i] = hsum(acc[i * T + t]);
}

}  // namespace

void matvec_int4_row_pairs_avx2(const LinearWeight& w, const float* x, int64_t tokens, float* y,
                                ThreadPool* pool) {
  const auto* data = static_cast<const uint8_t*>(w.data);
  // Groups of 4 tokens: 2 rows x 4 tokens of accumulators beside the decoded pair.
  const int64_t rows = w.rows, cols = w.cols, group = w.group;
  run_row_pair_tasks(w, x, tokens, y, pool, 4,
                     [&](const QuantizedX* qx, int T, int64_t r, int pairs, int64_t ahead,
                         float* out) {
                       if (T == 4)
                         row_pairs_dot<1, 4>(data, w.scales, group, r, cols, ahead, qx, out, rows);
                       else if (pairs == 2)
                         row_pairs_dot<2, 1>(data, w.scales, group, r, cols, ahead, qx, out, rows);
                       else
                         row_pairs_dot<1, 1>(data, w.scales, group, r, cols, ahead, qx, out, rows);
                     });
}

void matvec_nvfp4_avx2(const LinearWeight& w, const float* x, int64_t tokens, float* y,
                       ThreadPool* pool) {
  // Doubled E2M1 (x 0.5) and F16-shifted scales (x 2^8).
  run<true>(w, x, tokens, y, pool, 12, Nvfp4Scales{w.block_scales, w.cols / 16},
            w.global_scale * 128.f);
}

void matvec_mxfp4_avx2(const LinearWeight& w, const float* x, int64_t tokens, float* y,
                       ThreadPool* pool) {
  run<true>(w, x, tokens, y, pool, 12, Mxfp4Scales{w.block_scales, w.cols / 32, e8m0_table()}, 0.5f);
}

void matvec_int4_packed32_avx2(const LinearWeight& w, const float* x, int64_t tokens, float* y,
                               ThreadPool* pool) {
  Int4Scales sc{w.scales, w.cols / w.group, w.group, {}, {}};
  for (int l = 0; l < 8; ++l) {
    sc.idx[l] = w.group >= kHalf ? 0 : int32_t(8 * l / w.group);
    sc.mask[l] = w.group < kHalf && l < kHalf / w.group ? -1 : 0;
  }
  run<false>(w, x, tokens, y, pool, 8, sc, 1.f);
}

}  // namespace qf::kernels::q4

#endif

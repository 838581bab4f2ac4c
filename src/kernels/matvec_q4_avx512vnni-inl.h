// Included twice by matvec_q4_avx512vnni.cpp, inside namespace qf::kernels::{anonymous}, with
// QF_Q4_NS (namespace), QF_Q4_TARGET (target attribute) and QF_Q4_VBMI (0/1) defined.
// NOLINT(build/header_guard): meant for repeated inclusion.

namespace QF_Q4_NS {

// acc[i * T + t] += one chunk c of rows r0 .. r0+R against activation t < T. kTail: the last
// chunk, with `count` < 128 valid elements (masked loads; the padding of the activation is zero).
// A row's weights are decoded once for the T activations.
template <int R, int T, bool kLut, bool kTail, class Scales>
QF_Q4_TARGET inline void chunk_dot(const uint8_t* data, int64_t row_bytes, int64_t ahead,
                                   int64_t r0, int64_t c, int64_t count, const QuantizedX& qx,
                                   const Scales& scales, __m512* acc) {
  // E2M1 doubled + 12: {0, .5, 1, 1.5, 2, 3, 4, 6} * 2 + 12, then the negatives.
  const __m512i lut = _mm512_broadcast_i32x4(
      _mm_setr_epi8(12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0));
  const __m512i low = _mm512_set1_epi8(0x0F);
  for (int i = 0; i < R; ++i) {
    const uint8_t* p = data + (r0 + i) * row_bytes + c * (kChunk / 2);
    _mm_prefetch(reinterpret_cast<const char*>(p) + kPrefetchBytes, _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(p) + ahead, _MM_HINT_T1);
    __m512i wb;
    if constexpr (kTail) {
      wb = _mm512_maskz_loadu_epi8((__mmask64(1) << (count / 2)) - 1, p);
    } else {
      wb = _mm512_loadu_si512(p);
    }
    __m512i lo, hi;
    if constexpr (kLut && QF_Q4_VBMI) {
      // The table repeats every 16 bytes, so the bits above a nibble do not matter.
      lo = _mm512_permutexvar_epi8(wb, lut);
      hi = _mm512_permutexvar_epi8(_mm512_srli_epi16(wb, 4), lut);
    } else {
      lo = _mm512_and_si512(wb, low);
      hi = _mm512_and_si512(_mm512_srli_epi16(wb, 4), low);
      if constexpr (kLut) {
        lo = _mm512_shuffle_epi8(lut, lo);
        hi = _mm512_shuffle_epi8(lut, hi);
      }
    }
    if (c % 4 == 0) scales.prefetch(r0 + i, c, ahead);
    const __m512 ws = scales.template get<kTail>(r0 + i, c, count);
    const int8_t* xq = qx.q.data() + c * T * kChunk;
    const int32_t* xb = qx.lane_bias.data() + c * T * kLanes;
    const float* xsc = qx.lane_scale.data() + c * T * kLanes;
    for (int t = 0; t < T; ++t) {
      const __m512i xlo = _mm512_loadu_si512(xq + t * kChunk);
      const __m512i xhi = _mm512_loadu_si512(xq + t * kChunk + 64);
      const __m512i bias = _mm512_loadu_si512(xb + t * kLanes);
      const __m512 xs = _mm512_loadu_ps(xsc + t * kLanes);
      __m512i d = _mm512_dpbusd_epi32(bias, lo, xlo);
      d = _mm512_dpbusd_epi32(d, hi, xhi);
      acc[i * T + t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d), _mm512_mul_ps(ws, xs), acc[i * T + t]);
    }
  }
}

// acc[i * T + t] += chunks c, c+1 of rows r0 .. r0+R against activation t, for weight blocks of
// 16 or 32 elements (NVFP4, MXFP4) or INT4 groups that Int4Scales::pairs admits, with each lane
// holding one 16-element block (the activation's block, and NVFP4's; an MXFP4 scale or an INT4
// group covers two lanes or more): one float multiply-add per 16 elements instead of per 8.
// Lane 4q + j holds block 2q + j of chunk c (j < 2) or block 2q + j - 2 of chunk c + 1
// (j >= 2), the order of QuantizedX::pair_scale and Scales::pair.
//
// One token (T = 1): the weights are the unsigned side (E2M1 doubled + 12, INT4's q + 8) and
// each lane starts from the activation's lane bias; the two chunks' lanes (8 elements each) are
// added in pairs after vpdpbusd. A few tokens: the loads are what limits (one zmm load per
// cycle), so the sides swap: the weights are signed bytes (E2M1 doubled, q), the activations
// q + 128 (QuantizedX::pair_q_unsigned), and each lane starts from -128 x the sum of its
// weights, computed once per row for all T tokens: the same integers. The lane pairs are then
// formed once per row instead of per token: two dword permutes put each 16-element block's
// bytes in one lane of four registers (pair_q_unsigned's layout), so four vpdpbusd leave the
// block's whole dot product in its lane. Each row's weights are decoded once into registers for
// the T tokens. Both ways each lane's arithmetic is the same, so one token's result does not
// depend on how many others share its call.
template <int R, int T, bool kLut, class Scales>
QF_Q4_TARGET inline void pair_dot(const uint8_t* data, int64_t row_bytes, int64_t ahead,
                                  int64_t r0, int64_t c, const QuantizedX& qx,
                                  const Scales& scales, __m512* acc) {
  constexpr bool kSigned = T > 1;
  const __m512i lut = _mm512_broadcast_i32x4(
      kSigned ? _mm_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12)
              : _mm_setr_epi8(12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0));
  const __m512i low = _mm512_set1_epi8(0x0F);
  // The weights' four registers per chunk, or (kSigned) per pair: chunk c's dwords 2b, 2b + 1
  // hold block b's first and last 8 elements, chunk c + 1's are dwords 16 + 2b, 17 + 2b of the
  // two-register permute; lane 4q + j takes block 2q + j of c (j < 2), 2q + j - 2 of c + 1.
  const __m512i first =
      _mm512_setr_epi32(0, 2, 16, 18, 4, 6, 20, 22, 8, 10, 24, 26, 12, 14, 28, 30);
  const __m512i last =
      _mm512_setr_epi32(1, 3, 17, 19, 5, 7, 21, 23, 9, 11, 25, 27, 13, 15, 29, 31);
  __m512i wq[R][4], start[R];
  __m512 ws[R];
#pragma GCC unroll 4
  for (int i = 0; i < R; ++i) {
    const uint8_t* p = data + (r0 + i) * row_bytes + c * (kChunk / 2);
    const char* pc = reinterpret_cast<const char*>(p);
    _mm_prefetch(pc + kPrefetchBytes, _MM_HINT_T0);
    _mm_prefetch(pc + kPrefetchBytes + 64, _MM_HINT_T0);
    _mm_prefetch(pc + ahead, _MM_HINT_T1);
    _mm_prefetch(pc + ahead + 64, _MM_HINT_T1);
    __m512i w0 = _mm512_loadu_si512(p), w1 = _mm512_loadu_si512(p + 64);
    if constexpr (kSigned) {
      const __m512i a = _mm512_permutex2var_epi32(w0, first, w1);
      w1 = _mm512_permutex2var_epi32(w0, last, w1);
      w0 = a;
    }
    // wq[i]: low and high nibbles of w0, then of w1.
    if constexpr (!kLut) {
      // INT4: the nibble is q + 8 as stored; the signed side takes q itself.
      const __m512i off = _mm512_set1_epi8(kSigned ? 8 : 0);
      wq[i][0] = _mm512_sub_epi8(_mm512_and_si512(w0, low), off);
      wq[i][1] = _mm512_sub_epi8(_mm512_and_si512(_mm512_srli_epi16(w0, 4), low), off);
      wq[i][2] = _mm512_sub_epi8(_mm512_and_si512(w1, low), off);
      wq[i][3] = _mm512_sub_epi8(_mm512_and_si512(_mm512_srli_epi16(w1, 4), low), off);
    } else if constexpr (QF_Q4_VBMI) {
      wq[i][0] = _mm512_permutexvar_epi8(w0, lut);
      wq[i][1] = _mm512_permutexvar_epi8(_mm512_srli_epi16(w0, 4), lut);
      wq[i][2] = _mm512_permutexvar_epi8(w1, lut);
      wq[i][3] = _mm512_permutexvar_epi8(_mm512_srli_epi16(w1, 4), lut);
    } else {
      wq[i][0] = _mm512_shuffle_epi8(lut, _mm512_and_si512(w0, low));
      wq[i][1] = _mm512_shuffle_epi8(lut, _mm512_and_si512(_mm512_srli_epi16(w0, 4), low));
      wq[i][2] = _mm512_shuffle_epi8(lut, _mm512_and_si512(w1, low));
      wq[i][3] = _mm512_shuffle_epi8(lut, _mm512_and_si512(_mm512_srli_epi16(w1, 4), low));
    }
    if constexpr (kSigned) {
      const __m512i k128 = _mm512_set1_epi8(char(0x80));
      __m512i s = _mm512_setzero_si512();
#pragma GCC unroll 4
      for (int k = 0; k < 4; ++k) s = _mm512_dpbusd_epi32(s, k128, wq[i][k]);
      start[i] = _mm512_sub_epi32(_mm512_setzero_si512(), s);
    }
    if (c % 8 == 0) scales.prefetch(r0 + i, c, ahead);  // a line holds 8 chunks' scales
    ws[i] = scales.pair(r0 + i, c);
  }
  // Per token, the pair's 16 activation block scales, and its bytes: pair_q_unsigned (T > 1),
  // or q's chunks c and c + 1 (one token).
  const float* xps = qx.pair_scale.data() + c / 2 * T * kLanes;
#pragma GCC unroll 8
  for (int t = 0; t < T; ++t) {
    const __m512 xs = _mm512_loadu_ps(xps + t * kLanes);
#pragma GCC unroll 4
    for (int i = 0; i < R; ++i) {
      __m512i d;
      if constexpr (kSigned) {
        const uint8_t* xu = qx.pair_q_unsigned.data() + (c / 2 * T + t) * 2 * kChunk;
        d = start[i];
#pragma GCC unroll 4
        for (int k = 0; k < 4; ++k)
          d = _mm512_dpbusd_epi32(d, _mm512_loadu_si512(xu + 64 * k), wq[i][k]);
      } else {
        const int8_t* xq = qx.q.data() + c * kChunk;
        const int32_t* xb = qx.lane_bias.data() + c * kLanes;
        __m512i d0 = _mm512_dpbusd_epi32(_mm512_loadu_si512(xb), wq[i][0], _mm512_loadu_si512(xq));
        d0 = _mm512_dpbusd_epi32(d0, wq[i][1], _mm512_loadu_si512(xq + 64));
        __m512i d1 = _mm512_dpbusd_epi32(_mm512_loadu_si512(xb + kLanes), wq[i][2],
                                         _mm512_loadu_si512(xq + kChunk));
        d1 = _mm512_dpbusd_epi32(d1, wq[i][3], _mm512_loadu_si512(xq + kChunk + 64));
        const __m512 f0 = _mm512_castsi512_ps(d0), f1 = _mm512_castsi512_ps(d1);
        d = _mm512_add_epi32(_mm512_castps_si512(_mm512_shuffle_ps(f0, f1, 0x88)),
                             _mm512_castps_si512(_mm512_shuffle_ps(f0, f1, 0xDD)));
      }
      acc[i * T + t] =
          _mm512_fmadd_ps(_mm512_cvtepi32_ps(d), _mm512_mul_ps(ws[i], xs), acc[i * T + t]);
    }
  }
}

// y[t * y_stride + i] = the dot products of rows r0 + i (i < R) with activation t < T (the
// activation loads are shared between rows, the weight decoding between activations), in the
// scale units of Scales (the caller applies the per-tensor factor). Each (row, activation)'s
// arithmetic is the same whatever R and T, so results do not depend on how rows or tokens are
// grouped.
template <int R, int T, bool kLut, class Scales>
QF_Q4_TARGET void rows_dot(const uint8_t* data, int64_t row_bytes, int64_t ahead, int64_t r0,
                           int64_t cols, const QuantizedX& qx, const Scales& scales, float* y,
                           int64_t y_stride) {
  __m512 acc[R * T];
  for (int i = 0; i < R * T; ++i) acc[i] = _mm512_setzero_ps();
  const int64_t full = cols / kChunk;
  int64_t c = 0;
  bool pairs;
  if constexpr (Scales::kBlock == 0) pairs = scales.pairs;
  else pairs = Scales::kBlock == 16 || Scales::kBlock == 32;
  if (pairs)
    for (; c + 2 <= full; c += 2)
      pair_dot<R, T, kLut>(data, row_bytes, ahead, r0, c, qx, scales, acc);
  for (; c < full; ++c)
    chunk_dot<R, T, kLut, false>(data, row_bytes, ahead, r0, c, kChunk, qx, scales, acc);
  const int64_t rem = cols - full * kChunk;
  if (rem > 0) chunk_dot<R, T, kLut, true>(data, row_bytes, ahead, r0, full, rem, qx, scales, acc);
  for (int i = 0; i < R; ++i)
    for (int t = 0; t < T; ++t) y[t * y_stride + i] = _mm512_reduce_add_ps(acc[i * T + t]);
}

// Rows [r0, r1) against T activations: R rows at a time (R * T accumulators in registers), the
// rest one by one.
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

// x [tokens, cols] -> y [tokens, rows]; tokens in groups of 8, 4, 2 and 1, each group's
// activations interleaved by chunk and its rows reading the weights once.
// One token reads rows of at most kShortRowBytes one at a time (the batched groups, compute-bound,
// keep 2 rows sharing each activation load). Zen 4 VM, NVFP4 from 2 MB pages, GB/s, 4 rows -> 1
// row at a time, medians of 9-21 passes alternating in one process (a scratch harness; the ratio
// of each pass pair): a Llama-1B layer's seven products 1.04-1.07x on two threads, 1.05-1.11x on
// one; its 128256 x 2048 head 1.12x; 14336 x 4096 1.05x; 2048 x 8192 (4 KB rows) 1.00-1.02x;
// 4096 x 14336 0.97x with 1 row, so longer rows keep 4. In the cache (one core, 512 x 2048) one
// row at a time is slower, 25 against 35 GB/s: the one-row kernel is near its compute bound at
// the memory's rate, so the threshold stays where short rows' streams cost more.
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
      case 8: row_range<2, 8, kLut>(data, row_bytes, ahead, r0, r1, cols, g.qx, scales, yt, rows); break;
      case 4: row_range<2, 4, kLut>(data, row_bytes, ahead, r0, r1, cols, g.qx, scales, yt, rows); break;
      case 2: row_range<2, 2, kLut>(data, row_bytes, ahead, r0, r1, cols, g.qx, scales, yt, rows); break;
      default:
        if (short_rows)
          row_range<1, 1, kLut>(data, row_bytes, ahead, r0, r1, cols, g.qx, scales, yt, rows);
        else
          row_range<4, 1, kLut>(data, row_bytes, ahead, r0, r1, cols, g.qx, scales, yt, rows);
        break;
    }
  });
}


}  // namespace QF_Q4_NS

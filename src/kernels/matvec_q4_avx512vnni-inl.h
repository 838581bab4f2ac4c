// Included twice by matvec_q4_avx512vnni.cpp, inside namespace qf::kernels::{anonymous}, with
// QF_Q4_NS (namespace), QF_Q4_TARGET (target attribute) and QF_Q4_VBMI (0/1) defined.
// NOLINT(build/header_guard): meant for repeated inclusion.

namespace QF_Q4_NS {

// acc[i] += one chunk c of rows r0 .. r0+R against the activation. kTail: the last chunk, with
// `count` < 128 valid elements (masked loads; the padding of the activation is zero).
template <int R, bool kLut, bool kTail, class Scales>
QF_Q4_TARGET inline void chunk_dot(const uint8_t* data, int64_t row_bytes, int64_t r0, int64_t c,
                                     int64_t count, const QuantizedX& qx, const Scales& scales,
                                     __m512* acc) {
  // E2M1 doubled + 12: {0, .5, 1, 1.5, 2, 3, 4, 6} * 2 + 12, then the negatives.
  const __m512i lut = _mm512_broadcast_i32x4(
      _mm_setr_epi8(12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0));
  const __m512i low = _mm512_set1_epi8(0x0F);
  const __m512i xlo = _mm512_loadu_si512(qx.q.data() + c * kChunk);
  const __m512i xhi = _mm512_loadu_si512(qx.q.data() + c * kChunk + 64);
  const __m512i bias = _mm512_loadu_si512(qx.lane_bias.data() + c * kLanes);
  const __m512 xs = _mm512_loadu_ps(qx.lane_scale.data() + c * kLanes);
  for (int i = 0; i < R; ++i) {
    const uint8_t* p = data + (r0 + i) * row_bytes + c * (kChunk / 2);
    // Eight chunks ahead in this row: the hardware prefetcher alone leaves the 4 interleaved
    // row streams a little short of one core's bandwidth.
    _mm_prefetch(reinterpret_cast<const char*>(p) + kPrefetchBytes, _MM_HINT_T0);
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
    __m512i d = _mm512_dpbusd_epi32(bias, lo, xlo);
    d = _mm512_dpbusd_epi32(d, hi, xhi);
    const __m512 ws = scales.template get<kTail>(r0 + i, c, count);
    acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d), _mm512_mul_ps(ws, xs), acc[i]);
  }
}

// y[i] = the dot products of rows r0 .. r0+R (the activation loads are shared between them), in
// the scale units of Scales (the caller applies the per-tensor factor). Each row's arithmetic is
// the same whatever R, so results do not depend on how rows are grouped.
template <int R, bool kLut, class Scales>
QF_Q4_TARGET void rows_dot(const uint8_t* data, int64_t row_bytes, int64_t r0, int64_t cols,
                             const QuantizedX& qx, const Scales& scales, float* y) {
  __m512 acc[R];
  for (int i = 0; i < R; ++i) acc[i] = _mm512_setzero_ps();
  const int64_t full = cols / kChunk;
  for (int64_t c = 0; c < full; ++c)
    chunk_dot<R, kLut, false>(data, row_bytes, r0, c, kChunk, qx, scales, acc);
  const int64_t rem = cols - full * kChunk;
  if (rem > 0) chunk_dot<R, kLut, true>(data, row_bytes, r0, full, rem, qx, scales, acc);
  for (int i = 0; i < R; ++i) y[i] = _mm512_reduce_add_ps(acc[i]);
}

template <bool kLut, class Scales>
void run(const LinearWeight& w, const float* x, float* y, ThreadPool* pool, int offset,
         const Scales& scales, float factor) {
  QuantizedX qx;
  quantize_x(x, w.cols, offset, qx);
  const auto* data = static_cast<const uint8_t*>(w.data);
  const int64_t row_bytes = w.cols / 2, cols = w.cols;
  for_row_tasks(pool, w.rows, matvec_rows_per_task(w, 4), [&](int64_t r0, int64_t r1) {
    int64_t r = r0;
    for (; r + 4 <= r1; r += 4) rows_dot<4, kLut>(data, row_bytes, r, cols, qx, scales, y + r);
    for (; r < r1; ++r) rows_dot<1, kLut>(data, row_bytes, r, cols, qx, scales, y + r);
    for (int64_t i = r0; i < r1; ++i) y[i] *= factor;
  });
}


}  // namespace QF_Q4_NS

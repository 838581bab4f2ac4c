// A 16 x 16 transpose of 32-bit values in AVX-512 registers, for the BF16 matrix-matrix
// kernels' packers (activations into AMX B tiles, weights into AVX512-BF16 panels).
#pragma once

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))

#include <immintrin.h>

namespace qf::kernels {

// r[0..15] (16 x 16 32-bit values) transposed in place: r[j][i] = old r[i][j]. Two unpack
// levels, then 128-bit lane shuffles: 64 shuffles, where scatter stores (a word at a time) cost
// several times more on Zen 4.
__attribute__((target("avx512f"))) inline void transpose16(__m512 r[16]) {
  __m512 t[16], u[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 4; ++i) {
    const __m512d a = _mm512_castps_pd(t[4 * i]), b = _mm512_castps_pd(t[4 * i + 1]);
    const __m512d c = _mm512_castps_pd(t[4 * i + 2]), d = _mm512_castps_pd(t[4 * i + 3]);
    u[4 * i + 0] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
    u[4 * i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
    u[4 * i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
    u[4 * i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
  }
  // u[4i + c], 128-bit lane L: column 4L + c of rows 4i .. 4i+3.
  for (int c = 0; c < 4; ++c) {
    const __m512 s0 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0x44);
    const __m512 s1 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0xEE);
    const __m512 s2 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0x44);
    const __m512 s3 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0xEE);
    r[c] = _mm512_shuffle_f32x4(s0, s2, 0x88);
    r[4 + c] = _mm512_shuffle_f32x4(s0, s2, 0xDD);
    r[8 + c] = _mm512_shuffle_f32x4(s1, s3, 0x88);
    r[12 + c] = _mm512_shuffle_f32x4(s1, s3, 0xDD);
  }
}

}  // namespace qf::kernels

#endif

// BF16 weights against a few tokens (batched decode, fast mode) on vdpbf16ps: the activations
// rounded to BF16 once per call, as the prefill kernel does; a BF16 row is already the pair
// layout vdpbf16ps reads, so the weights stream from memory once for all the tokens with no
// conversion, two rows x 8 tokens of float32 accumulators in registers (half the instructions
// of widening the weights to float32 for FMAs).
#include "kernels/kernels_internal.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))

// GCC 12's AVX-512 headers start some intrinsics from _mm512_undefined_*(), which -Wuninitialized
// flags once inlined (GCC bug 105593); nothing here reads an undefined value.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <vector>

#define QF_BF16_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))

namespace qf::kernels {
namespace {

// acc[i * T + t] += columns [c, c + n) of rows r .. r+R against the T tokens (n < 32: masked
// loads, zeros past n).
template <int R, int T, bool kTail>
QF_BF16_TARGET inline void columns_tokens(const uint16_t* w, int64_t cols, int64_t r,
                                          const uint32_t* xb, int64_t kp, int64_t c, int64_t n,
                                          __m512* acc) {
  const __mmask32 m = kTail ? __mmask32((uint64_t(1) << n) - 1) : ~__mmask32(0);
  const __mmask16 mx = kTail ? __mmask16((1u << ((n + 1) / 2)) - 1) : __mmask16(0xFFFF);
  __m512i wv[R];
#pragma GCC unroll 4
  for (int i = 0; i < R; ++i) {
    const uint16_t* p = w + (r + i) * cols + c;
    _mm_prefetch(reinterpret_cast<const char*>(p) + 1024, _MM_HINT_T0);
    // The next block of R rows, same columns, to L2: a block's products take long enough at
    // 4-8 tokens that the hardware prefetchers alone let the stream stall between blocks (the
    // 128256-row BF16 head of llama-1b at 8 tokens: 93-103 -> 114-129 tok/s in `bench --batch
    // 8`, three alternating rounds; two blocks ahead no better).
    _mm_prefetch(reinterpret_cast<const char*>(p + R * cols), _MM_HINT_T1);
    wv[i] = kTail ? _mm512_maskz_loadu_epi16(m, p) : _mm512_loadu_si512(p);
  }
#pragma GCC unroll 8
  for (int t = 0; t < T; ++t) {
    const uint32_t* xp = xb + t * kp + c / 2;
    const __m512i xv = kTail ? _mm512_maskz_loadu_epi32(mx, xp) : _mm512_loadu_si512(xp);
#pragma GCC unroll 4
    for (int i = 0; i < R; ++i)
      acc[i * T + t] = _mm512_dpbf16_ps(acc[i * T + t], reinterpret_cast<__m512bh>(wv[i]),
                                        reinterpret_cast<__m512bh>(xv));
  }
}

// y[t * rows + r + i] for rows r .. r+R and T tokens; xb holds the tokens' BF16 activations,
// kp 32-bit pairs each (an odd cols padded with a zero). The loops are unrolled so that the
// R * T accumulators stay in registers (left as an array indexed in a loop, GCC kept them on
// the stack: a store and a load per vdpbf16ps, a third of the instruction's rate).
template <int R, int T>
QF_BF16_TARGET void rows_tokens(const uint16_t* w, int64_t cols, int64_t r, int64_t rows,
                                const uint32_t* xb, int64_t kp, float* y) {
  __m512 acc[R * T];
#pragma GCC unroll 32
  for (int i = 0; i < R * T; ++i) acc[i] = _mm512_setzero_ps();
  int64_t c = 0;
  for (; c + 32 <= cols; c += 32) columns_tokens<R, T, false>(w, cols, r, xb, kp, c, 32, acc);
  if (c < cols) columns_tokens<R, T, true>(w, cols, r, xb, kp, c, cols - c, acc);
#pragma GCC unroll 4
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) y[t * rows + r + i] = _mm512_reduce_add_ps(acc[i * T + t]);
}

template <int T>
void token_group(const LinearWeight& w, const uint32_t* xb, int64_t kp, float* y, ThreadPool* pool) {
  const auto* data = static_cast<const uint16_t*>(w.data);
  const int64_t per_task =
      std::min(matvec_rows_per_task(w, 2) * 4, std::max<int64_t>(2, w.rows / 16 / 2 * 2));
  for_row_tasks(pool, w.rows, per_task, [&](int64_t r0, int64_t r1) {
    int64_t r = r0;
    if constexpr (T == 8) {
      // Four rows against four tokens, twice (the rows' weights are in L1 for the second
      // half): half the activation loads per instruction of two rows against eight, 16
      // accumulators either way (in cache, 256 x 4096 on one core: 16-18 -> 24 GB/s).
      for (; r + 4 <= r1; r += 4) {
        rows_tokens<4, 4>(data, w.cols, r, w.rows, xb, kp, y);
        rows_tokens<4, 4>(data, w.cols, r, w.rows, xb + 4 * kp, kp, y + 4 * w.rows);
      }
    }
    for (; r + 2 <= r1; r += 2) rows_tokens<2, T>(data, w.cols, r, w.rows, xb, kp, y);
    for (; r < r1; ++r) rows_tokens<1, T>(data, w.cols, r, w.rows, xb, kp, y);
  });
}

}  // namespace

void matvec_bf16_tokens_avx512bf16(const LinearWeight& w, const float* x, int64_t tokens,
                                   float* y, ThreadPool* pool) {
  const int64_t kp = (w.cols + 1) / 2;
  std::vector<uint32_t> xb(static_cast<size_t>(tokens * kp));
  x_to_bf16_pairs(x, tokens, w.cols, xb.data());
  for (int64_t t0 = 0; t0 < tokens;) {
    const int64_t left = tokens - t0;
    const uint32_t* xt = xb.data() + t0 * kp;
    float* yt = y + t0 * w.rows;
    if (left >= 8) {
      token_group<8>(w, xt, kp, yt, pool);
      t0 += 8;
    } else if (left >= 4) {
      token_group<4>(w, xt, kp, yt, pool);
      t0 += 4;
    } else if (left >= 2) {
      token_group<2>(w, xt, kp, yt, pool);
      t0 += 2;
    } else {
      token_group<1>(w, xt, kp, yt, pool);
      t0 += 1;
    }
  }
}

}  // namespace qf::kernels

#else

namespace qf::kernels {
void matvec_bf16_tokens_avx512bf16(const LinearWeight&, const float*, int64_t, float*,
                                   ThreadPool*) {}
}  // namespace qf::kernels

#endif

// AVX-512 VNNI kernels for ggml blocks, reading the GGUF blocks in place (no repacking at load):
// Q4_0, Q8_0, MXFP4, NVFP4 against Q8_0 activations, and Q4_K, Q5_K, Q6_K against Q8_K (below).
//
// Per chunk of a row (128 elements for the nibble types, 64 for Q8_0) the block bytes become
// unsigned bytes (value + offset: Q4_0 nibble = q + 8; Q8_0 q ^ 0x80 = q + 128; FP4 kvalue + 12
// through a byte table), and vpdpbusd with the activation bytes gives 16 lanes of 8- (4-)
// element integer sums; each lane starts from -offset * (the sum of its activation bytes),
// computed once per product, so it holds the exact signed sum. The activation is stored in the
// order the nibbles come out of the blocks (ggml_prepare_simd), never the weights reordered.
// Lanes are converted to float and multiplied by their block's weight scale times activation
// scale (ggml's per-block factors; the additions are in lane order rather than block order, so
// results agree with the scalar model to float rounding). The first cut put each pair of
// blocks into element order with cross-lane shuffles and was bound by the shuffle port (11.5
// GB/s per core in cache for Q4_0; 28 now).
//
// Rows go 4 at a time (one activation load serves 4 rows) against up to 4 tokens (one decoded
// weight vector serves 4 tokens in prefill), with software prefetch of the row stream as in
// matvec_q4_avx512vnni.cpp: the hardware prefetchers alone leave the 4 interleaved row streams
// short of the memory bandwidth.
#include "kernels/ggml_vec_dot.h"

#include "core/numeric.h"
#include "formats/ggml_quants.h"
#include "formats/ggml_types.h"
#include "kernels/kernels_internal.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))

// GCC 12's AVX-512 headers start some intrinsics from _mm512_undefined_*(), which -Wuninitialized
// flags once inlined (GCC bug 105593); nothing here reads an undefined value.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstring>

#define QF_GGML_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,f16c")))

namespace qf::kernels {
namespace {

constexpr int64_t kPrefetchL1 = 512;

QF_GGML_TARGET inline float f16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}
inline uint64_t load_u16(const uint8_t* p) { return uint64_t(p[0]) | uint64_t(p[1]) << 8; }
inline uint64_t load_u32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// E2M1 doubled (ggml's kvalues) + 12, indexed by nibble.
QF_GGML_TARGET inline __m512i fp4_lut() {
  return _mm512_broadcast_i32x4(
      _mm_setr_epi8(12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0));
}

// Lane index vector: lane L takes element L / kPer of a smaller vector.
template <int kPer>
QF_GGML_TARGET inline __m512i spread_index() {
  alignas(64) int32_t idx[16];
  for (int l = 0; l < 16; ++l) idx[l] = l / kPer;
  return _mm512_load_si512(idx);
}

// A decoder turns one chunk of a row (kChunk elements; p: its first block) into kParts vectors
// of unsigned bytes (weight + kOffset) and the 16 lanes' weight scales. The activation is laid
// out to match (ggml_prepare_simd): part h, byte i of a chunk meets element elem(h, i) of the
// chunk, so both vpdpbusd of a chunk add into the same 16 lanes, and each lane's 8 elements lie
// in one weight scale block and one activation block. `blocks` < kBlocks: the row's tail chunk,
// whose missing blocks decode as 0 with scale 0 (and meet a zero activation).
//
// Nibble types take 4 weight blocks of 32 (Q4_0, MXFP4) or 2 of 64 (NVFP4) per chunk: one
// 64-byte vector of packed nibbles whose low and high halves are the two parts, so the nibbles
// are never moved across lanes (the weights' path has no shuffle unit work but the table
// lookup); only the few scale bytes are gathered.
struct Q4_0 {
  static constexpr int kChunk = 128, kParts = 2, kBlocks = 4, kElems = 32, kBytes = 18;
  static constexpr int kOffset = 8;
  static constexpr float kFactor = 1.f;
  static int elem(int h, int i) { return 32 * (i / 16) + i % 16 + 16 * h; }
  template <bool kTail>
  QF_GGML_TARGET static void decode(const uint8_t* p, int blocks, __m512i* u, __m512& ws) {
    __m512i w = _mm512_castsi128_si512(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 2)));
    uint64_t d = load_u16(p);
    if (!kTail || blocks > 1) {
      w = _mm512_inserti32x4(w, _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 20)), 1);
      d |= load_u16(p + 18) << 16;
    }
    if (!kTail || blocks > 2) {
      w = _mm512_inserti32x4(w, _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 38)), 2);
      d |= load_u16(p + 36) << 32;
    }
    if (!kTail || blocks > 3) {
      w = _mm512_inserti32x4(w, _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 56)), 3);
      d |= load_u16(p + 54) << 48;
    }
    if constexpr (kTail) {
      w = _mm512_maskz_mov_epi32(__mmask16((1u << (4 * blocks)) - 1), w);
    }
    const __m512i m = _mm512_set1_epi8(0x0F);
    u[0] = _mm512_and_si512(w, m);
    u[1] = _mm512_and_si512(_mm512_srli_epi16(w, 4), m);
    const __m128 s = _mm_cvtph_ps(_mm_cvtsi64_si128(int64_t(d)));
    ws = _mm512_permutexvar_ps(spread_index<4>(), _mm512_castps128_ps512(s));
  }
};
struct Mxfp4 {
  static constexpr int kChunk = 128, kParts = 2, kBlocks = 4, kElems = 32, kBytes = 17;
  static constexpr int kOffset = 12;
  static constexpr float kFactor = 1.f;
  static int elem(int h, int i) { return Q4_0::elem(h, i); }
  template <bool kTail>
  QF_GGML_TARGET static void decode(const uint8_t* p, int blocks, __m512i* u, __m512& ws) {
    __m512i w = _mm512_castsi128_si512(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 1)));
    uint32_t e = p[0];
    if (!kTail || blocks > 1) {
      w = _mm512_inserti32x4(w, _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 18)), 1);
      e |= uint32_t(p[17]) << 8;
    }
    if (!kTail || blocks > 2) {
      w = _mm512_inserti32x4(w, _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 35)), 2);
      e |= uint32_t(p[34]) << 16;
    }
    if (!kTail || blocks > 3) {
      w = _mm512_inserti32x4(w, _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 52)), 3);
      e |= uint32_t(p[51]) << 24;
    }
    if constexpr (kTail) {
      w = _mm512_maskz_mov_epi32(__mmask16((1u << (4 * blocks)) - 1), w);
    }
    const __m512i m = _mm512_set1_epi8(0x0F);
    u[0] = _mm512_shuffle_epi8(fp4_lut(), _mm512_and_si512(w, m));
    u[1] = _mm512_shuffle_epi8(fp4_lut(), _mm512_and_si512(_mm512_srli_epi16(w, 4), m));
    // Half the E8M0 value, 2^(e - 128), exactly (subnormal for e < 2).
    const __m512i ei = _mm512_permutexvar_epi32(
        spread_index<4>(), _mm512_cvtepu8_epi32(_mm_cvtsi32_si128(int(e))));
    ws = _mm512_scalef_ps(_mm512_set1_ps(1.f),
                          _mm512_cvtepi32_ps(_mm512_sub_epi32(ei, _mm512_set1_epi32(128))));
  }
};
// NVFP4: blocks of 64, 4 UE4M3 sub-block scales then 32 bytes in which sub-block s takes bytes
// 8s..8s+7, low nibbles first. The scales are decoded to F16 by a shift (the 7 low bits of the
// code into the F16 exponent and mantissa: 2^-8 times the E4M3 value, subnormals included), so
// kFactor = 2^8 * 0.5 gives ggml's half scale; ggml ignores bit 7 and decodes 0x7F as 0.
struct Nvfp4 {
  static constexpr int kChunk = 128, kParts = 2, kBlocks = 2, kElems = 64, kBytes = 36;
  static constexpr int kOffset = 12;
  static constexpr float kFactor = 128.f;
  static int elem(int h, int i) { return 64 * (i / 32) + 16 * ((i % 32) / 8) + i % 8 + 8 * h; }
  template <bool kTail>
  QF_GGML_TARGET static void decode(const uint8_t* p, int blocks, __m512i* u, __m512& ws) {
    __m512i w = _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 4)));
    uint64_t codes = load_u32(p);
    if (!kTail || blocks > 1) {
      w = _mm512_inserti64x4(w, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 40)), 1);
      codes |= load_u32(p + 36) << 32;
    } else {
      w = _mm512_maskz_mov_epi32(__mmask16(0x00FF), w);
    }
    const __m512i m = _mm512_set1_epi8(0x0F);
    u[0] = _mm512_shuffle_epi8(fp4_lut(), _mm512_and_si512(w, m));
    u[1] = _mm512_shuffle_epi8(fp4_lut(), _mm512_and_si512(_mm512_srli_epi16(w, 4), m));
    const __m128i c = _mm_cvtepu8_epi16(_mm_cvtsi64_si128(int64_t(codes)));
    const __mmask8 zero = _mm_cmpeq_epi16_mask(c, _mm_set1_epi16(0x7F));
    const __m128i h = _mm_maskz_mov_epi16(
        __mmask8(~zero), _mm_slli_epi16(_mm_and_si128(c, _mm_set1_epi16(0x7F)), 7));
    ws = _mm512_permutexvar_ps(spread_index<2>(), _mm512_castps256_ps512(_mm256_cvtph_ps(h)));
  }
};
// Q8_0: bytes, so one part of 64 natural-order elements (two blocks) per chunk; q ^ 0x80 =
// q + 128.
struct Q8_0 {
  static constexpr int kChunk = 64, kParts = 1, kBlocks = 2, kElems = 32, kBytes = 34;
  static constexpr int kOffset = 128;
  static constexpr float kFactor = 1.f;
  static int elem(int, int i) { return i; }
  template <bool kTail>
  QF_GGML_TARGET static void decode(const uint8_t* p, int blocks, __m512i* u, __m512& ws) {
    const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 2));
    uint64_t d = load_u16(p);
    __m512i z = _mm512_castsi256_si512(a);
    if (!kTail || blocks > 1) {
      z = _mm512_inserti64x4(z, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 36)), 1);
      d |= load_u16(p + 34) << 16;
    } else {
      z = _mm512_maskz_mov_epi32(__mmask16(0x00FF), z);
    }
    u[0] = _mm512_xor_si512(z, _mm512_set1_epi8(char(0x80)));
    const __m128 s = _mm_cvtph_ps(_mm_cvtsi64_si128(int64_t(d)));
    ws = _mm512_permutexvar_ps(spread_index<8>(), _mm512_castps128_ps512(s));
  }
};

struct Act {
  const int8_t* q;
  const int32_t* bias;
  const float* scale;
  int64_t q_stride, lane_stride;
};

// acc[i][t] += chunk c of rows r0 .. r0+R against tokens t0 .. t0+T.
template <class D, int R, int T, bool kTail>
QF_GGML_TARGET inline void step(const uint8_t* data, int64_t row_bytes, int64_t c, int blocks,
                                int64_t r0, int64_t t0, const Act& a, int64_t ahead,
                                __m512 (&acc)[R][T]) {
  __m512i u[R][D::kParts];
  __m512 ws[R];
  const int64_t off = c * D::kBlocks * D::kBytes;
  for (int i = 0; i < R; ++i) {
    const uint8_t* p = data + (r0 + i) * row_bytes + off;
    _mm_prefetch(reinterpret_cast<const char*>(p) + kPrefetchL1, _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(p) + ahead, _MM_HINT_T1);
    D::template decode<kTail>(p, blocks, u[i], ws[i]);
  }
  for (int t = 0; t < T; ++t) {
    const int8_t* xq = a.q + (t0 + t) * a.q_stride + c * D::kChunk;
    const __m512i x0 = _mm512_loadu_si512(xq);
    const __m512i b = _mm512_loadu_si512(a.bias + (t0 + t) * a.lane_stride + c * 16);
    const __m512 xs = _mm512_loadu_ps(a.scale + (t0 + t) * a.lane_stride + c * 16);
    if constexpr (D::kParts == 2) {
      const __m512i x1 = _mm512_loadu_si512(xq + 64);
      for (int i = 0; i < R; ++i)
        acc[i][t] = _mm512_fmadd_ps(
            _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(_mm512_dpbusd_epi32(b, u[i][0], x0), u[i][1], x1)),
            _mm512_mul_ps(ws[i], xs), acc[i][t]);
    } else {
      for (int i = 0; i < R; ++i)
        acc[i][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_dpbusd_epi32(b, u[i][0], x0)),
                                    _mm512_mul_ps(ws[i], xs), acc[i][t]);
    }
  }
}

// Rows r0 .. r0+R against tokens t0 .. t0+T. Every (row, token) output goes through the same
// instructions whatever R and T, so the grouping does not change a bit.
template <class D, int R, int T>
QF_GGML_TARGET void rows_tokens(const uint8_t* data, int64_t row_bytes, int64_t cols, int64_t r0,
                                int64_t t0, const Act& a, int64_t ahead, float factor, float* y,
                                int64_t ldy) {
  __m512 acc[R][T];
  for (int i = 0; i < R; ++i)
    for (int t = 0; t < T; ++t) acc[i][t] = _mm512_setzero_ps();
  const int64_t full = cols / D::kChunk;
  for (int64_t c = 0; c < full; ++c)
    step<D, R, T, false>(data, row_bytes, c, D::kBlocks, r0, t0, a, ahead, acc);
  const int tail = int(cols % D::kChunk / D::kElems);
  if (tail > 0) step<D, R, T, true>(data, row_bytes, full, tail, r0, t0, a, ahead, acc);
  for (int i = 0; i < R; ++i)
    for (int t = 0; t < T; ++t)
      y[(t0 + t) * ldy + r0 + i] = _mm512_reduce_add_ps(acc[i][t]) * (factor * D::kFactor);
}

template <class D>
QF_GGML_TARGET void run_rows(const LinearWeight& w, const GgmlActivations& ga, int64_t r0,
                             int64_t r1, int64_t t0, int64_t t1, float factor, float* y) {
  const auto* data = static_cast<const uint8_t*>(w.data);
  const int64_t row_bytes = w.cols / D::kElems * D::kBytes;
  const int64_t ahead = prefetch_ahead_bytes(row_bytes);
  const Act a{ga.simd_q.data(), ga.lane_bias.data(), ga.lane_scale.data(), ga.padded,
              ga.padded / D::kChunk * 16};
  for (int64_t t = t0; t < t1;) {
    if (t1 - t >= 4) {
      int64_t r = r0;
      for (; r + 4 <= r1; r += 4)
        rows_tokens<D, 4, 4>(data, row_bytes, w.cols, r, t, a, ahead, factor, y, w.rows);
      for (; r < r1; ++r)
        rows_tokens<D, 1, 4>(data, row_bytes, w.cols, r, t, a, ahead, factor, y, w.rows);
      t += 4;
    } else {
      int64_t r = r0;
      for (; r + 4 <= r1; r += 4)
        rows_tokens<D, 4, 1>(data, row_bytes, w.cols, r, t, a, ahead, factor, y, w.rows);
      for (; r < r1; ++r)
        rows_tokens<D, 1, 1>(data, row_bytes, w.cols, r, t, a, ahead, factor, y, w.rows);
      t += 1;
    }
  }
}

// The activation in decoder D's layout: per chunk, part h byte i = element D::elem(h, i); per
// 16 lanes of a chunk the bias -offset * (sum of the lane's bytes over the parts) and the
// activation scale of the lane's block. Lanes per 64 bytes of chunk part: 16 per chunk.
template <class D>
QF_GGML_TARGET void prepare(GgmlActivations& a) {
  const int64_t chunks = a.padded / D::kChunk;
  a.simd_q.assign(size_t(a.tokens * a.padded), 0);
  a.lane_bias.assign(size_t(a.tokens * chunks * 16), 0);
  a.lane_scale.assign(size_t(a.tokens * chunks * 16), 0.f);
  int map[D::kParts * 64];
  for (int h = 0; h < D::kParts; ++h)
    for (int i = 0; i < 64; ++i) map[h * 64 + i] = D::elem(h, i);
  const __m512i ones = _mm512_set1_epi8(1);
  const __m512i neg = _mm512_set1_epi32(-D::kOffset);
  for (int64_t t = 0; t < a.tokens; ++t) {
    const int8_t* q = a.q.data() + t * a.padded;
    const float* d = a.d.data() + t * a.d_stride();
    for (int64_t c = 0; c < chunks; ++c) {
      int8_t* o = a.simd_q.data() + t * a.padded + c * D::kChunk;
      const int8_t* qc = q + c * D::kChunk;
      for (int j = 0; j < D::kParts * 64; ++j) o[j] = qc[map[j]];
      __m512i s = _mm512_dpbusd_epi32(_mm512_setzero_si512(), ones, _mm512_loadu_si512(o));
      if constexpr (D::kParts == 2) s = _mm512_dpbusd_epi32(s, ones, _mm512_loadu_si512(o + 64));
      const int64_t lane0 = (t * chunks + c) * 16;
      _mm512_storeu_si512(a.lane_bias.data() + lane0, _mm512_mullo_epi32(s, neg));
      for (int l = 0; l < 16; ++l)
        a.lane_scale[size_t(lane0 + l)] = d[(c * D::kChunk + map[4 * l]) / 32];
    }
  }
}

// ---- k-quants (Q4_K, Q5_K, Q6_K) against Q8_K ------------------------------------------------
// A super-block of 256 weights decodes to 4 vectors of unsigned bytes in element order (Q4_K
// 0..15, Q5_K 0..31, Q6_K q + 32 in 0..63) and per-lane int32 sub-block scales; vpdpbusd with the
// activation bytes, times the lane's scale (vpmulld), summed in int32, gives the super-block's
// integer sum exactly. The activation's bsums (sums of 16) give the rest in one vpmaddwd: Q6_K's
// -32 * sum_j sc_j bsum_j and the Q4_K / Q5_K min term sum_j m_j bsum_j. The float combine is
// the scalar model's, operation for operation (scalar intrinsics, never contracted into a fused
// multiply-add), so the results are those of ggml_vec_dot_scalar bit for bit.
struct KBlock {
  __m512i u[4];
  __m512i sc[4];  // per-lane sub-block scale
  __m256i coef;   // per 16 activations: the coefficient of its bsum
  float d, dmin;
};

// Lane L of vector k (elements 64k + 4L ..) belongs to sub-block (64k + 4L) / kSub; v holds
// the sub-blocks' values in its first lanes.
template <int kSub>
QF_GGML_TARGET inline void spread_scales(__m512i v, __m512i (&sc)[4]) {
  for (int k = 0; k < 4; ++k) {
    alignas(64) int32_t idx[16];
    for (int l = 0; l < 16; ++l) idx[l] = (64 * k + 4 * l) / kSub;
    sc[k] = _mm512_permutexvar_epi32(_mm512_load_si512(idx), v);
  }
}

// Q4_K / Q5_K: scales and mins (ggml_k4_scales_mins: bytes 0-7 the scales, 8-15 the mins).
QF_GGML_TARGET inline void k4_scales(const uint8_t* p, KBlock& kb) {
  alignas(16) uint8_t sm16[16];
  ggml_k4_scales_mins(p + 4, sm16);
  const __m128i sm = _mm_load_si128(reinterpret_cast<const __m128i*>(sm16));
  spread_scales<32>(_mm512_cvtepu8_epi32(sm), kb.sc);
  // Per 16 activations (two per sub-block) the coefficient of its bsum: the sub-block's min.
  kb.coef = _mm256_cvtepu8_epi16(_mm_unpackhi_epi8(sm, sm));
  kb.d = f16(p);
  kb.dmin = f16(p + 2);
}

struct Q4_K {
  static constexpr int kBytes = 144;
  static constexpr bool kMins = true;
  QF_GGML_TARGET static void decode(const uint8_t* p, KBlock& kb) {
    const __m256i m = _mm256_set1_epi8(0x0F);
    for (int k = 0; k < 4; ++k) {
      const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 16 + 32 * k));
      kb.u[k] = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_and_si256(q, m)),
                                   _mm256_and_si256(_mm256_srli_epi16(q, 4), m), 1);
    }
    k4_scales(p, kb);
  }
};
struct Q5_K {
  static constexpr int kBytes = 176;
  static constexpr bool kMins = true;
  QF_GGML_TARGET static void decode(const uint8_t* p, KBlock& kb) {
    const __m256i m = _mm256_set1_epi8(0x0F), sixteen = _mm256_set1_epi8(16);
    const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 16));
    for (int k = 0; k < 4; ++k) {
      const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 48 + 32 * k));
      const __m256i lo = _mm256_or_si256(
          _mm256_and_si256(q, m),
          _mm256_maskz_mov_epi8(_mm256_test_epi8_mask(qh, _mm256_set1_epi8(char(1 << (2 * k)))),
                                sixteen));
      const __m256i hi = _mm256_or_si256(
          _mm256_and_si256(_mm256_srli_epi16(q, 4), m),
          _mm256_maskz_mov_epi8(
              _mm256_test_epi8_mask(qh, _mm256_set1_epi8(char(1 << (2 * k + 1)))), sixteen));
      kb.u[k] = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
    }
    k4_scales(p, kb);
  }
};
struct Q6_K {
  static constexpr int kBytes = 210;
  static constexpr bool kMins = false;
  QF_GGML_TARGET static void decode(const uint8_t* p, KBlock& kb) {
    const __m256i m = _mm256_set1_epi8(0x0F), three = _mm256_set1_epi8(3);
    for (int h = 0; h < 2; ++h) {
      const __m256i l0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 64 * h));
      const __m256i l1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 64 * h + 32));
      const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 128 + 32 * h));
      // The 2-bit fields of qh (bits 0-1, 2-3, 4-5, 6-7) to bits 4..5 of each byte: shifts
      // within 16-bit lanes, then a per-byte mask, so nothing crosses between bytes.
      const __m256i top = _mm256_slli_epi16(three, 4);
      const __m256i h0 = _mm256_and_si256(_mm256_slli_epi16(qh, 4), top);
      const __m256i h1 = _mm256_and_si256(_mm256_slli_epi16(qh, 2), top);
      const __m256i h2 = _mm256_and_si256(qh, top);
      const __m256i h3 = _mm256_and_si256(_mm256_srli_epi16(qh, 2), top);
      const __m256i a = _mm256_or_si256(_mm256_and_si256(l0, m), h0);
      const __m256i b = _mm256_or_si256(_mm256_and_si256(l1, m), h1);
      const __m256i c = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m), h2);
      const __m256i d = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m), h3);
      kb.u[2 * h] = _mm512_inserti64x4(_mm512_castsi256_si512(a), b, 1);
      kb.u[2 * h + 1] = _mm512_inserti64x4(_mm512_castsi256_si512(c), d, 1);
    }
    // The 16 signed scales; the coefficient of each bsum, 32 * its scale.
    const __m128i s8 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 192));
    spread_scales<16>(_mm512_cvtepi8_epi32(s8), kb.sc);
    kb.coef = _mm256_slli_epi16(_mm256_cvtepi8_epi16(s8), 5);
    kb.d = f16(p + 208);
    kb.dmin = 0.f;
  }
};

template <class K, int T>
QF_GGML_TARGET void k_row_tokens(const uint8_t* row, int64_t blocks, int64_t r, int64_t t0,
                                 const GgmlActivations& a, float factor, float* y, int64_t ldy) {
  __m128 sum[T];
  for (int t = 0; t < T; ++t) sum[t] = _mm_setzero_ps();
  for (int64_t b = 0; b < blocks; ++b) {
    const uint8_t* p = row + b * K::kBytes;
    _mm_prefetch(reinterpret_cast<const char*>(p) + 1024, _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(p) + 1024 + 64, _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(p) + 1024 + 128, _MM_HINT_T0);
    KBlock kb;
    K::decode(p, kb);
    for (int t = 0; t < T; ++t) {
      const int8_t* q = a.q.data() + (t0 + t) * a.padded + 256 * b;
      __m512i acc = _mm512_setzero_si512();
      for (int k = 0; k < 4; ++k) {
        const __m512i dot = _mm512_dpbusd_epi32(_mm512_setzero_si512(), kb.u[k],
                                                _mm512_loadu_si512(q + 64 * k));
        acc = _mm512_add_epi32(acc, _mm512_mullo_epi32(dot, kb.sc[k]));
      }
      const __m256i bs = _mm256_loadu_si256(
          reinterpret_cast<const __m256i*>(a.bsums.data() + (t0 + t) * (a.padded / 16) + 16 * b));
      // Both sums in one reduction (exact in any order): pairs of the products' 8 lanes and
      // the corrections' 8 side by side, then halves.
      const __m256i h = _mm256_hadd_epi32(
          _mm256_add_epi32(_mm512_castsi512_si256(acc), _mm512_extracti64x4_epi64(acc, 1)),
          _mm256_madd_epi16(kb.coef, bs));
      __m128i q4 = _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
      q4 = _mm_hadd_epi32(q4, q4);  // [isum, corr, isum, corr]
      const int32_t isum = _mm_cvtsi128_si32(q4), corr = _mm_extract_epi32(q4, 1);
      const __m128 dx = _mm_set_ss(a.d[size_t((t0 + t) * a.d_stride() + b)]);
      if constexpr (K::kMins) {
        // (d * dx) * isum - (dmin * dx) * mins
        const __m128 x1 = _mm_mul_ss(_mm_mul_ss(_mm_set_ss(kb.d), dx), _mm_cvtsi32_ss(dx, isum));
        const __m128 x2 = _mm_mul_ss(_mm_mul_ss(_mm_set_ss(kb.dmin), dx), _mm_cvtsi32_ss(dx, corr));
        sum[t] = _mm_add_ss(sum[t], _mm_sub_ss(x1, x2));
      } else {
        // (d * dx) * (isum - 32 sum_j sc_j bsum_j)
        sum[t] = _mm_add_ss(sum[t], _mm_mul_ss(_mm_mul_ss(_mm_set_ss(kb.d), dx),
                                               _mm_cvtsi32_ss(dx, isum - corr)));
      }
    }
  }
  for (int t = 0; t < T; ++t) y[(t0 + t) * ldy + r] = _mm_cvtss_f32(sum[t]) * factor;
}

template <class K>
QF_GGML_TARGET void run_k_rows(const LinearWeight& w, const GgmlActivations& a, int64_t r0,
                               int64_t r1, int64_t t0, int64_t t1, float factor, float* y) {
  const int64_t blocks = w.cols / 256;
  const int64_t row_bytes = blocks * K::kBytes;
  const auto* data = static_cast<const uint8_t*>(w.data);
  for (int64_t t = t0; t < t1;) {
    const bool four = t1 - t >= 4;
    for (int64_t r = r0; r < r1; ++r) {
      if (four) {
        k_row_tokens<K, 4>(data + r * row_bytes, blocks, r, t, a, factor, y, w.rows);
      } else {
        k_row_tokens<K, 1>(data + r * row_bytes, blocks, r, t, a, factor, y, w.rows);
      }
    }
    t += four ? 4 : 1;
  }
}

// ggml_quantize_act_q8_0 with vector loads: the same amax (a maximum does not depend on order),
// the same scalar d and 127 / amax, and vcvtps2dq rounds to nearest even as nearbyint does.
QF_GGML_TARGET void quantize_q8_0_avx512(const float* x, int64_t n, int8_t* q, float* d) {
  for (int64_t b = 0; b < n / 32; ++b) {
    const __m512 v0 = _mm512_loadu_ps(x + 32 * b), v1 = _mm512_loadu_ps(x + 32 * b + 16);
    const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
    d[b] = f16_to_f32(f32_to_f16(amax / 127.f));
    const __m512 id = _mm512_set1_ps(amax != 0.f ? 127.f / amax : 0.f);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + 32 * b),
                     _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(_mm512_mul_ps(v0, id))));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + 32 * b + 16),
                     _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(_mm512_mul_ps(v1, id))));
  }
}

int offset_of(GgmlType t) {
  switch (t) {
    case GgmlType::Q4_0: return Q4_0::kOffset;
    case GgmlType::Q8_0: return Q8_0::kOffset;
    case GgmlType::MXFP4: return Mxfp4::kOffset;
    case GgmlType::NVFP4: return Nvfp4::kOffset;
    default: return -1;
  }
}

}  // namespace

bool ggml_has_simd(const LinearWeight& w) {
  const GgmlActKind kind = ggml_act_kind(w);
  const bool typed = kind == GgmlActKind::q8_k ||
                     (kind == GgmlActKind::q8_0 && offset_of(GgmlType(w.ggml_type)) >= 0);
  return typed && cpu_has_avx512vnni();
}

bool ggml_quantize_act_q8_0_simd(const float* x, int64_t n, int8_t* q, float* d) {
  if (!cpu_has_avx512vnni()) return false;
  quantize_q8_0_avx512(x, n, q, d);
  return true;
}

void ggml_prepare_simd(const LinearWeight& w, GgmlActivations& a) {
  switch (GgmlType(w.ggml_type)) {
    case GgmlType::Q4_0: prepare<Q4_0>(a); break;
    case GgmlType::Q8_0: prepare<Q8_0>(a); break;
    case GgmlType::MXFP4: prepare<Mxfp4>(a); break;
    case GgmlType::NVFP4: prepare<Nvfp4>(a); break;
    default: break;  // the k-quant kernels read q, d and bsums as they are
  }
}

bool ggml_rows_simd(const LinearWeight& w, const GgmlActivations& a, int64_t r0, int64_t r1,
                    int64_t t0, int64_t t1, float factor, float* y) {
  if (!ggml_has_simd(w)) return false;
  switch (GgmlType(w.ggml_type)) {
    case GgmlType::Q4_0: run_rows<Q4_0>(w, a, r0, r1, t0, t1, factor, y); return true;
    case GgmlType::Q8_0: run_rows<Q8_0>(w, a, r0, r1, t0, t1, factor, y); return true;
    case GgmlType::MXFP4: run_rows<Mxfp4>(w, a, r0, r1, t0, t1, factor, y); return true;
    case GgmlType::NVFP4: run_rows<Nvfp4>(w, a, r0, r1, t0, t1, factor, y); return true;
    case GgmlType::Q4_K: run_k_rows<Q4_K>(w, a, r0, r1, t0, t1, factor, y); return true;
    case GgmlType::Q5_K: run_k_rows<Q5_K>(w, a, r0, r1, t0, t1, factor, y); return true;
    case GgmlType::Q6_K: run_k_rows<Q6_K>(w, a, r0, r1, t0, t1, factor, y); return true;
    default: return false;
  }
}

}  // namespace qf::kernels

#else  // not x86-64 GCC/Clang: the scalar model only

namespace qf::kernels {
bool ggml_has_simd(const LinearWeight&) { return false; }
bool ggml_quantize_act_q8_0_simd(const float*, int64_t, int8_t*, float*) { return false; }
void ggml_prepare_simd(const LinearWeight&, GgmlActivations&) {}
bool ggml_rows_simd(const LinearWeight&, const GgmlActivations&, int64_t, int64_t, int64_t,
                    int64_t, float, float*) {
  return false;
}
}  // namespace qf::kernels

#endif

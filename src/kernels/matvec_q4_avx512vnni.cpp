// 4-bit matrix-vector product (NVFP4, MXFP4, both INT4 layouts) with int8 activations and
// AVX-512 VNNI: nibbles become unsigned bytes through an in-lane byte table, vpdpbusd forms exact
// integer dot products per 8 elements, block scales are applied per 32-bit lane in float.
//
// Why this shape: the float kernels spend their time turning nibbles into floats with cross-lane
// permutes (compute-bound at ~12 G weights/s per core). Here a 64-byte load of weights (128
// elements) costs two masks/shifts, two vpshufb and two vpdpbusd (with VBMI: one shift, two
// vpermb, two vpdpbusd), and the 8 E4M3 block scales of a chunk one byte shuffle, a shift, a mask
// and vcvtph2ps, with no cross-lane work in the weights' path: the
// activation, quantized once per call, is stored in the order the nibbles come out of a byte
// (low nibbles = even elements, high nibbles = odd ones), not the weights reordered.
//
// vpdpbusd multiplies unsigned by signed bytes, so weights are stored as value + offset (E2M1
// doubled + 12 in [0, 24]; INT4 nibble = q + 8 as stored) and each lane starts from the bias
// -offset * (sum of its 8 activation bytes), computed once per call (a few tokens swap the sides
// and permute each row's dwords once for all of them: see pair_dot in
// matvec_q4_avx512vnni-inl.h).
#include "kernels/q4_int8_activation.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))

// GCC 12's AVX-512 headers start some intrinsics from _mm512_undefined_*(), which -Wuninitialized
// flags once inlined (GCC bug 105593); nothing here reads an undefined value.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <vector>

#define QF_VNNI_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,f16c")))

namespace qf::kernels {
namespace {

using namespace q4;  // the activation layout, quantize_x*, prefetch distances

// Whether INT4 groups of `group` columns let 256 columns be summed per 16-column block with
// the scales at a fixed lane pattern: each block within one group, and 256 columns either
// whole groups or within one.
inline bool int4_groups_tile_256(int64_t group) {
  return group % 16 == 0 && (256 % group == 0 || group % 256 == 0);
}

// A row pair's chunk of 64 columns (`count` valid bytes) as two rows of q + 8 bytes.
QF_VNNI_TARGET inline void row_pair_decode(const uint8_t* p, int64_t ahead, int64_t count,
                                           __m512i& lo, __m512i& hi) {
  const __m512i low = _mm512_set1_epi8(0x0F), eight = _mm512_set1_epi8(8);
  _mm_prefetch(reinterpret_cast<const char*>(p) + kPrefetchBytes, _MM_HINT_T0);
  _mm_prefetch(reinterpret_cast<const char*>(p) + ahead, _MM_HINT_T1);
  const __m512i wb = count == 64 ? _mm512_loadu_si512(p)
                                 : _mm512_maskz_loadu_epi8((__mmask64(1) << count) - 1, p);
  // Padding bytes decode to 8 (q = 0 + 8) and meet x = 0.
  lo = _mm512_xor_si512(_mm512_and_si512(wb, low), eight);
  hi = _mm512_xor_si512(_mm512_and_si512(_mm512_srli_epi16(wb, 4), low), eight);
}

// Lane-pair sums of a and b within each 128-bit lane: [a0+a1, a2+a3, b0+b1, b2+b3].
QF_VNNI_TARGET inline __m512i lane_pair_sums(__m512i a, __m512i b) {
  const __m512 fa = _mm512_castsi512_ps(a), fb = _mm512_castsi512_ps(b);
  return _mm512_add_epi32(_mm512_castps_si512(_mm512_shuffle_ps(fa, fb, 0x88)),
                          _mm512_castps_si512(_mm512_shuffle_ps(fa, fb, 0xDD)));
}

// Rows r0, r0 + 1 (a pair) of the row-pair INT4 layout against T tokens' activations qx[0 .. T)
// (natural order, offset 8): y[t * y_stride + i]. A 64-byte load holds 64 columns of the two
// rows (low nibble: the even row); nibble ^ 8 is q + 8. Lane L of a chunk covers columns
// 4L .. 4L+3, each within one group (group % 4 == 0 and it divides 64 or is a multiple of it).
// The pair's weights are decoded once for the T tokens. Where `quad_idx` is given (groups of 16
// to 256 or multiples of 256), 4 chunks at a time: each row's 4 integer lane vectors are summed
// down to one lane per 16-column block (two shuffle-add levels; lane 4m + k = block m of chunk
// k, QuantizedX::quad_scale's order) before one conversion and one scale multiply-add, instead
// of one per chunk; the rest chunk by chunk.
template <int T>
QF_VNNI_TARGET void row_pair_dot(const uint8_t* data, const float* scales, int64_t group,
                                 const int32_t* quad_idx, int64_t r0, int64_t cols,
                                 int64_t ahead, const QuantizedX* qx, float* y,
                                 int64_t y_stride) {
  constexpr int64_t kNat = 64;
  const int64_t groups = cols / group;
  alignas(64) int32_t idx_arr[16];
  for (int j = 0; j < 16; ++j) idx_arr[j] = group >= kNat ? 0 : int32_t(4 * j / group);
  const __m512i idx = _mm512_load_si512(idx_arr);
  const float* sa_row = scales + r0 * groups;
  const float* sb_row = sa_row + groups;
  const uint8_t* row = data + (r0 / 2) * cols;
  __m512 acc[2 * T];
  for (int i = 0; i < 2 * T; ++i) acc[i] = _mm512_setzero_ps();
  int64_t c = 0;
  if (quad_idx != nullptr) {
    const __m512i qidx = _mm512_loadu_si512(quad_idx);
    const __mmask16 qm = __mmask16((1u << std::max<int64_t>(1, 256 / group)) - 1);
    // The quad's first group, advanced without a division: 256 / group groups a quad, or one
    // group every group / 256 quads.
    const int64_t step = group <= 256 ? 256 / group : 0;
    int64_t g0 = 0, within = 0;
    for (; c + 4 <= cols / kNat; c += 4) {
      __m512i lo[4], hi[4];
#pragma GCC unroll 4
      for (int k = 0; k < 4; ++k)
        row_pair_decode(row + (c + k) * kNat, ahead, kNat, lo[k], hi[k]);
      const __m512 sa = _mm512_permutexvar_ps(qidx, _mm512_maskz_loadu_ps(qm, sa_row + g0));
      const __m512 sb = _mm512_permutexvar_ps(qidx, _mm512_maskz_loadu_ps(qm, sb_row + g0));
#pragma GCC unroll 8
      for (int t = 0; t < T; ++t) {
        __m512i da[4], db[4];
#pragma GCC unroll 4
        for (int k = 0; k < 4; ++k) {
          const __m512i xq = _mm512_loadu_si512(qx[t].q.data() + (c + k) * kNat);
          const __m512i bias = _mm512_loadu_si512(qx[t].lane_bias.data() + (c + k) * kLanes);
          da[k] = _mm512_dpbusd_epi32(bias, lo[k], xq);
          db[k] = _mm512_dpbusd_epi32(bias, hi[k], xq);
        }
        const __m512i a =
            lane_pair_sums(lane_pair_sums(da[0], da[1]), lane_pair_sums(da[2], da[3]));
        const __m512i b =
            lane_pair_sums(lane_pair_sums(db[0], db[1]), lane_pair_sums(db[2], db[3]));
        const __m512 xs = _mm512_loadu_ps(qx[t].quad_scale.data() + c / 4 * kLanes);
        acc[2 * t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(a), _mm512_mul_ps(sa, xs), acc[2 * t]);
        acc[2 * t + 1] =
            _mm512_fmadd_ps(_mm512_cvtepi32_ps(b), _mm512_mul_ps(sb, xs), acc[2 * t + 1]);
      }
      if (step > 0) {
        g0 += step;
      } else if ((within += 256) == group) {
        within = 0;
        ++g0;
      }
    }
  }
  for (; c < qx[0].chunks; ++c) {
    const int64_t count = std::min(kNat, cols - c * kNat);
    __m512i lo, hi;
    row_pair_decode(row + c * kNat, ahead, count, lo, hi);
    const int64_t g0 = c * kNat / group;
    const __mmask16 sm = __mmask16((1u << std::min<int64_t>(16, (count + group - 1) / group)) - 1);
    const __m512 sa = _mm512_permutexvar_ps(idx, _mm512_maskz_loadu_ps(sm, sa_row + g0));
    const __m512 sb = _mm512_permutexvar_ps(idx, _mm512_maskz_loadu_ps(sm, sb_row + g0));
    for (int t = 0; t < T; ++t) {
      const __m512i xq = _mm512_loadu_si512(qx[t].q.data() + c * kNat);
      const __m512i bias = _mm512_loadu_si512(qx[t].lane_bias.data() + c * kLanes);
      const __m512 xs = _mm512_loadu_ps(qx[t].lane_scale.data() + c * kLanes);
      acc[2 * t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_dpbusd_epi32(bias, lo, xq)),
                                   _mm512_mul_ps(sa, xs), acc[2 * t]);
      acc[2 * t + 1] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_dpbusd_epi32(bias, hi, xq)),
                                       _mm512_mul_ps(sb, xs), acc[2 * t + 1]);
    }
  }
  for (int t = 0; t < T; ++t) {
    y[t * y_stride] = _mm512_reduce_add_ps(acc[2 * t]);
    y[t * y_stride + 1] = _mm512_reduce_add_ps(acc[2 * t + 1]);
  }
}

// Per-lane weight scales of one row's chunk. `count` is the number of valid elements (128 but
// in the last chunk); missing scales read as 0 so that padding lanes stay finite.
struct Nvfp4Scales {
  static constexpr int kBlock = 16;
  const uint8_t* codes;  // [rows, cols / 16] E4M3
  int64_t per_row;
  // The scales as far ahead (to L2) as the weights at `ahead` bytes: 1/8 of that distance.
  void prefetch(int64_t row, int64_t c, int64_t ahead) const {
    _mm_prefetch(reinterpret_cast<const char*>(codes + row * per_row + c * 8) + ahead / 8,
                 _MM_HINT_T1);
  }
  // The 16 scales of chunks c, c + 1 (c even, both whole) in pair_dot's lane order.
  QF_VNNI_TARGET __m512 pair(int64_t row, int64_t c) const {
    const __m256i v = _mm256_broadcastsi128_si256(
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(codes + row * per_row + c * 8)));
    const __m256i h = _mm256_shuffle_epi8(
        v, _mm256_setr_epi8(-1, 0, -1, 1, -1, 8, -1, 9, -1, 2, -1, 3, -1, 10, -1, 11,  //
                            -1, 4, -1, 5, -1, 12, -1, 13, -1, 6, -1, 7, -1, 14, -1, 15));
    return _mm512_cvtph_ps(_mm256_and_si256(_mm256_srai_epi16(h, 1), _mm256_set1_epi16(-0x4001)));
  }
  // E4M3 -> F16 is a shift: the 7 magnitude bits land in the F16 exponent and mantissa with an
  // exponent bias 8 too big, so the value comes out 2^-8 times the scale (subnormals included,
  // which vcvtph2ps handles exactly); the caller multiplies 2^8 back once per row. With the code
  // in the high byte of a 16-bit lane, an arithmetic shift right by one puts the magnitude in
  // bits 13..7 and the sign in bits 15 and 14; bit 14 is then cleared.
  template <bool kTail>
  QF_VNNI_TARGET __m512 get(int64_t row, int64_t c, int64_t count) const {
    const uint8_t* s = codes + row * per_row + c * (kChunk / 16);
    __m256i v;
    if constexpr (kTail) {
      v = _mm256_broadcastq_epi64(
          _mm_maskz_loadu_epi8(__mmask16((1u << ((count + 15) / 16)) - 1), s));
    } else {
      int64_t eight;
      std::memcpy(&eight, s, 8);
      v = _mm256_set1_epi64x(eight);
    }
    // 16-bit lane L (L < 8 in the low 128 bits) takes code L / 2 in its high byte.
    const __m256i h = _mm256_shuffle_epi8(
        v, _mm256_setr_epi8(-1, 0, -1, 0, -1, 1, -1, 1, -1, 2, -1, 2, -1, 3, -1, 3,  //
                            -1, 4, -1, 4, -1, 5, -1, 5, -1, 6, -1, 6, -1, 7, -1, 7));
    const __m256i f16 = _mm256_and_si256(_mm256_srai_epi16(h, 1), _mm256_set1_epi16(-0x4001));
    return _mm512_cvtph_ps(f16);
  }
};

struct Mxfp4Scales {
  static constexpr int kBlock = 32;
  const uint8_t* codes;  // [rows, cols / 32] E8M0
  int64_t per_row;
  void prefetch(int64_t row, int64_t c, int64_t ahead) const {
    _mm_prefetch(reinterpret_cast<const char*>(codes + row * per_row + c * 4) + ahead / 16,
                 _MM_HINT_T1);
  }
  // 2^(e - 127) exactly for each E8M0 code e (2^-127 is subnormal).
  static QF_VNNI_TARGET __m512 power(__m128i codes16) {
    const __m512i e = _mm512_cvtepu8_epi32(codes16);
    return _mm512_scalef_ps(_mm512_set1_ps(1.f),
                            _mm512_cvtepi32_ps(_mm512_sub_epi32(e, _mm512_set1_epi32(127))));
  }
  // The scales of chunks c, c + 1 (c even, both whole) in pair_dot's lane order: lanes 4q, 4q+1
  // are the two 16-element halves of chunk c's block q, lanes 4q+2, 4q+3 chunk c+1's.
  QF_VNNI_TARGET __m512 pair(int64_t row, int64_t c) const {
    int64_t eight;
    std::memcpy(&eight, codes + row * per_row + c * (kChunk / 32), 8);
    return power(_mm_shuffle_epi8(_mm_cvtsi64_si128(eight),
                                  _mm_setr_epi8(0, 0, 4, 4, 1, 1, 5, 5, 2, 2, 6, 6, 3, 3, 7, 7)));
  }
  template <bool kTail>
  QF_VNNI_TARGET __m512 get(int64_t row, int64_t c, int64_t count) const {
    const uint8_t* s = codes + row * per_row + c * (kChunk / 32);
    __m128i v = _mm_maskz_loadu_epi8(__mmask16((1u << ((count + 31) / 32)) - 1), s);
    // Padding lanes get 2^-127 and meet x = 0.
    return power(
        _mm_shuffle_epi8(v, _mm_setr_epi8(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3)));
  }
};

struct Int4Scales {
  static constexpr int kBlock = 0;  // group, at run time
  const float* scales;  // [rows, cols / group]
  int64_t per_row;
  int64_t group;  // a multiple of 8 that divides 128 or is a multiple of it
  int32_t idx[16];  // lane L -> 8L / group
  // pair_dot's lane order (see pair()), where int4_groups_tile_256(group).
  bool pairs = false;
  int32_t pair_idx[16];
  __mmask16 pair_mask = 0;
  void set_pairs() {
    pairs = int4_groups_tile_256(group);
    if (!pairs) return;
    for (int q = 0; q < 4; ++q)
      for (int j = 0; j < 4; ++j) {
        const int64_t e = j < 2 ? (2 * q + j) * 16 : kChunk + (2 * q + j - 2) * 16;
        pair_idx[4 * q + j] = int32_t(e / group);
      }
    pair_mask = __mmask16((1u << std::max<int64_t>(1, 256 / group)) - 1);
  }
  QF_VNNI_TARGET __m512 pair(int64_t row, int64_t c) const {
    const __m512 v =
        _mm512_maskz_loadu_ps(pair_mask, scales + row * per_row + c * kChunk / group);
    return _mm512_permutexvar_ps(_mm512_loadu_si512(pair_idx), v);
  }
  void prefetch(int64_t row, int64_t c, int64_t ahead) const {
    // 4-byte scales per group, half-byte weights: 8 / group scale bytes per weight byte.
    _mm_prefetch(reinterpret_cast<const char*>(scales + row * per_row + c * kChunk / group) +
                     ahead * 8 / group,
                 _MM_HINT_T1);
  }
  template <bool kTail>
  QF_VNNI_TARGET __m512 get(int64_t row, int64_t c, int64_t count) const {
    const int64_t e0 = c * kChunk;
    const float* s = scales + row * per_row + e0 / group;
    const int64_t n = std::max<int64_t>(1, (count + group - 1) / group);
    const __m512 v = _mm512_maskz_loadu_ps(__mmask16((1u << std::min<int64_t>(n, 16)) - 1), s);
    return _mm512_permutexvar_ps(_mm512_loadu_si512(idx), v);
  }
};

// The row products, compiled twice: for AVX-512 VNNI alone, and with VBMI (vpermb decodes a
// nibble without masking it first, since it reads only the low 6 bits of each index byte).
#define QF_Q4_NS vnni
#define QF_Q4_VBMI 0
#define QF_Q4_TARGET QF_VNNI_TARGET
#include "kernels/matvec_q4_avx512vnni-inl.h"
#undef QF_Q4_NS
#undef QF_Q4_VBMI
#undef QF_Q4_TARGET
#define QF_Q4_NS vbmi
#define QF_Q4_VBMI 1
#define QF_Q4_TARGET \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi,f16c")))
#include "kernels/matvec_q4_avx512vnni-inl.h"
#undef QF_Q4_NS
#undef QF_Q4_VBMI
#undef QF_Q4_TARGET

template <bool kLut, class Scales>
void run(const LinearWeight& w, const float* x, int64_t tokens, float* y, ThreadPool* pool,
         int offset, const Scales& scales, float factor) {
  if (cpu_has_avx512vbmi()) {
    vbmi::run<kLut>(w, x, tokens, y, pool, offset, scales, factor);
  } else {
    vnni::run<kLut>(w, x, tokens, y, pool, offset, scales, factor);
  }
}

}  // namespace

bool cpu_has_avx512vnni() {
  static const bool ok = [] {
    // QFORGE_NO_AVX512_VNNI=1: the paths of CPUs without it (comparisons, tests of fallbacks).
    const char* off = std::getenv("QFORGE_NO_AVX512_VNNI");
    if (off != nullptr && *off != '\0' && std::strcmp(off, "0") != 0) return false;
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni") &&
           __builtin_cpu_supports("f16c");
  }();
  return ok;
}

void matvec_nvfp4_avx512vnni(const LinearWeight& w, const float* x, int64_t tokens, float* y,
                             ThreadPool* pool) {
  // Doubled E2M1 (x 0.5) and F16-shifted scales (x 2^8).
  run<true>(w, x, tokens, y, pool, 12, Nvfp4Scales{w.block_scales, w.cols / 16},
            w.global_scale * 128.f);
}

void matvec_mxfp4_avx512vnni(const LinearWeight& w, const float* x, int64_t tokens, float* y,
                             ThreadPool* pool) {
  run<true>(w, x, tokens, y, pool, 12, Mxfp4Scales{w.block_scales, w.cols / 32}, 0.5f);
}

void matvec_int4_packed32_avx512vnni(const LinearWeight& w, const float* x, int64_t tokens,
                                     float* y, ThreadPool* pool) {
  Int4Scales sc{w.scales, w.cols / w.group, w.group, {}};
  for (int j = 0; j < 16; ++j) sc.idx[j] = w.group >= kChunk ? 0 : int32_t(8 * j / w.group);
  sc.set_pairs();
  run<false>(w, x, tokens, y, pool, 8, sc, 1.f);
}

void matvec_int4_row_pairs_avx512vnni(const LinearWeight& w, const float* x, int64_t tokens,
                                      float* y, ThreadPool* pool) {
  const auto* data = static_cast<const uint8_t*>(w.data);
  // quad_idx[4m + k]: the group of block m of chunk k, relative to the quad's first group.
  alignas(64) int32_t quad_idx[16];
  for (int m = 0; m < 4; ++m)
    for (int k = 0; k < 4; ++k) quad_idx[4 * m + k] = int32_t((64 * k + 16 * m) / w.group);
  const int32_t* qi = int4_groups_tile_256(w.group) ? quad_idx : nullptr;
  // Groups of 4 tokens (each pair's weights decoded once for them), the rest one at a time.
  run_row_pair_tasks(w, x, tokens, y, pool, 4,
                     [&](const QuantizedX* qx, int T, int64_t r, int pairs, int64_t ahead,
                         float* out) {
                       for (int i = 0; i < pairs; ++i) {
                         const int64_t ri = r + 2 * i;
                         float* o = out + 2 * i;
                         if (T == 4)
                           row_pair_dot<4>(data, w.scales, w.group, qi, ri, w.cols, ahead, qx, o,
                                           w.rows);
                         else
                           row_pair_dot<1>(data, w.scales, w.group, qi, ri, w.cols, ahead, qx, o,
                                           w.rows);
                       }
                     });
}

}  // namespace qf::kernels

#else  // not x86-64 GCC/Clang: the portable Highway kernels only

namespace qf::kernels {
bool cpu_has_avx512vnni() { return false; }
void matvec_nvfp4_avx512vnni(const LinearWeight&, const float*, int64_t, float*, ThreadPool*) {}
void matvec_mxfp4_avx512vnni(const LinearWeight&, const float*, int64_t, float*, ThreadPool*) {}
void matvec_int4_row_pairs_avx512vnni(const LinearWeight&, const float*, int64_t, float*,
                                      ThreadPool*) {}
void matvec_int4_packed32_avx512vnni(const LinearWeight&, const float*, int64_t, float*,
                                     ThreadPool*) {}
}  // namespace qf::kernels

#endif

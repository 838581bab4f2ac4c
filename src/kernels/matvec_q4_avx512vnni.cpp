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
// -offset * (sum of its 8 activation bytes), computed once per call (a few tokens swap the sides:
// see pair_dot in matvec_q4_avx512vnni-inl.h).
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

// Rows 2i .. 2i+2P of the row-pair INT4 layout: a 64-byte load holds 64 columns of two rows
// (low nibble: the even row); nibble ^ 8 is q + 8. Lane L of a chunk covers columns 4L .. 4L+3,
// each within one group (group % 4 == 0 and it divides 64 or is a multiple of it).
template <int P>
QF_VNNI_TARGET void row_pairs_dot(const uint8_t* data, const float* scales, int64_t group,
                                  int64_t r0, int64_t cols, int64_t ahead, const QuantizedX& qx,
                                  float* y) {
  constexpr int64_t kNat = 64;
  const int64_t groups = cols / group;
  alignas(64) int32_t idx_arr[16];
  for (int j = 0; j < 16; ++j) idx_arr[j] = group >= kNat ? 0 : int32_t(4 * j / group);
  const __m512i idx = _mm512_load_si512(idx_arr);
  const __m512i low = _mm512_set1_epi8(0x0F), eight = _mm512_set1_epi8(8);
  __m512 acc[2 * P];
  for (int i = 0; i < 2 * P; ++i) acc[i] = _mm512_setzero_ps();
  for (int64_t c = 0; c < qx.chunks; ++c) {
    const int64_t count = std::min(kNat, cols - c * kNat);
    const __m512i xq = _mm512_loadu_si512(qx.q.data() + c * kNat);
    const __m512i bias = _mm512_loadu_si512(qx.lane_bias.data() + c * kLanes);
    const __m512 xs = _mm512_loadu_ps(qx.lane_scale.data() + c * kLanes);
    const __mmask16 sm = __mmask16((1u << std::min<int64_t>(16, (count + group - 1) / group)) - 1);
    for (int i = 0; i < P; ++i) {
      const int64_t r = r0 + 2 * i;
      const uint8_t* p = data + (r / 2) * cols + c * kNat;
      _mm_prefetch(reinterpret_cast<const char*>(p) + kPrefetchBytes, _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(p) + ahead, _MM_HINT_T1);
      const __m512i wb = count == kNat ? _mm512_loadu_si512(p)
                                       : _mm512_maskz_loadu_epi8((__mmask64(1) << count) - 1, p);
      // Padding bytes decode to 8 (q = 0 + 8) and meet x = 0.
      const __m512i lo = _mm512_xor_si512(_mm512_and_si512(wb, low), eight);
      const __m512i hi = _mm512_xor_si512(_mm512_and_si512(_mm512_srli_epi16(wb, 4), low), eight);
      const int64_t g0 = c * kNat / group;
      const __m512 sa = _mm512_permutexvar_ps(
          idx, _mm512_maskz_loadu_ps(sm, scales + r * groups + g0));
      const __m512 sb = _mm512_permutexvar_ps(
          idx, _mm512_maskz_loadu_ps(sm, scales + (r + 1) * groups + g0));
      acc[2 * i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_dpbusd_epi32(bias, lo, xq)),
                                   _mm512_mul_ps(sa, xs), acc[2 * i]);
      acc[2 * i + 1] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_dpbusd_epi32(bias, hi, xq)),
                                       _mm512_mul_ps(sb, xs), acc[2 * i + 1]);
    }
  }
  for (int i = 0; i < 2 * P; ++i) y[i] = _mm512_reduce_add_ps(acc[i]);
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
  // pair_dot's lane order (see pair()); `pairs` when each of its 16-element blocks lies in one
  // group and a chunk pair's groups start at a fixed lane pattern: group % 16 == 0 and either
  // 256 % group == 0 or group % 256 == 0.
  bool pairs = false;
  int32_t pair_idx[16];
  __mmask16 pair_mask = 0;
  void set_pairs() {
    pairs = group % 16 == 0 && (256 % group == 0 || group % 256 == 0);
    if (!pairs) return;
    for (int q = 0; q < 4; ++q)
      for (int j = 0; j < 4; ++j) {
        const int64_t e = j < 2 ? (2 * q + j) * 16 : kChunk + (2 * q + j - 2) * 16;
        pair_idx[4 * q + j] = int32_t(e / group);
      }
    pair_mask = __mmask16((1u << std::max<int64_t>(1, 256 / group)) - 1);
  }
  QF_VNNI_TARGET __m512 pair(int64_t row, int64_t c) const {
    const __m512 v = _mm512_maskz_loadu_ps(pair_mask, scales + row * per_row + c * kChunk / group);
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

bool cpu_has_avx512vbmi() {
  static const bool ok = __builtin_cpu_supports("avx512vbmi");
  return ok;
}

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
  // One token at a time (group 1).
  run_row_pair_tasks(w, x, tokens, y, pool, 1,
                     [&](const QuantizedX* qx, int, int64_t r, int pairs, int64_t ahead,
                         float* out) {
                       if (pairs == 2)
                         row_pairs_dot<2>(data, w.scales, w.group, r, w.cols, ahead, *qx, out);
                       else
                         row_pairs_dot<1>(data, w.scales, w.group, r, w.cols, ahead, *qx, out);
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

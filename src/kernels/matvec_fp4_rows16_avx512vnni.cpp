// The int8-activation product over NVFP4 and MXFP4 repacked 16 rows at a time
// (kernels/fp4_rows16.h), AVX-512 VNNI + VBMI. Per block of 16 rows (16 or 32 elements and their
// scales): two or four loads, four or eight vpermb (E2M1 doubled + 12: the unsigned side of
// vpdpbusd), one scale conversion for the 16 rows, and per token and 16-element activation block
// four vpdpbusd against the activation's 4-byte groups broadcast to every lane, the block's bias
// (-12 x the sum of its 16 activation bytes), one conversion and one multiply-add. Lane k
// accumulates row k over the whole row in block order, so a (row, token)'s arithmetic is the
// same whatever the token group: one token's result never depends on the others.
#include "kernels/fp4_rows16.h"
#include "kernels/q4_int8_activation.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))

// GCC 12's AVX-512 headers start some intrinsics from _mm512_undefined_*(), which -Wuninitialized
// flags once inlined (GCC bug 105593); nothing here reads an undefined value.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <cstring>
#include <vector>

#define QF_ROWS16_TARGET \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi,f16c")))

namespace qf::kernels {
namespace {

using namespace q4;  // the activation layout, its quantization in token groups

// One token's 16-element block as the kernel reads it: its int8 values as four 4-byte groups,
// elements 0, 2, 4, 6 | 1, 3, 5, 7 | 8, 10, 12, 14 | 9, 11, 13, 15 (the order the codes' low
// and high nibbles come out of the two code registers it meets), the bias -12 x their sum, the
// scale.
struct BlockAct {
  int32_t q[4];
  int32_t bias;
  float scale;
};

// A token group's activations (QuantizedX, T tokens interleaved by chunk) as [blocks][T].
void block_acts(const QuantizedX& qx, int64_t T, int64_t blocks, std::vector<BlockAct>& out) {
  out.resize(size_t(blocks * T));
  for (int64_t b = 0; b < blocks; ++b)
    for (int64_t t = 0; t < T; ++t) {
      // Block b is lanes 2j, 2j + 1 of chunk b / 8 (QuantizedX: even elements in bytes
      // [0, 64) of a chunk, odd ones in [64, 128), lane L covering elements 8L .. 8L + 7).
      const int64_t at = b / 8 * T + t, j = b % 8;
      const int8_t* q = qx.q.data() + at * kChunk;
      BlockAct& a = out[size_t(b * T + t)];
      std::memcpy(&a.q[0], q + 8 * j, 4);
      std::memcpy(&a.q[1], q + 64 + 8 * j, 4);
      std::memcpy(&a.q[2], q + 8 * j + 4, 4);
      std::memcpy(&a.q[3], q + 64 + 8 * j + 4, 4);
      a.bias = qx.lane_bias[size_t(at * kLanes + 2 * j)] + qx.lane_bias[size_t(at * kLanes + 2 * j + 1)];
      a.scale = qx.lane_scale[size_t(at * kLanes + 2 * j)];
    }
}

// The token groups' L2 prefetch distance (8 KB measured best on Zen 4).
constexpr int64_t kAhead = 8192;

// The 16 rows' scales of a block (codes at s) as floats: E4M3 -> F16 is a shift (as in
// matvec_q4_avx512vnni.cpp's Nvfp4Scales): with the code in the high byte, an arithmetic shift
// right by one and bit 14 cleared give 2^-8 x the scale; E8M0 is 2^(e - 127), exactly (2^-127
// is subnormal).
template <int kBlock>
QF_ROWS16_TARGET inline __m512 block_scales(const uint8_t* s) {
  const __m128i codes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s));
  if constexpr (kBlock == 16) {
    const __m256i h = _mm256_slli_epi16(_mm256_cvtepu8_epi16(codes), 8);
    return _mm512_cvtph_ps(_mm256_and_si256(_mm256_srai_epi16(h, 1), _mm256_set1_epi16(-0x4001)));
  } else {
    const __m512i e = _mm512_sub_epi32(_mm512_cvtepu8_epi32(codes), _mm512_set1_epi32(127));
    return _mm512_scalef_ps(_mm512_set1_ps(1.f), _mm512_cvtepi32_ps(e));
  }
}

// y[t * y_stride + k] = row k of the group at `g` (16 rows, `blocks` blocks of kBlock elements)
// against token t < T (a: [activation blocks][T], 16 elements each), in the units of the doubled
// E2M1 (and for NVFP4 of the F16-shifted scales).
template <int kBlock, int T>
QF_ROWS16_TARGET void group_dot(const uint8_t* g, int64_t blocks, const BlockAct* a, float* y,
                                int64_t y_stride) {
  constexpr int kRegs = kBlock / 8;  // 64-byte registers of codes per block
  constexpr int64_t kBytes = fp4_rows16_block_bytes(kBlock);
  // E2M1 doubled + 12: {0, .5, 1, 1.5, 2, 3, 4, 6} * 2 + 12, then the negatives; vpermb reads
  // the low 6 bits of an index and the table repeats every 16 bytes, so the bits above a
  // nibble do not matter.
  const __m512i lut = _mm512_broadcast_i32x4(
      _mm_setr_epi8(12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0));
  __m512 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t i = 0; i < blocks; ++i, g += kBytes) {
    // One token: no software prefetch. The 16 rows are one sequential stream, which the
    // hardware prefetchers follow (Zen 4, 2 MB pages, alternating passes in one process: without
    // L2 prefetches 8 KB ahead, 1.05-1.10x on a Llama-1B layer and on 4096 x 14336, 1 and 2
    // threads). Token groups, compute-bound, gain from them: with 8 tokens 1.24x.
    if constexpr (T > 1) {
      const char* pc = reinterpret_cast<const char*>(g);
      for (int64_t line = 0; line < kBytes; line += 64) _mm_prefetch(pc + kAhead + line, _MM_HINT_T1);
    }
    // w[2j]: the low nibbles of register j (elements 8j, 8j + 2, .., 8j + 6 of each row's
    // block), w[2j + 1] the high ones.
    __m512i w[2 * kRegs];
#pragma GCC unroll 4
    for (int j = 0; j < kRegs; ++j) {
      const __m512i v = _mm512_loadu_si512(g + 64 * j);
      w[2 * j] = _mm512_permutexvar_epi8(v, lut);
      w[2 * j + 1] = _mm512_permutexvar_epi8(_mm512_srli_epi16(v, 4), lut);
    }
    const __m512 ws = block_scales<kBlock>(g + 64 * kRegs);
#pragma GCC unroll 2
    for (int h = 0; h < kBlock / 16; ++h, a += T) {
#pragma GCC unroll 8
      for (int t = 0; t < T; ++t) {
        __m512i d = _mm512_set1_epi32(a[t].bias);
        d = _mm512_dpbusd_epi32(d, w[4 * h], _mm512_set1_epi32(a[t].q[0]));
        d = _mm512_dpbusd_epi32(d, w[4 * h + 1], _mm512_set1_epi32(a[t].q[1]));
        d = _mm512_dpbusd_epi32(d, w[4 * h + 2], _mm512_set1_epi32(a[t].q[2]));
        d = _mm512_dpbusd_epi32(d, w[4 * h + 3], _mm512_set1_epi32(a[t].q[3]));
        acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d),
                                 _mm512_mul_ps(ws, _mm512_set1_ps(a[t].scale)), acc[t]);
      }
    }
  }
  for (int t = 0; t < T; ++t) _mm512_storeu_ps(y + t * y_stride, acc[t]);
}

template <int kBlock>
void run(const LinearWeight& w, const float* x, int64_t tokens, float* y, ThreadPool* pool,
         float factor) {
  const std::vector<TokenGroup> groups = quantize_token_groups(x, tokens, w.cols, 12);
  const int64_t blocks = w.cols / kBlock, rows = w.rows;
  std::vector<std::vector<BlockAct>> acts(groups.size());
  for (size_t i = 0; i < groups.size(); ++i)
    block_acts(groups[i].qx, groups[i].size, w.cols / 16, acts[i]);
  const auto* data = static_cast<const uint8_t*>(w.data);
  const uint64_t group_bytes = uint64_t(blocks * fp4_rows16_block_bytes(kBlock));
  const int64_t per_task = (q4_rows_per_task(w) + kRows16 - 1) / kRows16 * kRows16;
  for_row_tasks(pool, rows, per_task, [&](int64_t r0, int64_t r1) {
    for (size_t i = 0; i < groups.size(); ++i) {
      const BlockAct* a = acts[i].data();
      float* yt = y + groups[i].t0 * rows;
      for (int64_t r = r0; r < r1; r += kRows16) {
        const uint8_t* g = data + uint64_t(r / kRows16) * group_bytes;
        switch (groups[i].size) {
          case 8: group_dot<kBlock, 8>(g, blocks, a, yt + r, rows); break;
          case 4: group_dot<kBlock, 4>(g, blocks, a, yt + r, rows); break;
          case 2: group_dot<kBlock, 2>(g, blocks, a, yt + r, rows); break;
          default: group_dot<kBlock, 1>(g, blocks, a, yt + r, rows); break;
        }
      }
    }
    for (int64_t t = 0; t < tokens; ++t)
      for (int64_t r = r0; r < r1; ++r) y[t * rows + r] *= factor;
  });
}

}  // namespace

bool cpu_has_avx512vbmi() {
  static const bool ok = __builtin_cpu_supports("avx512vbmi");
  return ok;
}

bool fits_int8act_fp4_rows16(const LinearWeight& w) {
  return is_fp4_rows16(w.format) && w.cols % fp4_rows16_block(w.format) == 0 &&
         w.rows % kRows16 == 0 && cpu_has_avx512vnni() && cpu_has_avx512vbmi();
}

void matvec_fp4_rows16_int8act(const LinearWeight& w, const float* x, int64_t tokens, float* y,
                               ThreadPool* pool) {
  // Doubled E2M1 (x 0.5); NVFP4's F16-shifted scales (x 2^8) and its tensor scale.
  if (w.format == WeightFormat::mxfp4_rows16) run<32>(w, x, tokens, y, pool, 0.5f);
  else run<16>(w, x, tokens, y, pool, w.global_scale * 128.f);
}

}  // namespace qf::kernels

#else  // not x86-64 GCC/Clang: no repacked weights (fp4_rows16_wanted is false)

namespace qf::kernels {
bool cpu_has_avx512vbmi() { return false; }
bool fits_int8act_fp4_rows16(const LinearWeight&) { return false; }
void matvec_fp4_rows16_int8act(const LinearWeight&, const float*, int64_t, float*, ThreadPool*) {}
}  // namespace qf::kernels

#endif

#include "kernels/q4_int8_activation.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))

#include <immintrin.h>

#define QF_AVX2_TARGET __attribute__((target("avx2,fma,f16c")))

namespace qf::kernels {
namespace q4 {
namespace {

// One block of 16 activations (the first `valid`, the rest 0) to int8 in element order:
// quantize_activation_int8's arithmetic (x * (127 / amax), rounded to nearest even by
// vcvtps2dq), so every layout agrees with it bit for bit.
QF_AVX2_TARGET inline __m128i quantize_block16(const float* x, int64_t valid, float& amax) {
  alignas(32) static constexpr int32_t kIota[16] = {0, 1, 2, 3, 4, 5, 6, 7,
                                                    8, 9, 10, 11, 12, 13, 14, 15};
  const __m256i n = _mm256_set1_epi32(int32_t(valid));
  const __m256 a = _mm256_maskload_ps(
      x, _mm256_cmpgt_epi32(n, _mm256_load_si256(reinterpret_cast<const __m256i*>(kIota))));
  const __m256 b = _mm256_maskload_ps(
      x + 8, _mm256_cmpgt_epi32(n, _mm256_load_si256(reinterpret_cast<const __m256i*>(kIota + 8))));
  const __m256 sign = _mm256_set1_ps(-0.f);
  const __m256 m = _mm256_max_ps(_mm256_andnot_ps(sign, a), _mm256_andnot_ps(sign, b));
  __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
  h = _mm_max_ps(h, _mm_movehl_ps(h, h));
  amax = _mm_cvtss_f32(_mm_max_ss(h, _mm_movehdup_ps(h)));
  const __m256 inv = _mm256_set1_ps(amax > 0.f ? 127.f / amax : 0.f);
  const __m256i qa = _mm256_cvtps_epi32(_mm256_mul_ps(a, inv));
  const __m256i qb = _mm256_cvtps_epi32(_mm256_mul_ps(b, inv));
  // packs works within 128-bit halves: [a0-3 b0-3 | a4-7 b4-7] -> element order.
  const __m256i w = _mm256_permute4x64_epi64(_mm256_packs_epi32(qa, qb), 0xD8);
  return _mm_packs_epi16(_mm256_castsi256_si128(w), _mm256_extracti128_si256(w, 1));
}

// Exact 32-bit sums of 4 consecutive signed bytes.
QF_AVX2_TARGET inline __m256i sum4_i8(__m256i q) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), q), _mm256_set1_epi16(1));
}

inline int64_t pair_lane_block(int j, int q) { return (j >= 2 ? 8 : 0) + 2 * q + (j & 1); }

}  // namespace

QF_AVX2_TARGET void quantize_x(const float* x, int64_t n, int offset, QuantizedX& out) {
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  const int64_t padded = chunks * kChunk;
  out.chunks = chunks;
  out.q.assign(size_t(padded), 0);
  out.lane_scale.assign(size_t(chunks * kLanes), 0.f);
  out.lane_bias.assign(size_t(chunks * kLanes), 0);
  // Evens to the low 8 bytes, odds to the high 8 bytes of a block's 16 bytes.
  const __m128i split = _mm_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15);
  for (int64_t b = 0; b < padded / kActBlock; ++b) {
    const int64_t e0 = b * kActBlock;
    const int64_t valid = std::clamp<int64_t>(n - e0, 0, kActBlock);
    float amax;
    const __m128i q8 = _mm_shuffle_epi8(quantize_block16(x + e0, valid, amax), split);
    const int64_t chunk = e0 / kChunk, in = (e0 % kChunk) / 2;  // byte index within halves
    int8_t* base = out.q.data() + chunk * kChunk;
    _mm_storel_epi64(reinterpret_cast<__m128i*>(base + in), q8);
    _mm_storel_epi64(reinterpret_cast<__m128i*>(base + 64 + in), _mm_unpackhi_epi64(q8, q8));
    const float s = amax / 127.f;
    const int64_t lane = chunk * kLanes + in / 4;  // a block of 16 covers two lanes
    out.lane_scale[size_t(lane)] = s;
    out.lane_scale[size_t(lane + 1)] = s;
  }
  out.pair_scale.assign(size_t(chunks / 2 * kLanes), 0.f);
  for (int64_t p = 0; p < chunks / 2; ++p)
    for (int q = 0; q < 4; ++q)
      for (int j = 0; j < 4; ++j)  // a block's scale is that of its first lane
        out.pair_scale[size_t(p * kLanes + 4 * q + j)] =
            out.lane_scale[size_t(2 * p * kLanes + 2 * pair_lane_block(j, q))];
  // Lane L of a chunk: bytes 4L .. 4L+3 of the even half and of the odd half.
  const __m256i neg_off = _mm256_set1_epi32(-offset);
  for (int64_t c = 0; c < chunks; ++c)
    for (int h = 0; h < 2; ++h) {
      const int8_t* q = out.q.data() + c * kChunk + 32 * h;
      const __m256i sum =
          _mm256_add_epi32(sum4_i8(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(q))),
                           sum4_i8(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + 64))));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out.lane_bias.data() + c * kLanes + 8 * h),
                          _mm256_mullo_epi32(sum, neg_off));
    }
  out.block_scale.resize(size_t(chunks * 8));
  out.block_bias.resize(size_t(chunks * 8));
  for (int64_t c = 0; c < chunks; ++c)
    for (int j = 0; j < 8; ++j) {
      const size_t lane = size_t(c * kLanes + 2 * kHaddBlock[j]);
      out.block_scale[size_t(c * 8 + j)] = out.lane_scale[lane];
      out.block_bias[size_t(c * 8 + j)] = out.lane_bias[lane] + out.lane_bias[lane + 1];
    }
}

QF_AVX2_TARGET void quantize_x_natural(const float* x, int64_t n, int offset, QuantizedX& out) {
  constexpr int64_t kNat = 64;
  const int64_t chunks = (n + kNat - 1) / kNat;
  const int64_t padded = chunks * kNat;
  out.chunks = chunks;
  out.q.assign(size_t(padded), 0);
  out.lane_scale.assign(size_t(chunks * kLanes), 0.f);
  out.lane_bias.assign(size_t(chunks * kLanes), 0);
  for (int64_t b = 0; b < padded / kActBlock; ++b) {
    const int64_t e0 = b * kActBlock;
    const int64_t valid = std::clamp<int64_t>(n - e0, 0, kActBlock);
    float amax;
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out.q.data() + e0),
                     quantize_block16(x + e0, valid, amax));
    for (int k = 0; k < 4; ++k) out.lane_scale[size_t(e0 / 4 + k)] = amax / 127.f;
  }
  out.quad_scale.assign(cpu_has_avx512vnni() ? size_t(chunks / 4 * kLanes) : 0, 0.f);
  for (int64_t g = 0; g < int64_t(out.quad_scale.size()) / kLanes; ++g)
    for (int m = 0; m < 4; ++m)
      for (int k = 0; k < 4; ++k)  // block m of chunk 4g + k: its first lane's scale
        out.quad_scale[size_t(g * kLanes + 4 * m + k)] =
            out.lane_scale[size_t((4 * g + k) * kLanes + 4 * m)];
  const __m256i neg_off = _mm256_set1_epi32(-offset);
  for (int64_t i = 0; i < padded / 32; ++i) {
    const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(out.q.data() + 32 * i));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out.lane_bias.data() + 8 * i),
                        _mm256_mullo_epi32(sum4_i8(q), neg_off));
  }
}

void interleave_tokens(const std::vector<QuantizedX>& xs, QuantizedX& out) {
  const int64_t T = int64_t(xs.size()), chunks = xs[0].chunks;
  out.chunks = chunks;
  out.q.resize(size_t(T * chunks * kChunk));
  out.lane_scale.resize(size_t(T * chunks * kLanes));
  out.lane_bias.resize(size_t(T * chunks * kLanes));
  out.pair_scale.resize(size_t(T * (chunks / 2) * kLanes));
  out.block_scale.resize(size_t(T * chunks * 8));
  out.block_bias.resize(size_t(T * chunks * 8));
  for (int64_t c = 0; c < chunks; ++c)
    for (int64_t t = 0; t < T; ++t) {
      const QuantizedX& x = xs[size_t(t)];
      std::copy_n(x.q.data() + c * kChunk, kChunk, out.q.data() + (c * T + t) * kChunk);
      std::copy_n(x.lane_scale.data() + c * kLanes, kLanes,
                  out.lane_scale.data() + (c * T + t) * kLanes);
      std::copy_n(x.lane_bias.data() + c * kLanes, kLanes,
                  out.lane_bias.data() + (c * T + t) * kLanes);
      std::copy_n(x.block_scale.data() + c * 8, 8, out.block_scale.data() + (c * T + t) * 8);
      std::copy_n(x.block_bias.data() + c * 8, 8, out.block_bias.data() + (c * T + t) * 8);
    }
  for (int64_t p = 0; p < chunks / 2; ++p)
    for (int64_t t = 0; t < T; ++t)
      std::copy_n(xs[size_t(t)].pair_scale.data() + p * kLanes, kLanes,
                  out.pair_scale.data() + (p * T + t) * kLanes);
  if (!cpu_has_avx512vnni()) return;  // only the VNNI kernels read it
  constexpr int64_t kPair = 2 * kChunk;
  out.pair_q_unsigned.resize(size_t(T * (chunks / 2) * kPair));
  for (int64_t p = 0; p < chunks / 2; ++p)
    for (int64_t t = 0; t < T; ++t) {
      uint8_t* dst = out.pair_q_unsigned.data() + (p * T + t) * kPair;
      for (int q = 0; q < 4; ++q)
        for (int j = 0; j < 4; ++j) {
          // Block b of the pair is block b % 8 of chunk 2p + b / 8: its evens are 8 bytes of
          // the chunk's even half, its odds the same of the odd half; A takes the first 4 of
          // each, B the last 4.
          const int64_t b = pair_lane_block(j, q);
          const int8_t* src = xs[size_t(t)].q.data() + (2 * p + b / 8) * kChunk + 8 * (b % 8);
          const int lane = 4 * q + j;
          for (int k = 0; k < 4; ++k) {
            dst[4 * lane + k] = uint8_t(uint8_t(src[k]) ^ 0x80);
            dst[64 + 4 * lane + k] = uint8_t(uint8_t(src[64 + k]) ^ 0x80);
            dst[128 + 4 * lane + k] = uint8_t(uint8_t(src[4 + k]) ^ 0x80);
            dst[192 + 4 * lane + k] = uint8_t(uint8_t(src[64 + 4 + k]) ^ 0x80);
          }
        }
    }
}

std::vector<TokenGroup> quantize_token_groups(const float* x, int64_t tokens, int64_t cols,
                                              int offset) {
  std::vector<TokenGroup> groups;
  for (int64_t t0 = 0; t0 < tokens;) {
    const int64_t size = token_group_size(tokens - t0);
    TokenGroup& g = groups.emplace_back(TokenGroup{t0, size, {}});
    if (size == 1) {
      quantize_x(x + t0 * cols, cols, offset, g.qx);
    } else {
      std::vector<QuantizedX> one(static_cast<size_t>(size));
      for (int64_t t = 0; t < size; ++t)
        quantize_x(x + (t0 + t) * cols, cols, offset, one[size_t(t)]);
      interleave_tokens(one, g.qx);
    }
    t0 += size;
  }
  return groups;
}

}  // namespace q4

namespace {

// Which kernel family the CPU runs: VNNI first, then AVX2.
bool int8act_cpu() { return cpu_has_avx512vnni() || cpu_has_avx2(); }

}  // namespace

bool fits_int8act_nvfp4(const LinearWeight& w) {
  return w.cols % kActBlock == 0 && w.cols % 16 == 0 && int8act_cpu();
}
bool fits_int8act_mxfp4(const LinearWeight& w) {
  return w.cols % kActBlock == 0 && w.cols % 32 == 0 && int8act_cpu();
}
bool fits_int8act_int4_row_pairs(const LinearWeight& w) {
  return w.cols % kActBlock == 0 && w.rows % 2 == 0 && w.group >= 4 && w.group % 4 == 0 &&
         w.cols % w.group == 0 && (64 % w.group == 0 || w.group % 64 == 0) && int8act_cpu();
}
bool fits_int8act_int4_packed32(const LinearWeight& w) {
  return w.cols % kActBlock == 0 && w.group >= 8 && w.group % 8 == 0 && w.cols % w.group == 0 &&
         (q4::kChunk % w.group == 0 || w.group % q4::kChunk == 0) && int8act_cpu();
}

void matvec_nvfp4_int8act(const LinearWeight& w, const float* x, int64_t tokens, float* y,
                          ThreadPool* pool) {
  if (cpu_has_avx512vnni()) matvec_nvfp4_avx512vnni(w, x, tokens, y, pool);
  else q4::matvec_nvfp4_avx2(w, x, tokens, y, pool);
}
void matvec_mxfp4_int8act(const LinearWeight& w, const float* x, int64_t tokens, float* y,
                          ThreadPool* pool) {
  if (cpu_has_avx512vnni()) matvec_mxfp4_avx512vnni(w, x, tokens, y, pool);
  else q4::matvec_mxfp4_avx2(w, x, tokens, y, pool);
}
void matvec_int4_row_pairs_int8act(const LinearWeight& w, const float* x, int64_t tokens,
                                   float* y, ThreadPool* pool) {
  if (cpu_has_avx512vnni()) matvec_int4_row_pairs_avx512vnni(w, x, tokens, y, pool);
  else q4::matvec_int4_row_pairs_avx2(w, x, tokens, y, pool);
}
void matvec_int4_packed32_int8act(const LinearWeight& w, const float* x, int64_t tokens,
                                  float* y, ThreadPool* pool) {
  if (cpu_has_avx512vnni()) matvec_int4_packed32_avx512vnni(w, x, tokens, y, pool);
  else q4::matvec_int4_packed32_avx2(w, x, tokens, y, pool);
}

}  // namespace qf::kernels

#else  // not x86-64 GCC/Clang: the portable Highway kernels only

namespace qf::kernels {
bool fits_int8act_nvfp4(const LinearWeight&) { return false; }
bool fits_int8act_mxfp4(const LinearWeight&) { return false; }
bool fits_int8act_int4_row_pairs(const LinearWeight&) { return false; }
bool fits_int8act_int4_packed32(const LinearWeight&) { return false; }
void matvec_nvfp4_int8act(const LinearWeight&, const float*, int64_t, float*, ThreadPool*) {}
void matvec_mxfp4_int8act(const LinearWeight&, const float*, int64_t, float*, ThreadPool*) {}
void matvec_int4_row_pairs_int8act(const LinearWeight&, const float*, int64_t, float*,
                                   ThreadPool*) {}
void matvec_int4_packed32_int8act(const LinearWeight&, const float*, int64_t, float*,
                                  ThreadPool*) {}
}  // namespace qf::kernels

#endif

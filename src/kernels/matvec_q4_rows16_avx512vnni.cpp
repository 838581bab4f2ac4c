// The int8-activation product over NVFP4, MXFP4 and INT4 repacked 16 rows at a time
// (kernels/q4_rows16.h), AVX-512 VNNI + VBMI. Per scale block of 16 rows (16 or 32 elements, an
// INT4 group, and their scales): one scale conversion (or load) for the 16 rows, and per 16
// elements two loads, four vpermb (E2M1 doubled + 12, or INT4's q + 8: the unsigned side of
// vpdpbusd), and per token four vpdpbusd against the activation's 4-byte groups broadcast to
// every lane, the block's bias (-12 or -8 x the sum of its 16 activation bytes), one conversion
// and one multiply-add. Lane k accumulates row k over the whole row in block order, so a (row,
// token)'s arithmetic is the same whatever the token group: one token's result never depends on
// the others.
#include "kernels/q4_rows16.h"
#include "kernels/q4_int8_activation.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))

// GCC 12's AVX-512 headers start some intrinsics from _mm512_undefined_*(), which -Wuninitialized
// flags once inlined (GCC bug 105593); nothing here reads an undefined value.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <span>
#include <vector>

#define QF_ROWS16_TARGET \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi,f16c")))

namespace qf::kernels {
namespace {

using namespace q4;  // the activation layout, its quantization in token groups

// One token's 16-element block as the kernel reads it: its int8 values as four 4-byte groups,
// elements 0, 2, 4, 6 | 1, 3, 5, 7 | 8, 10, 12, 14 | 9, 11, 13, 15 (the order the codes' low
// and high nibbles come out of the two code registers it meets), the bias (-offset x their sum:
// 12 for E2M1, 8 for INT4), the scale.
struct BlockAct {
  int32_t q[4];
  int32_t bias;
  float scale;
};

// Token t of a group of T (qx: its own quantization, as quantize_x leaves it) into `out`,
// [blocks][T]. Block b is lanes 2j, 2j + 1 of chunk b / 8 (QuantizedX: even elements in bytes
// [0, 64) of a chunk, odd ones in [64, 128), lane L covering elements 8L .. 8L + 7).
void block_acts(const QuantizedX& qx, int64_t t, int64_t T, int64_t blocks,
                std::vector<BlockAct>& out) {
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t at = b / 8, j = b % 8;
    const int8_t* q = qx.q.data() + at * kChunk;
    BlockAct& a = out[size_t(b * T + t)];
    std::memcpy(&a.q[0], q + 8 * j, 4);
    std::memcpy(&a.q[1], q + 64 + 8 * j, 4);
    std::memcpy(&a.q[2], q + 8 * j + 4, 4);
    std::memcpy(&a.q[3], q + 64 + 8 * j + 4, 4);
    a.bias = qx.lane_bias[size_t(at * kLanes + 2 * j)] +
             qx.lane_bias[size_t(at * kLanes + 2 * j + 1)];
    a.scale = qx.lane_scale[size_t(at * kLanes + 2 * j)];
  }
}

enum class Kind { nvfp4, mxfp4, int4 };

// The 16 rows' scales of a block (at s) as floats. E4M3 -> F16 is a shift (as in
// matvec_q4_avx512vnni.cpp's Nvfp4Scales): with the code in the high byte, an arithmetic shift
// right by one and bit 14 cleared give 2^-8 x the scale; E8M0 is 2^(e - 127), exactly (2^-127
// is subnormal); INT4's are floats.
template <Kind K>
QF_ROWS16_TARGET inline __m512 block_scales(const uint8_t* s) {
  if constexpr (K == Kind::int4) {
    return _mm512_loadu_ps(s);
  } else {
    const __m128i codes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s));
    if constexpr (K == Kind::nvfp4) {
      const __m256i h = _mm256_slli_epi16(_mm256_cvtepu8_epi16(codes), 8);
      return _mm512_cvtph_ps(
          _mm256_and_si256(_mm256_srai_epi16(h, 1), _mm256_set1_epi16(-0x4001)));
    } else {
      const __m512i e = _mm512_sub_epi32(_mm512_cvtepu8_epi32(codes), _mm512_set1_epi32(127));
      return _mm512_scalef_ps(_mm512_set1_ps(1.f), _mm512_cvtepi32_ps(e));
    }
  }
}

// The E2M1 (doubled + 12) or INT4 (q + 8) values of a code byte's nibble: vpermb reads the low 6
// bits of an index and the table repeats every 16 bytes, so the bits above a nibble do not
// matter. E2M1 doubled + 12: {0, .5, 1, 1.5, 2, 3, 4, 6} * 2 + 12, then the negatives.
template <Kind K>
QF_ROWS16_TARGET inline __m512i nibble_table() {
  return _mm512_broadcast_i32x4(
      K == Kind::int4 ? _mm_setr_epi8(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15)
                      : _mm_setr_epi8(12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0));
}

// acc[t] += one 16-element sub-block (its 128 code bytes at c, the 16 rows' scales ws) against
// token t < T's activations a[t].
template <int T>
QF_ROWS16_TARGET inline void sub_block_dot(const uint8_t* c, __m512 ws, __m512i lut,
                                           const BlockAct* a, __m512* acc) {
  // Registers 0 and 1 (elements 0-7 and 8-15 of the sub-block): w[0], w[2] their low nibbles
  // (elements 0, 2, 4, 6 and 8, .., 14 of each row), w[1], w[3] the high ones.
  const __m512i v0 = _mm512_loadu_si512(c), v1 = _mm512_loadu_si512(c + 64);
  const __m512i w[4] = {_mm512_permutexvar_epi8(v0, lut),
                        _mm512_permutexvar_epi8(_mm512_srli_epi16(v0, 4), lut),
                        _mm512_permutexvar_epi8(v1, lut),
                        _mm512_permutexvar_epi8(_mm512_srli_epi16(v1, 4), lut)};
#pragma GCC unroll 8
  for (int t = 0; t < T; ++t) {
    __m512i d = _mm512_set1_epi32(a[t].bias);
    d = _mm512_dpbusd_epi32(d, w[0], _mm512_set1_epi32(a[t].q[0]));
    d = _mm512_dpbusd_epi32(d, w[1], _mm512_set1_epi32(a[t].q[1]));
    d = _mm512_dpbusd_epi32(d, w[2], _mm512_set1_epi32(a[t].q[2]));
    d = _mm512_dpbusd_epi32(d, w[3], _mm512_set1_epi32(a[t].q[3]));
    acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d),
                             _mm512_mul_ps(ws, _mm512_set1_ps(a[t].scale)), acc[t]);
  }
}

// Bytes of one scale block of `subs` sub-blocks: the codes, then the 16 rows' scales.
constexpr int64_t scale_block_bytes(Kind k, int64_t subs) {
  return 128 * subs + 16 * (k == Kind::int4 ? 4 : 1);
}

// L2 prefetches of sub-block h's lines of the scale block at `at` (`bytes` long; the last
// sub-block's take the scales too): a block's prefetches spread over its sub-blocks (INT4 groups
// of 128, 17 lines at a block's start: 0.89 of a STREAM read; spread: 0.91-0.92).
QF_ROWS16_TARGET inline void prefetch_sub_block(const uint8_t* at, int64_t h, int64_t subs,
                                                int64_t bytes) {
  const char* p = reinterpret_cast<const char*>(at);
  for (int64_t line = 128 * h; line < (h + 1 == subs ? bytes : 128 * (h + 1)); line += 64)
    _mm_prefetch(p + line, _MM_HINT_T1);
}

// y[t * y_stride + k] = row k of the group at `g` (16 rows, `blocks` scale blocks of `subs`
// 16-element sub-blocks: NVFP4 1, MXFP4 2, INT4 group / 16) against token t < T (a: [activation
// blocks][T], 16 elements each), times `factor` (what turns the units of the codes as the kernel
// reads them, doubled E2M1 and NVFP4's F16-shifted scales, into the product's). kPrefetch: L2
// prefetches kOneStreamPrefetchBytes ahead (8 KB measured best on Zen 4 and on Emerald Rapids).
template <Kind K, int T, bool kPrefetch>
QF_ROWS16_TARGET void group_dot(const uint8_t* g, int64_t blocks, int64_t subs,
                                const BlockAct* a, float factor, float* y, int64_t y_stride) {
  if constexpr (K != Kind::int4) subs = K == Kind::nvfp4 ? 1 : 2;
  const int64_t bytes = scale_block_bytes(K, subs);
  const __m512i lut = nibble_table<K>();
  __m512 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t i = 0; i < blocks; ++i, g += bytes) {
    const __m512 ws = block_scales<K>(g + 128 * subs);
    for (int64_t h = 0; h < subs; ++h, a += T) {
      if constexpr (kPrefetch) prefetch_sub_block(g + kOneStreamPrefetchBytes, h, subs, bytes);
      sub_block_dot<T>(g + 128 * h, ws, lut, a, acc);
    }
  }
  const __m512 f = _mm512_set1_ps(factor);
  for (int t = 0; t < T; ++t) _mm512_storeu_ps(y + t * y_stride, _mm512_mul_ps(acc[t], f));
}

// One token against kGroups consecutive groups at once (rows 16 kGroups from `g`, their outputs
// y[0, 16 kGroups), times `factor`): block i of each group in turn, so the task reads kGroups
// nearby streams, each prefetched group_prefetch_bytes ahead (past a group's end, the same place
// in the group kGroups further), as the BF16 kernel reads its 4 rows. Each row's arithmetic is
// group_dot's.
// Emerald Rapids, 2 threads, a read of 4 interleaved 18 KB streams with about this kernel's
// compute per byte: 1.11x one stream prefetched 8 KB ahead (1.05x without the compute).
constexpr int kGroups = 4;
// How far ahead each group's stream is prefetched (row_prefetch_offset's distance). NVFP4 and
// MXFP4: 1 KB. Emerald Rapids, 2 threads, alternating builds, same-run STREAM ratios: 4096 x
// 14336 NVFP4 0.905 / 0.899 / 0.921 with 4 KB -> 0.923 / 0.926 / 0.933 (2 KB 0.931 / 0.921, 512
// bytes 0.912 / 0.930), MXFP4 0.94-0.97 -> 0.997; the Llama-1B layer (NVFP4) 0.933 / 0.937 / 0.982
// -> 0.965 / 0.970 / 0.978. INT4 (1088-byte blocks) stays at 4 KB: at 1 KB the same runs gave
// 2 threads 0.94-0.95 either way, 1 thread 0.94-0.96 against 0.96-0.99.
template <Kind K>
constexpr int64_t group_prefetch_bytes() {
  return K == Kind::int4 ? kRowPrefetchBytes : 1024;
}
template <Kind K, bool kPrefetch>
QF_ROWS16_TARGET void groups_dot(const uint8_t* g, int64_t group_bytes, int64_t blocks,
                                 int64_t subs, const BlockAct* a, float factor, float* y) {
  if constexpr (K != Kind::int4) subs = K == Kind::nvfp4 ? 1 : 2;
  const int64_t bytes = scale_block_bytes(K, subs);
  const __m512i lut = nibble_table<K>();
  __m512 acc[kGroups];
  for (int j = 0; j < kGroups; ++j) acc[j] = _mm512_setzero_ps();
  for (int64_t i = 0; i < blocks; ++i, a += subs) {
    const int64_t at = i * bytes;
    const int64_t ahead =
        kPrefetch ? row_prefetch_offset(at, group_bytes, group_prefetch_bytes<K>()) : 0;
#pragma GCC unroll 4
    for (int j = 0; j < kGroups; ++j) {
      const uint8_t* b = g + j * group_bytes + at;
      const __m512 ws = block_scales<K>(b + 128 * subs);
      for (int64_t h = 0; h < subs; ++h) {
        if constexpr (kPrefetch) prefetch_sub_block(b + ahead, h, subs, bytes);
        sub_block_dot<1>(b + 128 * h, ws, lut, a + h, &acc[j]);
      }
    }
  }
  const __m512 f = _mm512_set1_ps(factor);
  for (int j = 0; j < kGroups; ++j) _mm512_storeu_ps(y + 16 * j, _mm512_mul_ps(acc[j], f));
}

// One product of a call: its weight, its output [tokens, w->rows], and what turns its sums into
// the product's units (doubled E2M1: x 0.5; NVFP4's F16-shifted scales: x 2^8 and its tensor
// scale).
struct Product {
  const LinearWeight* w;
  float* y;
  float factor;
};

float product_factor(const LinearWeight& w) {
  switch (w.format) {
    case WeightFormat::nvfp4_rows16: return w.global_scale * 128.f;
    case WeightFormat::mxfp4_rows16: return 0.5f;
    default: return 1.f;
  }
}

// Products of one kind over the same input (same cols and block): x quantized once, then every
// product's row tasks in one pool loop, so q/k/v or gate/up cost one hand-off and one tail.
// `offset`: what the codes as read add to the signed value (E2M1 doubled 12, INT4 8). A row's
// arithmetic is the same as in a call of its product alone.
template <Kind K>
void run(std::span<const Product> products, const float* x, int64_t tokens, ThreadPool* pool,
         int offset) {
  const LinearWeight& w0 = *products[0].w;
  const int64_t block = q4_rows16_block(w0), blocks = w0.cols / block, subs = block / 16;
  // Token groups as quantize_token_groups makes them, each token quantized on its own and laid
  // out as the kernel reads it (no interleaved copy: this kernel reads nothing else of it).
  struct Group {
    int64_t t0, size;
    std::vector<BlockAct> acts;
  };
  std::vector<Group> groups;
  QuantizedX qx;
  for (int64_t t0 = 0; t0 < tokens;) {
    Group& g = groups.emplace_back(Group{t0, token_group_size(tokens - t0), {}});
    g.acts.resize(size_t(w0.cols / 16 * g.size));
    for (int64_t t = 0; t < g.size; ++t) {
      quantize_x(x + (t0 + t) * w0.cols, w0.cols, offset, qx);
      block_acts(qx, t, g.size, w0.cols / 16, g.acts);
    }
    t0 += g.size;
  }
  const int64_t group_bytes = q4_rows16_group_bytes(w0);
  struct Task {
    const Product* p;
    int64_t r0, r1;
  };
  std::vector<Task> tasks;
  for (const Product& p : products) {
    const int64_t per_task = (q4_rows_per_task(*p.w) + kRows16 - 1) / kRows16 * kRows16;
    for (int64_t r0 = 0; r0 < p.w->rows; r0 += per_task)
      tasks.push_back({&p, r0, std::min(p.w->rows, r0 + per_task)});
  }
  // Software prefetch: token groups (compute-bound) gain from it everywhere (Zen 4, 8 tokens:
  // 1.24x); one token where the hardware prefetchers do not follow the one stream alone (Zen 4
  // without them: 1.05-1.10x on a Llama-1B layer and on 4096 x 14336, 1 and 2 threads).
  const bool prefetch_one = one_stream_wants_prefetch();
  auto run_task = [&](int64_t k) {
    const Task& task = tasks[size_t(k)];
    const int64_t rows = task.p->w->rows;
    const auto* data = static_cast<const uint8_t*>(task.p->w->data);
    const float f = task.p->factor;
    for (const Group& grp : groups) {
      const BlockAct* a = grp.acts.data();
      float* yt = task.p->y + grp.t0 * rows;
      int64_t r = task.r0;
      if (grp.size == 1)
        for (; r + kGroups * kRows16 <= task.r1; r += kGroups * kRows16) {
          const uint8_t* g = data + uint64_t(r / kRows16) * uint64_t(group_bytes);
          if (prefetch_one) groups_dot<K, true>(g, group_bytes, blocks, subs, a, f, yt + r);
          else groups_dot<K, false>(g, group_bytes, blocks, subs, a, f, yt + r);
        }
      for (; r < task.r1; r += kRows16) {
        const uint8_t* g = data + uint64_t(r / kRows16) * uint64_t(group_bytes);
        switch (grp.size) {
          case 8: group_dot<K, 8, true>(g, blocks, subs, a, f, yt + r, rows); break;
          case 4: group_dot<K, 4, true>(g, blocks, subs, a, f, yt + r, rows); break;
          case 2: group_dot<K, 2, true>(g, blocks, subs, a, f, yt + r, rows); break;
          default:
            if (prefetch_one) group_dot<K, 1, true>(g, blocks, subs, a, f, yt + r, rows);
            else group_dot<K, 1, false>(g, blocks, subs, a, f, yt + r, rows);
        }
      }
    }
  };
  for_row_tasks(pool, int64_t(tasks.size()), 1, [&](int64_t k, int64_t) { run_task(k); });
}

void run_products(std::span<const Product> products, const float* x, int64_t tokens,
                  ThreadPool* pool) {
  switch (products[0].w->format) {
    case WeightFormat::nvfp4_rows16: return run<Kind::nvfp4>(products, x, tokens, pool, 12);
    case WeightFormat::mxfp4_rows16: return run<Kind::mxfp4>(products, x, tokens, pool, 12);
    default: return run<Kind::int4>(products, x, tokens, pool, 8);
  }
}

}  // namespace

bool cpu_has_avx512vbmi() {
  static const bool ok = __builtin_cpu_supports("avx512vbmi");
  return ok;
}

bool fits_int8act_q4_rows16(const LinearWeight& w) {
  const int64_t block = q4_rows16_block(w);
  return is_q4_rows16(w.format) && block > 0 && block % 16 == 0 && w.cols % block == 0 &&
         w.rows % kRows16 == 0 && cpu_has_avx512vnni() && cpu_has_avx512vbmi();
}

void matvec_q4_rows16_int8act(const LinearWeight& w, const float* x, int64_t tokens, float* y,
                               ThreadPool* pool) {
  const Product p{&w, y, product_factor(w)};
  run_products(std::span(&p, 1), x, tokens, pool);
}

bool q4_rows16_can_share_input(std::span<const LinearWeight* const> ws) {
  for (const LinearWeight* w : ws)
    if (!fits_int8act_q4_rows16(*w) || w->format != ws[0]->format || w->cols != ws[0]->cols ||
        q4_rows16_block(*w) != q4_rows16_block(*ws[0]))
      return false;
  return !ws.empty();
}

void matvec_q4_rows16_int8act_shared(std::span<const LinearWeight* const> ws, const float* x,
                                     int64_t tokens, std::span<float* const> ys,
                                     ThreadPool* pool) {
  std::vector<Product> products;
  for (size_t i = 0; i < ws.size(); ++i) products.push_back({ws[i], ys[i], product_factor(*ws[i])});
  run_products(products, x, tokens, pool);
}

}  // namespace qf::kernels

#else  // not x86-64 GCC/Clang: no repacked weights (q4_rows16_wanted is false)

namespace qf::kernels {
bool cpu_has_avx512vbmi() { return false; }
bool fits_int8act_q4_rows16(const LinearWeight&) { return false; }
void matvec_q4_rows16_int8act(const LinearWeight&, const float*, int64_t, float*, ThreadPool*) {}
bool q4_rows16_can_share_input(std::span<const LinearWeight* const>) { return false; }
void matvec_q4_rows16_int8act_shared(std::span<const LinearWeight* const>, const float*, int64_t,
                                     std::span<float* const>, ThreadPool*) {}
}  // namespace qf::kernels

#endif

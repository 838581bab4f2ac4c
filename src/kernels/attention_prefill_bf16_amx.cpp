// Prefill attention over a BF16 KV cache on AMX-BF16 tiles, flash-attention style (one pass
// over the keys with an online softmax; the scores never leave the task's scratch).
//
// Why: attend() computes a prefill's scores and weighted sums with float32 FMAs on BF16 values
// widened one vector at a time, ~13% of a 512-token Llama-1B prefill whose products run on AMX
// at ~10x the multiply-adds per cycle. Here both products run on tiles:
//   scores  S = Q K^T   A = the block's queries (rows: tokens x heads, token-major, BF16),
//                       B = 16 keys x 32 channels in AMX's pair-interleaved order;
//   output  O += P V    A = the probabilities (BF16), B = 32 positions x 16 value channels,
//                       again pair-interleaved.
// The cache stores keys transposed per tile of 16 positions ([channel][16 positions]) and
// values as rows ([position][channel]); either way a B tile's row (one pair) is two 16-element
// rows of the cache interleaved element by element: one permute per 64 bytes, done once per call
// and KV head for every position the call sees (done per block of queries, it was repeated for
// every block: 16x the work at 512 tokens, a third of the attention's time). Per key block
// (kKeyBlock positions) the softmax runs per row in float32 SIMD: mask (causal / window),
// running max m, p = 2^(s * scale * log2(e) - m) with a short polynomial (its error, < 3e-6, is
// far below the BF16 rounding of p), p rounded to BF16 once and the row sum taken over the
// rounded values (so the normalisation matches what multiplies V), and O rescaled only in rows
// whose max grew.
//
// Tiles: 0-3 C (16 x 16 float), 4-5 A (16 rows x 32 BF16), 6-7 B (16 pairs x 16 columns), all
// 16 rows of 64 bytes: the same configuration as matmul_bf16_amx.cpp. Both products are blocked
// 2 row tiles x 2 column tiles, four tile loads per four tile products.
//
// Determinism: a block's result depends on the block alone (fixed key blocks from the block's
// first visible position, fixed order of every sum), so any split across threads gives the same
// bits.
#include "kernels/amx_tile_config.h"
#include "kernels/attention.h"
#include "kernels/kernels_internal.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && defined(__linux__)

// GCC 12's AVX-512 headers start some intrinsics from _mm512_undefined_*(), which -Wuninitialized
// flags once inlined (GCC bug 105593); nothing here reads an undefined value.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

namespace qf::kernels {
namespace {

// Positions per key block: the block's scores (64 rows x 64 x 4 bytes), probabilities and
// packed keys / values (64 x head_dim x 2 bytes each) stay in L1 and L2; each C tile of the
// output is loaded and stored once per two tile products.
constexpr int64_t kKeyBlock = 64;
// Query rows (tokens x heads) per block: four row tiles, so each packed key / value tile is used
// four times; more rows would mean fewer, longer tasks (causal blocks differ in length).
constexpr int64_t kBlockRows = 64;
constexpr float kLog2e = 1.4426950408889634f;

QF_AMX_TARGET void configure_tiles() {
  AmxTileConfig cfg;
  for (int i = 0; i < 8; ++i) {
    cfg.colsb[i] = 64;
    cfg.rows[i] = 16;
  }
  load_tile_config(cfg);
}

// 16 BF16 in the low half of a vector.
QF_AMX_TARGET inline __m512i load16(const uint16_t* x) {
  return _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x)));
}

// 32 BF16: a[0], b[0], a[1], b[1], ... a[15], b[15] (one B-tile row from two 16-element rows).
QF_AMX_TARGET inline __m512i interleave16(const uint16_t* a, const uint16_t* b) {
  static const uint16_t kIdx[32] = {0, 32, 1, 33, 2, 34, 3, 35, 4, 36, 5, 37, 6, 38, 7, 39,
                                    8, 40, 9, 41, 10, 42, 11, 43, 12, 44, 13, 45, 14, 46, 15, 47};
  const __m512i idx = _mm512_loadu_si512(kIdx);
  const __m512i va = load16(a), vb = load16(b);
  return _mm512_permutex2var_epi16(va, idx, vb);
}

// 2^x for x <= 0 (x = -inf gives a tiny positive value; callers mask those lanes): 2^round(x)
// (vscalefps) times a degree-5 Taylor polynomial of 2^f on |f| <= 1/2, relative error < 3e-6.
QF_AMX_TARGET inline __m512 exp2_nonpositive(__m512 x) {
  x = _mm512_max_ps(x, _mm512_set1_ps(-126.f));
  const __m512 n = _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 f = _mm512_sub_ps(x, n);
  __m512 p = _mm512_set1_ps(1.3333558e-3f);
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(9.6181291e-3f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(5.5504109e-2f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(2.4022651e-1f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(6.9314718e-1f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.f));
  return _mm512_scalef_ps(p, n);
}

struct Scratch {
  TileBuffer<uint16_t> q, p;
  TileBuffer<float> s, o, m, l;
};

// A task: KV head `kvh`'s query heads of tokens [t0, t0 + tokens).
struct Block {
  int64_t kvh = 0, t0 = 0, tokens = 0;
};

// Rows [rows, 16 * row_tiles) of q are zero; the rest are the block's queries in BF16 (RNE).
QF_AMX_TARGET void pack_queries(const PrefillAttention& a, const Block& b, int64_t rows,
                                int64_t padded, uint16_t* qp) {
  const int64_t hd = a.head_dim;
  const float* q = a.q + b.t0 * a.q_stride + b.kvh * a.heads * hd;
  for (int64_t r = 0; r < padded; ++r) {
    uint16_t* o = qp + r * hd;
    if (r >= rows) {
      std::memset(o, 0, size_t(hd) * 2);
      continue;
    }
    const float* x = q + (r / a.heads) * a.q_stride + (r % a.heads) * hd;
    for (int64_t c = 0; c < hd; c += 32) {
      const __m512bh v = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(x + c + 16), _mm512_loadu_ps(x + c));
      _mm512_storeu_si512(o + c, reinterpret_cast<__m512i>(v));
    }
  }
}

// One KV head's keys and values laid out as B tiles for positions [first, padded) (first a
// multiple of kKeyTile): key tile j (positions first + 16 j ...), channel chunk c at
// k + j * hd * 16 + c * 512 (16 pairs x 16 positions x 2); value pair i (positions first + 2 i and
// first + 2 i + 1), column tile c (16 channels) at v + (c * pairs + i) * 32, so 16 consecutive
// pairs from any i are one tile with rows 64 bytes apart.
struct PackedKv {
  const uint16_t* k = nullptr;
  const uint16_t* v = nullptr;
  int64_t first = 0, pairs = 0;
};

// Fills key tiles [t0, t1) and value pairs [8 t0, 8 t1) of a PackedKv of one KV head whose cache
// holds [0, end). Key tiles at or past the cache's last are zero (scores there are masked,
// whatever they are); values at or past `end` are zero (the cache past its length is not
// initialised, and 0 x NaN would spoil the sums). A block of queries meets the call's later
// positions too, with probability 0: the same sums, as the call's own (finite) values.
QF_AMX_TARGET void pack_kv(const PrefillAttention& a, const uint16_t* k, const uint16_t* v,
                           int64_t first, int64_t end, int64_t pairs, int64_t t0, int64_t t1,
                           uint16_t* kp, uint16_t* vp) {
  const int64_t hd = a.head_dim, vd = a.v_head_dim, ct = vd / 16;
  const int64_t tiles_end = (end + kKeyTile - 1) / kKeyTile;
  for (int64_t j = t0; j < t1; ++j) {
    uint16_t* o = kp + j * hd * kKeyTile;
    const int64_t tile = first / kKeyTile + j;
    if (tile >= tiles_end) {
      std::memset(o, 0, size_t(hd * kKeyTile) * 2);
      continue;
    }
    const uint16_t* src = k + tile * a.k_stride;
    for (int64_t i = 0; i < hd / 2; ++i)
      _mm512_storeu_si512(o + i * 32,
                          interleave16(src + 2 * i * kKeyTile, src + (2 * i + 1) * kKeyTile));
  }
  for (int64_t i = t0 * kKeyTile / 2; i < t1 * kKeyTile / 2; ++i) {
    const int64_t p = first + 2 * i;
    uint16_t* o = vp + i * 32;
    if (p + 1 < end) {
      const uint16_t* r = v + p * a.v_stride;
      for (int64_t c = 0; c < ct; ++c)
        _mm512_storeu_si512(o + c * pairs * 32, interleave16(r + c * 16, r + a.v_stride + c * 16));
    } else if (p < end) {
      alignas(64) static const uint16_t kZero[16] = {};
      const uint16_t* r = v + p * a.v_stride;
      for (int64_t c = 0; c < ct; ++c)
        _mm512_storeu_si512(o + c * pairs * 32, interleave16(r + c * 16, kZero));
    } else {
      for (int64_t c = 0; c < ct; ++c)
        _mm512_storeu_si512(o + c * pairs * 32, _mm512_setzero_si512());
    }
  }
}

// Scores of the row tiles against the packed key block: s [padded rows, kKeyBlock] float.
QF_AMX_TARGET void score_tiles(const uint16_t* qp, int64_t hd, int64_t row_tiles,
                               const uint16_t* kp, float* s) {
  for (int64_t mt = 0; mt < row_tiles; mt += 2) {
    const bool two = mt + 1 < row_tiles;
    for (int64_t kt = 0; kt < kKeyBlock / kKeyTile; kt += 2) {
      _tile_zero(0);
      _tile_zero(1);
      _tile_zero(2);
      _tile_zero(3);
      for (int64_t c = 0; c < hd / 32; ++c) {
        _tile_loadd(4, qp + mt * 16 * hd + c * 32, int(hd * 2));
        _tile_loadd(6, kp + kt * hd * kKeyTile + c * 512, 64);
        _tile_loadd(7, kp + (kt + 1) * hd * kKeyTile + c * 512, 64);
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        if (two) {
          _tile_loadd(5, qp + (mt + 1) * 16 * hd + c * 32, int(hd * 2));
          _tile_dpbf16ps(2, 5, 6);
          _tile_dpbf16ps(3, 5, 7);
        }
      }
      float* o = s + mt * 16 * kKeyBlock + kt * kKeyTile;
      _tile_stored(0, o, kKeyBlock * 4);
      _tile_stored(1, o + kKeyTile, kKeyBlock * 4);
      if (two) {
        _tile_stored(2, o + 16 * kKeyBlock, kKeyBlock * 4);
        _tile_stored(3, o + 16 * kKeyBlock + kKeyTile, kKeyBlock * 4);
      }
    }
  }
}

// o [padded rows, vd] += p [padded rows, kKeyBlock] (BF16) times the values of the key block,
// whose first pair is at vp in a PackedKv of `pairs` pairs.
QF_AMX_TARGET void weigh_tiles(const uint16_t* pp, int64_t row_tiles, const uint16_t* vp,
                               int64_t pairs, int64_t vd, float* o) {
  const int64_t ct = vd / 16;
  for (int64_t mt = 0; mt < row_tiles; mt += 2) {
    const bool two = mt + 1 < row_tiles;
    for (int64_t c = 0; c < ct; c += 2) {
      float* oc = o + mt * 16 * vd + c * 16;
      _tile_loadd(0, oc, int(vd * 4));
      _tile_loadd(1, oc + 16, int(vd * 4));
      if (two) {
        _tile_loadd(2, oc + 16 * vd, int(vd * 4));
        _tile_loadd(3, oc + 16 * vd + 16, int(vd * 4));
      }
      for (int64_t j = 0; j < kKeyBlock / 32; ++j) {
        _tile_loadd(4, pp + mt * 16 * kKeyBlock + j * 32, kKeyBlock * 2);
        _tile_loadd(6, vp + (c * pairs + j * 16) * 32, 64);
        _tile_loadd(7, vp + ((c + 1) * pairs + j * 16) * 32, 64);
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        if (two) {
          _tile_loadd(5, pp + (mt + 1) * 16 * kKeyBlock + j * 32, kKeyBlock * 2);
          _tile_dpbf16ps(2, 5, 6);
          _tile_dpbf16ps(3, 5, 7);
        }
      }
      _tile_stored(0, oc, int(vd * 4));
      _tile_stored(1, oc + 16, int(vd * 4));
      if (two) {
        _tile_stored(2, oc + 16 * vd, int(vd * 4));
        _tile_stored(3, oc + 16 * vd + 16, int(vd * 4));
      }
    }
  }
}

// Online softmax of one row's scores over key block [k0, k0 + kKeyBlock), visible keys
// [begin, end) (some of them in this block): updates the row's max m (log2 domain) and sum l,
// writes the BF16 probabilities and rescales the row's output when m grew. l: the sum's 16 lanes.
QF_AMX_TARGET void softmax_row(const float* s, int64_t k0, int64_t begin, int64_t end, float mul,
                               float& m, float* l, uint16_t* p, float* o, int64_t vd) {
  constexpr int64_t kVecs = kKeyBlock / 16;
  const __m512 neg_inf = _mm512_set1_ps(-INFINITY);
  const __m512i lane = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
  __m512 x[kVecs];
  __mmask16 valid[kVecs];
  __m512 vmax = neg_inf;
  for (int64_t i = 0; i < kVecs; ++i) {
    const __m512i pos = _mm512_add_epi32(lane, _mm512_set1_epi32(int(k0 + i * 16)));
    valid[i] = _mm512_cmpge_epi32_mask(pos, _mm512_set1_epi32(int(begin))) &
               _mm512_cmplt_epi32_mask(pos, _mm512_set1_epi32(int(end)));
    // Masked lanes are -inf whatever the product gave (keys past the cache may be NaN).
    x[i] = _mm512_mask_mul_ps(neg_inf, valid[i], _mm512_loadu_ps(s + i * 16), _mm512_set1_ps(mul));
    vmax = _mm512_max_ps(vmax, x[i]);
  }
  const float m_new = std::max(m, _mm512_reduce_max_ps(vmax));
  // m starts at -inf: alpha 0 (the output is still zero); unchanged max: no rescale.
  const float alpha = m == m_new ? 1.f : std::exp2(m - m_new);
  const __m512 vm = _mm512_set1_ps(m_new);
  __m512 sum = _mm512_setzero_ps();
  for (int64_t i = 0; i < kVecs; ++i) {
    const __m512 e = _mm512_maskz_mov_ps(valid[i], exp2_nonpositive(_mm512_sub_ps(x[i], vm)));
    const __m256bh h = _mm512_cvtneps_pbh(e);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p + i * 16), reinterpret_cast<__m256i>(h));
    sum = _mm512_add_ps(sum, _mm512_castsi512_ps(_mm512_slli_epi32(
                                 _mm512_cvtepu16_epi32(reinterpret_cast<__m256i>(h)), 16)));
  }
  // The sum stays 16 lanes wide until the end: one horizontal add per row, not per key block.
  _mm512_storeu_ps(l, _mm512_fmadd_ps(_mm512_loadu_ps(l), _mm512_set1_ps(alpha), sum));
  m = m_new;
  if (alpha != 1.f) {
    const __m512 va = _mm512_set1_ps(alpha);
    for (int64_t c = 0; c < vd; c += 16)
      _mm512_storeu_ps(o + c, _mm512_mul_ps(_mm512_loadu_ps(o + c), va));
  }
}

// The first key visible to a query whose visible keys end at `end` (the window's start, else 0).
int64_t visible_begin(const PrefillAttention& a, int64_t end) {
  return a.window > 0 ? std::max<int64_t>(0, end - a.window) : 0;
}

// The first key a query at `position` sees, down to its key tile.
int64_t first_key_tile_start(const PrefillAttention& a, int64_t position) {
  return visible_begin(a, position + 1) / kKeyTile * kKeyTile;
}

QF_AMX_TARGET void attend_block(const PrefillAttention& a, const Block& b, const PackedKv& kv) {
  const int64_t hd = a.head_dim, vd = a.v_head_dim, H = a.heads;
  const int64_t rows = b.tokens * H, row_tiles = (rows + 15) / 16, padded = row_tiles * 16;
  const int64_t position = a.position + b.t0;
  const int64_t last_end = position + b.tokens;  // the last token's visible end
  const int64_t first = first_key_tile_start(a, position);

  thread_local Scratch sc;
  uint16_t* qp = sc.q.get(size_t(padded * hd));
  uint16_t* pp = sc.p.get(size_t(padded * kKeyBlock));
  float* s = sc.s.get(size_t(padded * kKeyBlock));
  float* o = sc.o.get(size_t(padded * vd));
  float* m = sc.m.get(size_t(padded));
  float* l = sc.l.get(size_t(padded * 16));
  pack_queries(a, b, rows, padded, qp);
  std::fill_n(o, padded * vd, 0.f);
  std::fill_n(m, padded, -INFINITY);
  std::fill_n(l, padded * 16, 0.f);
  std::memset(pp, 0, size_t(padded * kKeyBlock) * 2);  // padding rows stay zero

  configure_tiles();
  const float mul = a.scale * kLog2e;
  for (int64_t k0 = first; k0 < last_end; k0 += kKeyBlock) {
    score_tiles(qp, hd, row_tiles, kv.k + (k0 - kv.first) * hd, s);
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t end = position + r / H + 1;
      const int64_t begin = visible_begin(a, end);
      uint16_t* pr = pp + r * kKeyBlock;
      if (k0 >= end || k0 + kKeyBlock <= begin) {
        std::memset(pr, 0, kKeyBlock * 2);  // nothing visible in this block
        continue;
      }
      softmax_row(s + r * kKeyBlock, k0, begin, end, mul, m[r], l + r * 16, pr, o + r * vd, vd);
    }
    weigh_tiles(pp, row_tiles, kv.v + (k0 - kv.first) / 2 * 32, kv.pairs, vd, o);
  }
  _tile_release();

  const float* sinks = a.sinks ? a.sinks + b.kvh * H : nullptr;
  float* out = a.out + b.t0 * a.out_stride + b.kvh * H * vd;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t h = r % H;
    const float sum = _mm512_reduce_add_ps(_mm512_loadu_ps(l + r * 16));
    float inv = 1.f / sum;
    if (sinks) {
      // The sink joins the softmax's max and sum, not the weighted sum (as in attend()).
      const float sink = sinks[h] * kLog2e, mf = std::max(m[r], sink);
      const float w = std::exp2(m[r] - mf);
      inv = w / (sum * w + std::exp2(sink - mf));
    }
    const __m512 vi = _mm512_set1_ps(inv);
    float* y = out + (r / H) * a.out_stride + h * vd;
    for (int64_t c = 0; c < vd; c += 16)
      _mm512_storeu_ps(y + c, _mm512_mul_ps(_mm512_loadu_ps(o + r * vd + c), vi));
  }
}

// Query tokens per block: about kBlockRows tile rows of `heads` query heads each.
int64_t block_tokens(int64_t heads) {
  return std::max<int64_t>(1, kBlockRows / std::max<int64_t>(1, heads));
}

}  // namespace

bool prefill_attention_amx_fits(int64_t head_dim, int64_t v_head_dim) {
  // QFORGE_NO_AMX_ATTENTION=1: attend() per token with the AMX products kept (before / after
  // figures of whole-model prefill in one build); QFORGE_NO_AMX=1 turns off both.
  static const bool off = [] {
    const char* e = std::getenv("QFORGE_NO_AMX_ATTENTION");
    return e != nullptr && *e != '\0' && std::strcmp(e, "0") != 0;
  }();
  return !off && head_dim > 0 && v_head_dim > 0 && head_dim % 32 == 0 && v_head_dim % 32 == 0 &&
         cpu_has_amx_bf16();
}

void attend_prefill_amx(const PrefillAttention& a, ThreadPool* pool) {
  if (a.tokens <= 0) return;
  const int64_t hd = a.head_dim, vd = a.v_head_dim;
  // Every position some block sees, key tiles whole, and a key block's worth past the end so
  // the last block's reads stay inside (those tiles are zero).
  const int64_t first = first_key_tile_start(a, a.position);
  const int64_t end = a.position + a.tokens;
  const int64_t tiles = (end - first + kKeyTile - 1) / kKeyTile + kKeyBlock / kKeyTile;
  const int64_t pairs = tiles * kKeyTile / 2;
  const int64_t k_size = tiles * kKeyTile * hd, v_size = pairs * 32 * (vd / 16);
  thread_local TileBuffer<uint16_t> packed;
  uint16_t* buffer = packed.get(size_t(a.kv_heads * (k_size + v_size)));
  // Laid out in parallel: parts of 16 key tiles (256 positions) per KV head.
  constexpr int64_t kPackTiles = 16;
  const int64_t parts = (tiles + kPackTiles - 1) / kPackTiles;
  for_row_tasks(pool, a.kv_heads * parts, 1, [&](int64_t i, int64_t) {
    const int64_t kvh = i / parts, t0 = i % parts * kPackTiles;
    uint16_t* kp = buffer + kvh * (k_size + v_size);
    pack_kv(a, a.k[size_t(kvh)], a.v[size_t(kvh)], first, end, pairs, t0,
            std::min(tiles, t0 + kPackTiles), kp, kp + k_size);
  });
  // Fixed blocks of query tokens per KV head, so the result does not depend on the thread
  // count; the last blocks see the most keys and are handed out first (fewer idle threads at
  // the end).
  const int64_t block = block_tokens(a.heads), blocks = (a.tokens + block - 1) / block;
  for_row_tasks(pool, blocks * a.kv_heads, 1, [&](int64_t task, int64_t) {
    const int64_t kvh = task % a.kv_heads, t0 = (blocks - 1 - task / a.kv_heads) * block;
    const uint16_t* kp = buffer + kvh * (k_size + v_size);
    attend_block(a, {kvh, t0, std::min(block, a.tokens - t0)}, {kp, kp + k_size, first, pairs});
  });
}

}  // namespace qf::kernels

#else  // not x86-64 Linux GCC/Clang: no AMX

namespace qf::kernels {
bool prefill_attention_amx_fits(int64_t, int64_t) { return false; }
void attend_prefill_amx(const PrefillAttention&, ThreadPool*) {}
}  // namespace qf::kernels

#endif

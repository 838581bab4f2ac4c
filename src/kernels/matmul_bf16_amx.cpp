// Matrix-matrix product (prefill) on AMX-BF16 tiles for the same weights and the same numerics
// as matmul_bf16_avx512bf16.cpp (activations rounded to BF16, weights decoded exactly to BF16
// with the per-tensor / per-row factor kept out, float32 accumulation), at up to ~1000 BF16
// multiply-adds per cycle and core instead of 64.
//
// Operands. The weight is the tiles' A operand: 16 weight rows of 32 elements in the stored
// row order, decoded (BF16 copied) a 32-row x kKBlock block at a time into 1 KB tiles that stay
// in L1. The activations are the B operand, laid out once per product in AMX's pair-interleaved
// ("VNNI") order: per block of 16 tokens and pair p of elements (2p, 2p+1), the 16 tokens' pairs
// side by side, so a B tile (16 pairs x 16 tokens) is 1 KB of contiguous memory; K-block by
// K-block, so one K-block's tiles for all tokens are one stretch. A C tile is then 16 weight
// rows x 16 tokens, the transpose of the output, transposed in registers once, after all of K.
//
// Register blocking: 2 A tiles (32 rows) x 2 B tiles (32 tokens) -> 4 C tiles, all 8 tiles;
// per 32 elements of K, four tile loads feed four 16-cycle tile products. A task (kTaskRows
// rows) runs K-block by K-block: each of its 32-row A blocks is decoded (the next one
// prefetched meanwhile) and multiplied by every token pair's B tiles (from L2), the C tiles
// accumulating in the task's buffer across K-blocks. Measured on a 2-core Sapphire Rapids-class
// VM, one Llama-3.2-1B layer's products for 512 tokens: K-blocks of 128 / 256 / 512 columns ->
// 1.86 / 2.11 / 1.90 TFLOP/s (NVFP4), 1.66 / 1.82-1.93 / 1.60 (BF16).
//
// Accumulation: each output is one float32 chain over K in pair order, the same for every
// split, so outputs do not depend on the thread count (tasks are fixed row ranges).
#include "kernels/amx_tile_config.h"
#include "kernels/kernels_internal.h"
#include "kernels/q4_rows16.h"
#include "kernels/transpose16.h"
#include "kernels/weight_formats.h"

#include "core/thread_pool.h"
#include "kernels/ops.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && defined(__linux__)

// GCC 12's AVX-512 headers start some intrinsics from _mm512_undefined_*(), which -Wuninitialized
// flags once inlined (GCC bug 105593); nothing here reads an undefined value.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <new>
#include <numeric>
#include <vector>

namespace qf::kernels {
namespace {

constexpr int64_t kRows = 32;        // weight rows per A block (two A tiles)
// Rows per task: its A blocks take turns against one K-block of B tiles (the activations'
// K-block slice, 256 KB for 512 tokens, read from L3 once per task and then from L2), and its
// C tiles (128 rows x 512 tokens x 4 bytes) stay in L2 beside them. With one A block per task,
// every task streamed all of the activations (2-8 MB) through L2.
constexpr int64_t kTaskRows = 128;
constexpr int64_t kTokenBlock = 16;  // tokens per B tile
constexpr int64_t kChunk = 32;       // elements of K per tile product
constexpr int64_t kTokenChunk = 512; // tokens whose B tiles one K-block streams (256 KB)
// Elements of K per block: the 32 x kKBlock BF16 A block (16 KB) stays in L1 while every token
// pair passes over it (see the measurements above).
constexpr int64_t kKBlock = 256;
// B tiles are prefetched this many chunks (of 32 elements) ahead: without it the two B tile
// loads of a chunk waited on L2 (0.93 against 1.2 TFLOP/s before the buffers were aligned).
constexpr int64_t kPrefetchChunks = 2;

// Tiles 0-3 C (16 x 16 float), 4-5 A (16 rows x 32 BF16), 6-7 B (16 pairs x 16 tokens).
QF_AMX_TARGET void configure_tiles() {
  AmxTileConfig cfg;
  for (int i = 0; i < 8; ++i) {
    cfg.colsb[i] = 64;
    cfg.rows[i] = 16;
  }
  load_tile_config(cfg);
}

// The activations x [tokens, K] as B tiles, K-block by K-block: with kpb = pairs per K-block,
// the BF16 pair (x[t, 2p], x[t, 2p+1]) of token t = 16 tb + j is at
// out[(((p / kpb) * blocks + tb) * kpb + p % kpb) * 16 + j], blocks = ceil(tokens / 16), for
// p < nkb * kpb; tokens past `tokens` and elements past K are zero. Writes the token blocks
// [tb_begin, tb_end). So the B tiles one K-block
// reads, for every token, are one contiguous stretch (with one stretch per token block instead,
// a K of 8192 put them 256 KB apart: all in the same L2 sets, which held too few of them).
QF_AMX_TARGET void pack_activations(const float* x, int64_t tokens, int64_t K, int64_t kpb,
                                    int64_t nkb, int64_t tb_begin, int64_t tb_end, uint32_t* out) {
  const int64_t blocks = (tokens + kTokenBlock - 1) / kTokenBlock;
  for (int64_t tb = tb_begin; tb < tb_end; ++tb) {
    for (int64_t p0 = 0; p0 < nkb * kpb; p0 += 16) {
      const int64_t k0 = 2 * p0;
      const int64_t n = std::clamp<int64_t>(K - k0, 0, 32);
      const __mmask16 mlo = __mmask16((1u << std::min<int64_t>(n, 16)) - 1);
      const __mmask16 mhi = __mmask16((1u << std::max<int64_t>(0, n - 16)) - 1);
      __m512 r[16];
      for (int64_t j = 0; j < 16; ++j) {
        const int64_t t = tb * kTokenBlock + j;
        if (t >= tokens || n == 0) {
          r[j] = _mm512_setzero_ps();
          continue;
        }
        const float* xt = x + t * K + k0;
        const __m512 lo = _mm512_maskz_loadu_ps(mlo, xt);
        const __m512 hi = _mm512_maskz_loadu_ps(mhi, xt + 16);
        r[j] = _mm512_castsi512_ps(reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(hi, lo)));
      }
      transpose16(r);
      uint32_t* o = out + (((p0 / kpb) * blocks + tb) * kpb + p0 % kpb) * 16;
      for (int64_t i = 0; i < 16; ++i) _mm512_storeu_ps(o + i * 16, r[i]);
    }
  }
}

// One 32-element chunk of an FP4 row as BF16: its 16 code bytes (element 2j in the low nibble of
// byte j), elements 0-15 times s0 and 16-31 times s1 (E2M1 x the block scale is exact in BF16).
QF_AMX_TARGET inline __m512i fp4_chunk_bf16(__m128i codes, float s0, float s1) {
  const __m512 e2m1 = _mm512_setr_ps(0.f, 0.5f, 1.f, 1.5f, 2.f, 3.f, 4.f, 6.f, -0.f, -0.5f, -1.f,
                                     -1.5f, -2.f, -3.f, -4.f, -6.f);
  const __m256i b = _mm256_cvtepu8_epi16(codes);
  // 32 nibbles in element order, one per 16-bit lane.
  const __m256i nib = _mm256_or_si256(_mm256_and_si256(b, _mm256_set1_epi16(0x0F)),
                                      _mm256_slli_epi16(_mm256_srli_epi16(b, 4), 8));
  const __m512 lo = _mm512_mul_ps(
      _mm512_permutexvar_ps(_mm512_cvtepu8_epi32(_mm256_castsi256_si128(nib)), e2m1),
      _mm512_set1_ps(s0));
  const __m512 hi = _mm512_mul_ps(
      _mm512_permutexvar_ps(_mm512_cvtepu8_epi32(_mm256_extracti128_si256(nib, 1)), e2m1),
      _mm512_set1_ps(s1));
  return reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(hi, lo));
}

// decode_block for NVFP4 and MXFP4 repacked 16 rows at a time (kernels/q4_rows16.h), without
// gathering the stored layout first (q4_rows16_view's byte copies took longer than the decoding:
// 18% of a batched NVFP4 prefill's samples against 12%). Per group of 16 rows and chunk of 32
// columns (two NVFP4 blocks, one MXFP4 block) four registers hold each row's code bytes as 4-byte
// lanes: two rounds of unpacks put each row's 16 bytes in one 128-bit lane, which decodes as the
// stored layout's row does. row0 and nr are multiples of 16 (the repacked rows), c0 of kChunk.
QF_AMX_TARGET void decode_fp4_rows16(const LinearWeight& w, int64_t row0, int64_t nr, int64_t c0,
                                     int64_t nc, uint16_t* out) {
  constexpr int64_t kTile = kRows * kChunk;
  const bool nv = w.format == WeightFormat::nvfp4_rows16;
  const float* stab = nv ? e4m3_table() : e8m0_table();
  const int64_t block = q4_rows16_block(w), block_bytes = q4_rows16_block_bytes(w);
  const int64_t group_bytes = q4_rows16_group_bytes(w);
  const int64_t ncp = (nc + kChunk - 1) / kChunk * kChunk;
  if (nr < kRows)
    for (int64_t c = 0; c < ncp; c += kChunk)
      std::memset(out + c / kChunk * kTile + nr * kChunk, 0, size_t((kRows - nr) * kChunk) * 2);
  const auto* data = static_cast<const uint8_t*>(w.data);
  for (int64_t g = 0; g < nr / kRows16; ++g) {
    const uint8_t* group = data + (row0 / kRows16 + g) * group_bytes + c0 / block * block_bytes;
    for (int64_t c = 0; c < nc; c += kChunk) {
      const bool full = nc - c >= kChunk;
      const uint8_t* b = group + c / block * block_bytes;
      // q[j] lane k: row k's code bytes 4j .. 4j+3 of the chunk; the scales of its first and
      // second 16 elements at s0 and s1 (row k's at + k).
      __m512i q[4];
      const uint8_t *s0 = b + 8 * block, *s1 = s0;
      if (nv) {
        q[0] = _mm512_loadu_si512(b);
        q[1] = _mm512_loadu_si512(b + 64);
        q[2] = full ? _mm512_loadu_si512(b + block_bytes) : _mm512_setzero_si512();
        q[3] = full ? _mm512_loadu_si512(b + block_bytes + 64) : _mm512_setzero_si512();
        s1 = full ? s0 + block_bytes : nullptr;
      } else {
        for (int j = 0; j < 4; ++j) q[j] = _mm512_loadu_si512(b + 64 * j);
      }
      // 128-bit lane L of rows[m]: row 4L + m's 16 bytes.
      const __m512i u0 = _mm512_unpacklo_epi32(q[0], q[1]), v0 = _mm512_unpackhi_epi32(q[0], q[1]);
      const __m512i u1 = _mm512_unpacklo_epi32(q[2], q[3]), v1 = _mm512_unpackhi_epi32(q[2], q[3]);
      const __m512i rows[4] = {_mm512_unpacklo_epi64(u0, u1), _mm512_unpackhi_epi64(u0, u1),
                               _mm512_unpacklo_epi64(v0, v1), _mm512_unpackhi_epi64(v0, v1)};
      uint16_t* o = out + c / kChunk * kTile + g * kRows16 * kChunk;
#pragma GCC unroll 16
      for (int k = 0; k < 16; ++k) {
        const __m512i& r = rows[k % 4];
        const __m128i codes = k / 4 == 0   ? _mm512_castsi512_si128(r)
                              : k / 4 == 1 ? _mm512_extracti32x4_epi32(r, 1)
                              : k / 4 == 2 ? _mm512_extracti32x4_epi32(r, 2)
                                           : _mm512_extracti32x4_epi32(r, 3);
        _mm512_storeu_si512(o + k * kChunk, fp4_chunk_bf16(codes, stab[s0[k]],
                                                           s1 != nullptr ? stab[s1[k]] : 0.f));
      }
    }
  }
}

// Decodes W[row0 .. row0+nr, c0 .. c0+nc) to BF16 A tiles: element (r, c) at
// out[(c / kChunk) * kRows * kChunk + r * kChunk + c % kChunk], so that each tile is 1 KB of
// contiguous memory (rows at a 64-byte stride). BF16 is copied, NVFP4 and MXFP4 through a float table of E2M1 times the block scale
// (exact in BF16; NVFP4's global scale is applied to the outputs), everything else through the
// layout's float decoder, then rounded (exact for the bf16_exact layouts). Columns nc up to the
// next multiple of kChunk and rows nr .. kRows are zero.
QF_AMX_TARGET void decode_block(const LinearWeight& w, int64_t row0, int64_t nr, int64_t c0,
                                int64_t nc, uint16_t* out, std::vector<float>& tile) {
  if (w.format == WeightFormat::nvfp4_rows16 || w.format == WeightFormat::mxfp4_rows16)
    return decode_fp4_rows16(w, row0, nr, c0, nc, out);
  if (is_q4_rows16(w.format)) {
    // Gathered into the stored layout (the block's rows and columns), then decoded as stored.
    thread_local std::vector<uint8_t> scratch;
    int64_t offset = 0;
    return decode_block(q4_rows16_view(w, row0, nr, c0, nc, scratch, offset), 0, nr, offset, nc,
                        out, tile);
  }
  const int64_t K = w.cols;
  const int64_t ncp = (nc + kChunk - 1) / kChunk * kChunk;
  constexpr int64_t kTile = kRows * kChunk;  // elements per chunk of the block
  if (nr < kRows)
    for (int64_t c = 0; c < ncp; c += kChunk)
      std::memset(out + c / kChunk * kTile + nr * kChunk, 0, size_t((kRows - nr) * kChunk) * 2);
  if (w.format == WeightFormat::bf16) {
    const auto* src = static_cast<const uint16_t*>(w.data);
    for (int64_t r = 0; r < nr; ++r) {
      const uint16_t* s = src + (row0 + r) * K + c0;
      uint16_t* o = out + r * kChunk;
      for (int64_t c = 0; c < ncp; c += kChunk) {
        const int64_t n = std::clamp<int64_t>(nc - c, 0, kChunk);
        const __mmask32 m = n == kChunk ? ~__mmask32(0) : __mmask32((1u << n) - 1);
        _mm512_storeu_si512(o + c / kChunk * kTile, _mm512_maskz_loadu_epi16(m, s + c));
      }
    }
    return;
  }
  const bool nv = w.format == WeightFormat::nvfp4;
  if (nv || w.format == WeightFormat::mxfp4) {
    // c0 is a multiple of kChunk (see block_cols); nc a multiple of the block, so the last
    // chunk of an NVFP4 row may hold one block of 16.
    const float* stab = nv ? e4m3_table() : e8m0_table();
    const auto* bytes = static_cast<const uint8_t*>(w.data);
    for (int64_t r = 0; r < nr; ++r) {
      const int64_t row = row0 + r;
      const uint8_t* p = bytes + (row * K + c0) / 2;
      const uint8_t* sc = w.block_scales + (row * K + c0) / (nv ? 16 : 32);
      uint16_t* o = out + r * kChunk;
      for (int64_t c = 0; c < nc; c += kChunk) {
        const bool full = nc - c >= kChunk;
        const float s0 = stab[sc[nv ? c / 16 : c / 32]];
        const float s1 = !nv ? s0 : full ? stab[sc[c / 16 + 1]] : 0.f;
        _mm512_storeu_si512(o + c / kChunk * kTile,
                            fp4_chunk_bf16(_mm_maskz_loadu_epi8(full ? 0xFFFF : 0x00FF, p + c / 2),
                                           s0, s1));
      }
    }
    return;
  }
  tile.resize(size_t(kRows * ncp));
  decode_tile(w, row0, nr, c0, nc, tile.data(), ncp);
  for (int64_t r = 0; r < nr; ++r) {
    const float* t = tile.data() + r * ncp;
    uint16_t* o = out + r * kChunk;
    for (int64_t c = 0; c < ncp; c += kChunk) {
      const int64_t n = std::clamp<int64_t>(nc - c, 0, kChunk);
      const __m512 lo = _mm512_maskz_loadu_ps(__mmask16((1u << std::min<int64_t>(n, 16)) - 1), t + c);
      const __m512 hi = _mm512_maskz_loadu_ps(__mmask16((1u << std::max<int64_t>(0, n - 16)) - 1), t + c + 16);
      _mm512_storeu_si512(o + c / kChunk * kTile,
                          reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(hi, lo)));
    }
  }
}

// Prefetches into L2 the stored bytes of rows [row0 + nr * part / parts, row0 + nr * (part + 1)
// / parts) of W's columns [c0, c0 + nc): the next A block, a slice per token pair, so that
// decode_block finds it in cache (the 32 row streams of a block are too many for the hardware
// prefetchers: without this the BF16 copy waited on memory for ~12% of the product).
// The prefetches are asm: GCC 12 -O3 dropped __builtin_prefetch / _mm_prefetch here entirely.
void prefetch_rows(const LinearWeight& w, int64_t row0, int64_t nr, int64_t c0, int64_t nc,
                   int64_t part, int64_t parts) {
  const int64_t K = w.cols;
  const auto* data = static_cast<const char*>(w.data);
  auto range = [](const char* p, int64_t bytes) {
    for (int64_t i = 0; i < bytes; i += 64) asm volatile("prefetcht1 %0" : : "m"(p[i]));
  };
  const int64_t first = row0 + nr * part / parts, end = row0 + nr * (part + 1) / parts;
  if (is_q4_rows16(w.format)) {
    // The 16-row groups holding the rows: each one run of blocks over the columns.
    const int64_t block = q4_rows16_block(w), bytes = q4_rows16_block_bytes(w);
    for (int64_t g = first / kRows16; g * kRows16 < end; ++g)
      range(data + g * q4_rows16_group_bytes(w) + c0 / block * bytes, nc / block * bytes);
    return;
  }
  for (int64_t r = first; r < end; ++r) {
    const int64_t at = r * K + c0;
    switch (w.format) {
      case WeightFormat::bf16: range(data + at * 2, nc * 2); break;
      case WeightFormat::fp8:
      case WeightFormat::int8: range(data + at, nc); break;
      case WeightFormat::nvfp4:
      case WeightFormat::mxfp4: {
        const int64_t block = w.format == WeightFormat::nvfp4 ? 16 : 32;
        range(data + at / 2, nc / 2);
        range(reinterpret_cast<const char*>(w.block_scales) + at / block, nc / block);
        break;
      }
      default: return;
    }
  }
}

// C tiles 0-3 (+)= A block (decode_block's layout, `chunks` x 32 elements) x the B tiles of
// token blocks tb0 (tiles 0, 2) and tb0 + 1 (tiles 1, 3; skipped when !two).
QF_AMX_TARGET inline void block_product(const uint16_t* a, const uint32_t* b0, const uint32_t* b1,
                                        int64_t chunks, bool two) {
  if (two) {
    for (int64_t ch = 0; ch < chunks; ++ch) {
      const char* p0 = reinterpret_cast<const char*>(b0 + (ch + kPrefetchChunks) * 256);
      const char* p1 = reinterpret_cast<const char*>(b1 + (ch + kPrefetchChunks) * 256);
      for (int i = 0; i < 1024; i += 64) {
        _mm_prefetch(p0 + i, _MM_HINT_T0);
        _mm_prefetch(p1 + i, _MM_HINT_T0);
      }
      _tile_loadd(4, a + ch * kRows * kChunk, 64);
      _tile_loadd(5, a + ch * kRows * kChunk + 16 * kChunk, 64);
      _tile_loadd(6, b0 + ch * 256, 64);
      _tile_loadd(7, b1 + ch * 256, 64);
      _tile_dpbf16ps(0, 4, 6);
      _tile_dpbf16ps(1, 4, 7);
      _tile_dpbf16ps(2, 5, 6);
      _tile_dpbf16ps(3, 5, 7);
    }
  } else {
    for (int64_t ch = 0; ch < chunks; ++ch) {
      _tile_loadd(4, a + ch * kRows * kChunk, 64);
      _tile_loadd(5, a + ch * kRows * kChunk + 16 * kChunk, 64);
      _tile_loadd(6, b0 + ch * 256, 64);
      _tile_dpbf16ps(0, 4, 6);
      _tile_dpbf16ps(2, 5, 6);
    }
  }
}

// Elements of K per block: kKBlock, or a multiple of both the format's block and kChunk (an
// INT4 group of 172: 1376); 0 when that exceeds 4 kKBlock (the AVX512-BF16 kernel takes those).
int64_t block_cols(const LinearWeight& w) {
  const int64_t block = std::max(1, weight_block(w));
  const int64_t unit = std::lcm(block, kChunk);
  if (unit > 4 * kKBlock) return 0;
  return std::max<int64_t>(unit, kKBlock / unit * unit);
}

struct TaskBuffers {
  TileBuffer<uint16_t> a;   // the decoded A block
  TileBuffer<float> c;      // C tiles of the task: [sub-block][token block][2][16][16]
  std::vector<float> tile;  // float decode of the other layouts
};

// One product's view for the tasks: the weight with its output factor kept out (wd), the factor.
struct Product {
  const LinearWeight* w;
  LinearWeight wd;
  OutputFactor factor;
  std::vector<float> ones;
};

void prepare_product(const LinearWeight& w, Product& p) {
  p.w = &w;
  p.wd = w;
  p.factor = weight_format_row(w.format).factor;
  if (p.factor == OutputFactor::tensor) p.wd.global_scale = 1.f;
  if (p.factor == OutputFactor::row) {
    p.ones.assign(size_t(w.rows), 1.f);
    p.wd.scales = p.ones.data();
  }
}

// Accumulates rows [r0, r1) of one product for the token chunk [t0, t0 + nt) into C tiles,
// cbuf[((sub * blocks + tb) * 2 + half) * 256]: [16 rows][16 tokens] floats each, for 32-row
// sub-block `sub`, token block tb (of the chunk) and rows half * 16 .. +16 of the sub-block.
QF_AMX_TARGET void amx_accumulate(const LinearWeight& wd, const uint32_t* xp, int64_t tokens,
                                  int64_t t0, int64_t r0, int64_t r1, float* cbuf,
                                  TaskBuffers& buf) {
  const int64_t K = wd.cols;
  const int64_t kc = block_cols(wd), kpb = kc / 2;
  const int64_t all_blocks = (tokens + kTokenBlock - 1) / kTokenBlock;
  const int64_t subs = (r1 - r0 + kRows - 1) / kRows;
  uint16_t* a = buf.a.get(size_t(kRows * ((kc + kChunk - 1) / kChunk * kChunk)));
  const int64_t nt = std::min(kTokenChunk, tokens - t0);
  const int64_t blocks = (nt + kTokenBlock - 1) / kTokenBlock, pairs = (blocks + 1) / 2;
  const int64_t tb_first = t0 / kTokenBlock;
  for (int64_t c0 = 0; c0 < K; c0 += kc) {
    const int64_t nc = std::min(kc, K - c0);
    const int64_t chunks = (nc + kChunk - 1) / kChunk;
    const uint32_t* bk = xp + ((c0 / kc) * all_blocks + tb_first) * kpb * 16;
    for (int64_t sub = 0; sub < subs; ++sub) {
      const int64_t rs = r0 + sub * kRows, nrs = std::min(kRows, r1 - rs);
      decode_block(wd, rs, nrs, c0, nc, a, buf.tile);
      // The next A block (the next rows, else the next K-block's first, else the next token
      // chunk's) streams in while this one is multiplied.
      int64_t next_rows = rs + kRows, next_c = c0;
      if (next_rows >= r1) {
        next_rows = r0;
        next_c = c0 + kc < K ? c0 + kc : t0 + kTokenChunk < tokens ? 0 : K;
      }
      const int64_t next_nr = std::min(kRows, r1 - next_rows);
      for (int64_t tb = 0; tb < blocks; tb += 2) {
        const bool two = tb + 1 < blocks;
        if (next_c < K)
          prefetch_rows(wd, next_rows, next_nr, next_c, std::min(kc, K - next_c), tb / 2, pairs);
        // Block tb of this sub-block: C tiles [0] rows 0-15, [1] rows 16-31, then block tb + 1.
        float* c = cbuf + (sub * blocks + tb) * 512;
        if (c0 == 0) {
          _tile_zero(0);
          _tile_zero(1);
          _tile_zero(2);
          _tile_zero(3);
        } else {
          _tile_loadd(0, c, 64);
          _tile_loadd(2, c + 256, 64);
          if (two) {
            _tile_loadd(1, c + 512, 64);
            _tile_loadd(3, c + 768, 64);
          }
        }
        const uint32_t* b0 = bk + tb * kpb * 16;
        block_product(a, b0, b0 + kpb * 16, chunks, two);
        _tile_stored(0, c, 64);
        _tile_stored(2, c + 256, 64);
        if (two) {
          _tile_stored(1, c + 512, 64);
          _tile_stored(3, c + 768, 64);
        }
      }
    }
  }
}

// The C tile of rows rb .. rb+16 (rows < 16 valid) and 16 tokens, transposed to v[token][row],
// times the factor kept out of the decoded weights.
QF_AMX_TARGET inline void tile_output(const float* c, const Product& p, int64_t rb, int64_t rows,
                                      __m512 v[16]) {
  for (int i = 0; i < 16; ++i) v[i] = _mm512_loadu_ps(c + i * 16);
  transpose16(v);
  if (p.factor == OutputFactor::none) return;
  const __mmask16 m = __mmask16((1u << rows) - 1);
  const __m512 f = p.factor == OutputFactor::tensor ? _mm512_set1_ps(p.w->global_scale)
                                                     : _mm512_maskz_loadu_ps(m, p.w->scales + rb);
  for (int i = 0; i < 16; ++i) v[i] = _mm512_mul_ps(v[i], f);
}

// Rows [r0, r1) of y = x W^T (one product), or, with `up`, of y = silu(x G^T) * (x U^T) for
// G = p and U = up (same rows): both accumulated, then combined per tile by silu_mul_fast.
QF_AMX_TARGET void amx_task(const Product& p, const Product* up, const uint32_t* xp,
                            int64_t tokens, int64_t r0, int64_t r1, float* y, TaskBuffers& buf) {
  const int64_t M = p.w->rows;
  const int64_t subs = (r1 - r0 + kRows - 1) / kRows;
  configure_tiles();
  for (int64_t t0 = 0; t0 < tokens; t0 += kTokenChunk) {
    const int64_t nt = std::min(kTokenChunk, tokens - t0);
    const int64_t blocks = (nt + kTokenBlock - 1) / kTokenBlock;
    const size_t csize = size_t(subs * blocks * 512);
    float* cbuf = buf.c.get(up ? 2 * csize : csize);
    amx_accumulate(p.wd, xp, tokens, t0, r0, r1, cbuf, buf);
    if (up) amx_accumulate(up->wd, xp, tokens, t0, r0, r1, cbuf + csize, buf);
    // C tiles [16 rows][16 tokens] -> y[token][row].
    for (int64_t sub = 0; sub < subs; ++sub) {
      for (int64_t tb = 0; tb < blocks; ++tb) {
        for (int64_t half = 0; half < 2; ++half) {
          const int64_t rb = r0 + sub * kRows + half * 16, rows = std::min<int64_t>(16, r1 - rb);
          if (rows <= 0) continue;
          const size_t at = size_t(((sub * blocks + tb) * 2 + half) * 256);
          alignas(64) __m512 v[16];
          tile_output(cbuf + at, p, rb, rows, v);
          if (up) {
            alignas(64) __m512 u[16];
            tile_output(cbuf + csize + at, *up, rb, rows, u);
            silu_mul_fast(reinterpret_cast<float*>(v), reinterpret_cast<const float*>(u), 256);
          }
          const __mmask16 m = __mmask16((1u << rows) - 1);
          const int64_t tend = std::min<int64_t>(16, nt - tb * kTokenBlock);
          for (int64_t j = 0; j < tend; ++j)
            _mm512_mask_storeu_ps(y + (t0 + tb * kTokenBlock + j) * M + rb, m, v[j]);
        }
      }
    }
  }
  _tile_release();
}

bool os_allows_amx() {
  // Linux hands out the AMX tile state only on request (arch_prctl ARCH_REQ_XCOMP_PERM, the
  // permission is per process).
  constexpr long kReqXcompPerm = 0x1023;
  constexpr long kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kReqXcompPerm, kXfeatureXtiledata) == 0;
}

}  // namespace

bool cpu_has_amx_bf16() {
  static const bool ok = [] {
    // QFORGE_NO_AMX=1: the AVX512-BF16 kernel instead (comparisons, figures of non-AMX CPUs).
    const char* off = std::getenv("QFORGE_NO_AMX");
    if (off != nullptr && *off != '\0' && std::strcmp(off, "0") != 0) return false;
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
    const bool amx_bf16 = (d >> 22) & 1, amx_tile = (d >> 24) & 1;
    return amx_bf16 && amx_tile && cpu_has_avx512bf16() && __builtin_cpu_supports("avx512dq") &&
           os_allows_amx();
  }();
  return ok;
}

bool fits_amx_bf16(const LinearWeight& w) { return block_cols(w) > 0; }

bool amx_can_share_input(std::span<const LinearWeight* const> ws) {
  for (const LinearWeight* w : ws)
    if (w->cols != ws[0]->cols || block_cols(*w) != block_cols(*ws[0]) || !fits_amx_bf16(*w))
      return false;
  return true;
}

namespace {

// x laid out as B tiles once per call (amx_can_share_input's K-blocks), in parallel over token
// blocks; a grow-only buffer per calling thread (a fresh multi-megabyte vector per product would
// be fresh pages from the kernel each time, zeroed and faulted in: ~15% of the product).
const uint32_t* pack_shared(const LinearWeight& w, const float* x, int64_t tokens,
                            ThreadPool* pool) {
  const int64_t K = w.cols;
  const int64_t kc = block_cols(w), nkb = (K + kc - 1) / kc;
  const int64_t blocks = (tokens + kTokenBlock - 1) / kTokenBlock;
  thread_local TileBuffer<uint32_t> packed;
  uint32_t* xp = packed.get(size_t(blocks * nkb * kc / 2 * 16));
  // Token blocks of 4 (64 tokens) per packing task: whatever the split, the same bytes.
  constexpr int64_t kPackBlocks = 4;
  const int64_t tasks = (blocks + kPackBlocks - 1) / kPackBlocks;
  auto pack = [&](int64_t i) {
    pack_activations(x, tokens, K, kc / 2, nkb, i * kPackBlocks,
                     std::min(blocks, (i + 1) * kPackBlocks), xp);
  };
  if (pool == nullptr || pool->size() == 1 || tasks == 1) {
    for (int64_t i = 0; i < tasks; ++i) pack(i);
  } else {
    pool->parallel_for(tasks, pack);
  }
  return xp;
}

// Runs task(t) for t < tasks on the pool (fixed row ranges per task: outputs independent of the
// thread count).
void run_tasks(ThreadPool* pool, int64_t tasks, const std::function<void(int64_t)>& task) {
  if (pool == nullptr || pool->size() == 1 || tasks == 1) {
    for (int64_t t = 0; t < tasks; ++t) task(t);
  } else {
    pool->parallel_for(tasks, task);
  }
}

}  // namespace

void matmul_bf16_amx_shared_input(std::span<const LinearWeight* const> ws, const float* x,
                                  int64_t tokens, std::span<float* const> ys, ThreadPool* pool) {
  const uint32_t* xp = pack_shared(*ws[0], x, tokens, pool);
  std::vector<Product> products(ws.size());
  std::vector<int64_t> first_task(ws.size());
  int64_t tasks = 0;
  for (size_t i = 0; i < ws.size(); ++i) {
    prepare_product(*ws[i], products[i]);
    first_task[i] = tasks;
    tasks += (ws[i]->rows + kTaskRows - 1) / kTaskRows;
  }
  // One loop over every product's row tasks.
  run_tasks(pool, tasks, [&](int64_t t) {
    size_t i = 0;
    while (i + 1 < products.size() && first_task[i + 1] <= t) ++i;
    const int64_t r0 = (t - first_task[i]) * kTaskRows;
    thread_local TaskBuffers buf;
    amx_task(products[i], nullptr, xp, tokens, r0, std::min(ws[i]->rows, r0 + kTaskRows), ys[i],
             buf);
  });
}

void matmul_bf16_amx_gated_silu(const LinearWeight& gate, const LinearWeight& up, const float* x,
                                int64_t tokens, float* y, ThreadPool* pool) {
  const uint32_t* xp = pack_shared(gate, x, tokens, pool);
  Product g, u;
  prepare_product(gate, g);
  prepare_product(up, u);
  run_tasks(pool, (gate.rows + kTaskRows - 1) / kTaskRows, [&](int64_t t) {
    thread_local TaskBuffers buf;
    const int64_t r0 = t * kTaskRows;
    amx_task(g, &u, xp, tokens, r0, std::min(gate.rows, r0 + kTaskRows), y, buf);
  });
}

void matmul_bf16_amx(const LinearWeight& w, const float* x, int64_t tokens, float* y,
                     ThreadPool* pool) {
  const LinearWeight* ws[] = {&w};
  float* ys[] = {y};
  matmul_bf16_amx_shared_input(ws, x, tokens, ys, pool);
}

}  // namespace qf::kernels

#else  // not x86-64 Linux GCC/Clang: no AMX

namespace qf::kernels {
bool cpu_has_amx_bf16() { return false; }
bool fits_amx_bf16(const LinearWeight&) { return false; }
void matmul_bf16_amx(const LinearWeight&, const float*, int64_t, float*, ThreadPool*) {}
bool amx_can_share_input(std::span<const LinearWeight* const>) { return false; }
void matmul_bf16_amx_gated_silu(const LinearWeight&, const LinearWeight&, const float*, int64_t,
                                float*, ThreadPool*) {}
void matmul_bf16_amx_shared_input(std::span<const LinearWeight* const>, const float*, int64_t,
                                  std::span<float* const>, ThreadPool*) {}
}  // namespace qf::kernels

#endif

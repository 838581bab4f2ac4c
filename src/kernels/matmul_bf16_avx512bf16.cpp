// Matrix-matrix product (prefill) on BF16 dot products (AVX512-BF16 vdpbf16ps) for BF16 and
// quantized weights: the activation is rounded to BF16 once per call, each task decodes its
// 64-row tile one K-block at a time into BF16 panels, and a 32-row x 8-token register block
// accumulates in float32.
//
// Why BF16 is safe here: the decoded weights of NVFP4 (E2M1 x E4M3: 6 significant bits), MXFP4
// (E2M1 x 2^k), FP8 (E4M3) and BF16 are exact in BF16 once the per-tensor (NVFP4) and per-row
// (FP8) factors are kept out and applied to the outputs; INT4's q x group scale is rounded
// (relative 2^-9, far below its quantization step). The activation rounding (relative 2^-9)
// is the only other change. F32 and F16 weights keep the float kernel (matmul.cpp).
#include "kernels/kernels_internal.h"
#include "kernels/q4_rows16.h"
#include "kernels/transpose16.h"
#include "kernels/weight_formats.h"

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

// Rounds x [tokens, K] to BF16 pairs (kernels_internal.h).
QF_BF16_TARGET void x_to_bf16_pairs(const float* x, int64_t tokens, int64_t K, uint32_t* out) {
  const int64_t kp = (K + 1) / 2;
  for (int64_t t = 0; t < tokens; ++t) {
    const float* xt = x + t * K;
    uint32_t* o = out + t * kp;
    for (int64_t k = 0; k < K; k += 32) {
      const int64_t n = std::min<int64_t>(32, K - k);
      const __m512 lo = _mm512_maskz_loadu_ps(__mmask16((1u << std::min<int64_t>(n, 16)) - 1), xt + k);
      const __m512 hi = _mm512_maskz_loadu_ps(
          __mmask16((1u << std::max<int64_t>(0, n - 16)) - 1), xt + k + 16);
      const __m512i v = reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(hi, lo));
      _mm512_mask_storeu_epi32(o + k / 2, __mmask16((1u << ((n + 1) / 2)) - 1), v);
    }
  }
}

namespace {

constexpr int64_t kPanel = 32;     // output rows per register block (two vectors)
constexpr int64_t kTileRows = 64;  // rows per task
constexpr int64_t kTokens = 8;     // tokens per register block
// Columns per K-block. Measured on Zen 4 (4096x14336, 512 tokens, 2 threads): 256 -> 343,
// 512 -> 360, 1024 -> 368-382, 2048 -> 375 GFLOP/s; the 64x1024 BF16 panels (128 KB) sit in L2
// while every token block passes over them, and fewer K-blocks mean fewer partial-sum passes
// over y.
constexpr int64_t kBlockCols = 1024;

// Lane i: the BF16 pair (even[i], odd[i]), each rounded to nearest even.
QF_BF16_TARGET inline __m512i bf16_pairs(__m512 even, __m512 odd) {
  const __m512i e16 = _mm512_cvtepu16_epi32(reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(even)));
  const __m512i o16 = _mm512_cvtepu16_epi32(reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(odd)));
  return _mm512_or_si512(e16, _mm512_slli_epi32(o16, 16));
}

// For rows [0, nr) (nr <= kPanel) in groups of 16 and columns [0, nc) 32 at a time:
// row_pairs(r, c, n) returns row r's BF16 pairs of columns c .. c+n-1 (n <= 32; the lanes past
// (n + 1) / 2 are not stored), stored at panel[(c / 2 + k) * kPanel + r]. Rows past nr in a
// group of 16 are written as zeros; a group wholly past nr is not written. The 16 rows are
// transposed in registers: scatter stores (a word at a time) made packing cost ~3 cycles per
// weight on Zen 4, more than a 16-token product over the panel.
template <class RowPairs>
QF_BF16_TARGET inline void pack_rows(int64_t nr, int64_t nc, uint32_t* panel,
                                     const RowPairs& row_pairs) {
  for (int64_t rg = 0; rg < nr; rg += 16) {
    const int64_t rows = std::min<int64_t>(16, nr - rg);
    for (int64_t c = 0; c < nc; c += 32) {
      const int64_t n = std::min<int64_t>(32, nc - c);
      __m512 v[16];
      for (int64_t i = 0; i < 16; ++i)
        v[i] = i < rows ? _mm512_castsi512_ps(row_pairs(rg + i, c, n)) : _mm512_setzero_ps();
      transpose16(v);  // v[k]: pair c / 2 + k of the 16 rows
      uint32_t* dst = panel + (c / 2) * kPanel + rg;
      for (int64_t k = 0; k < (n + 1) / 2; ++k) _mm512_storeu_ps(dst + k * kPanel, v[k]);
    }
  }
}

// Packs rows [0, nr) of the float tile [nr, nc] (nc even) into a BF16 panel of kPanel rows:
// panel[i * kPanel + r] = the pair (2i, 2i+1) of row r; rows past nr are zero.
QF_BF16_TARGET void pack_panel(const float* tile, int64_t ld, int64_t nr, int64_t nc,
                               uint32_t* panel) {
  if (nr < kPanel) std::fill(panel, panel + nc / 2 * kPanel, 0u);
  pack_rows(nr, nc, panel, [&](int64_t r, int64_t c, int64_t n) QF_BF16_TARGET {
    const float* w = tile + r * ld + c;
    const __m512 lo = _mm512_maskz_loadu_ps(__mmask16((1u << std::min<int64_t>(n, 16)) - 1), w);
    const __m512 hi =
        _mm512_maskz_loadu_ps(__mmask16((1u << std::max<int64_t>(0, n - 16)) - 1), w + 16);
    return reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(hi, lo));
  });
}

// Packs W[row0 .. row0+nr, c0 .. c0+nc) straight from the stored bytes into a panel laid out as
// pack_panel's (rows past nr left as they are, so zero them first), for the formats whose
// decode vectorizes simply: BF16 (K even: the pairs are adjacent 32-bit words), NVFP4 and
// MXFP4 (nibbles through a 16-entry float table, times the block scale, both exact in BF16;
// NVFP4's global scale is applied to the outputs), FP8 and INT8 (their row scales applied to
// the outputs), compressed-tensors INT4 words in groups of a multiple of 32. Returns false for
// other formats and shapes.
QF_BF16_TARGET bool pack_panel_direct(const LinearWeight& w, int64_t row0, int64_t nr, int64_t c0,
                                      int64_t nc, uint32_t* panel) {
  if (is_q4_rows16(w.format)) {
    // Gathered into the stored layout (a panel's rows and columns), then packed as stored.
    thread_local std::vector<uint8_t> scratch;
    int64_t offset = 0;
    return pack_panel_direct(q4_rows16_view(w, row0, nr, c0, nc, scratch, offset), 0, nr, offset,
                             nc, panel);
  }
  const int64_t K = w.cols;
  if (w.format == WeightFormat::bf16 && K % 2 == 0) {
    const auto* words = static_cast<const uint32_t*>(w.data);
    pack_rows(nr, nc, panel, [&](int64_t r, int64_t c, int64_t n) QF_BF16_TARGET {
      return _mm512_maskz_loadu_epi32(__mmask16((1u << ((n + 1) / 2)) - 1),
                                      words + ((row0 + r) * K + c0 + c) / 2);
    });
    return true;
  }
  if (w.format == WeightFormat::fp8 || w.format == WeightFormat::int8) {
    // One byte a weight, the per-row scale kept out (applied to the outputs): both exact in BF16.
    const bool fp8 = w.format == WeightFormat::fp8;
    const auto* bytes = static_cast<const uint8_t*>(w.data);
    const float* table = e4m3_table();
    pack_rows(nr, nc, panel, [&](int64_t r, int64_t c, int64_t n) QF_BF16_TARGET {
      const uint8_t* p = bytes + (row0 + r) * K + c0 + c;
      const __m256i b = _mm256_maskz_loadu_epi8(__mmask32(n == 32 ? ~0u : (1u << n) - 1), p);
      __m512 lo, hi;
      if (!fp8) {
        lo = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_castsi256_si128(b)));
        hi = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_extracti128_si256(b, 1)));
      } else {
        const __m512i e = _mm512_cvtepu8_epi16(b);
        const __m512i mag = _mm512_and_si512(e, _mm512_set1_epi16(0x7F));
        if (_mm512_cmpeq_epi16_mask(mag, _mm512_set1_epi16(0x7F)) != 0) {
          // A NaN code (S.1111.111): the table's value, as the float tile has it.
          alignas(64) float f[32] = {};
          for (int64_t j = 0; j < n; ++j) f[j] = table[p[j]];
          lo = _mm512_load_ps(f);
          hi = _mm512_load_ps(f + 16);
        } else {
          // E4M3 bits moved into FP16's fields are the value / 2^8 (subnormals too: FP16's
          // exponent bias is 15, E4M3's 7), so the FP16 conversion times 256 is exact.
          const __m512i h = _mm512_or_si512(
              _mm512_slli_epi16(_mm512_and_si512(e, _mm512_set1_epi16(0x80)), 8),
              _mm512_slli_epi16(mag, 7));
          const __m512 k256 = _mm512_set1_ps(256.f);
          lo = _mm512_mul_ps(_mm512_cvtph_ps(_mm512_castsi512_si256(h)), k256);
          hi = _mm512_mul_ps(_mm512_cvtph_ps(_mm512_extracti64x4_epi64(h, 1)), k256);
        }
      }
      return reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(hi, lo));
    });
    return true;
  }
  if (w.format == WeightFormat::int4_packed32) {
    // Words of 8 codes (q + 8, element j at bits 4j: byte b holds elements 2b and 2b + 1, as
    // NVFP4's bytes), one float scale per group; groups that tile the 32 columns only.
    if (w.group % 32 != 0 || c0 % 32 != 0 || nc % 32 != 0) return false;
    const int64_t groups = K / w.group;
    const __m512i low = _mm512_set1_epi32(0x0F), eight = _mm512_set1_epi32(8);
    const auto* bytes = static_cast<const uint8_t*>(w.data);
    pack_rows(nr, nc, panel, [&](int64_t r, int64_t c, int64_t) QF_BF16_TARGET {
      const int64_t row = row0 + r;
      const __m512i b = _mm512_cvtepu8_epi32(
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(bytes + (row * K + c0 + c) / 2)));
      const __m512 s = _mm512_set1_ps(w.scales[row * groups + (c0 + c) / w.group]);
      // q x scale in float, then rounded to BF16: the float tile's values and rounding.
      return bf16_pairs(
          _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_and_si512(b, low), eight)), s),
          _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_srli_epi32(b, 4), eight)), s));
    });
    return true;
  }
  const bool nv = w.format == WeightFormat::nvfp4;
  if (!nv && w.format != WeightFormat::mxfp4) return false;
  const int64_t block = nv ? 16 : 32;
  const float* stab = nv ? e4m3_table() : e8m0_table();
  const __m512 e2m1 = _mm512_setr_ps(0.f, 0.5f, 1.f, 1.5f, 2.f, 3.f, 4.f, 6.f, -0.f, -0.5f, -1.f,
                                     -1.5f, -2.f, -3.f, -4.f, -6.f);
  const __m512i low = _mm512_set1_epi32(0x0F);
  const auto* bytes = static_cast<const uint8_t*>(w.data);
  pack_rows(nr, nc, panel, [&](int64_t r, int64_t c, int64_t n) QF_BF16_TARGET {  // n: 16 or 32 (NVFP4), 32
    const int64_t e = (row0 + r) * K + c0 + c;
    const uint8_t* sc = w.block_scales + e / block;
    const __m512i b =
        _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(__mmask16((1u << (n / 2)) - 1), bytes + e / 2));
    // Lane i holds elements 2i (low nibble) and 2i+1 (high nibble): block (2i) / block.
    const __m512 s = nv && n > 16 ? _mm512_mask_blend_ps(0xFF00, _mm512_set1_ps(stab[sc[0]]),
                                                         _mm512_set1_ps(stab[sc[1]]))
                                  : _mm512_set1_ps(stab[sc[0]]);
    return bf16_pairs(_mm512_mul_ps(_mm512_permutexvar_ps(_mm512_and_si512(b, low), e2m1), s),
                      _mm512_mul_ps(_mm512_permutexvar_ps(_mm512_srli_epi32(b, 4), e2m1), s));
  });
  return true;
}

// y[t * ldy + r] (+)= sum over kp pairs of panel x x for NT tokens and the rows of `m0`, `m1`.
template <int NT>
QF_BF16_TARGET void micro(const uint32_t* panel, int64_t kp, const uint32_t* x, int64_t ldx,
                          float* y, int64_t ldy, __mmask16 m0, __mmask16 m1, bool add) {
  __m512 acc0[NT], acc1[NT];
  for (int j = 0; j < NT; ++j) acc0[j] = acc1[j] = _mm512_setzero_ps();
  for (int64_t k = 0; k < kp; ++k) {
    const __m512bh w0 = reinterpret_cast<__m512bh>(_mm512_loadu_si512(panel + k * kPanel));
    const __m512bh w1 = reinterpret_cast<__m512bh>(_mm512_loadu_si512(panel + k * kPanel + 16));
    for (int j = 0; j < NT; ++j) {
      const __m512bh xb = reinterpret_cast<__m512bh>(_mm512_set1_epi32(int32_t(x[j * ldx + k])));
      acc0[j] = _mm512_dpbf16_ps(acc0[j], w0, xb);
      acc1[j] = _mm512_dpbf16_ps(acc1[j], w1, xb);
    }
  }
  for (int j = 0; j < NT; ++j) {
    float* yj = y + j * ldy;
    if (add) {
      acc0[j] = _mm512_add_ps(acc0[j], _mm512_maskz_loadu_ps(m0, yj));
      acc1[j] = _mm512_add_ps(acc1[j], _mm512_maskz_loadu_ps(m1, yj + 16));
    }
    _mm512_mask_storeu_ps(yj, m0, acc0[j]);
    _mm512_mask_storeu_ps(yj + 16, m1, acc1[j]);
  }
}

using MicroFn = void (*)(const uint32_t*, int64_t, const uint32_t*, int64_t, float*, int64_t,
                         __mmask16, __mmask16, bool);
constexpr MicroFn kMicro[kTokens + 1] = {nullptr,   &micro<1>, &micro<2>, &micro<3>, &micro<4>,
                                         &micro<5>, &micro<6>, &micro<7>, &micro<8>};

}  // namespace

bool cpu_has_avx512bf16() {
  static const bool ok = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bf16");
  return ok;
}

void matmul_bf16_avx512bf16(const LinearWeight& w, const float* x, int64_t tokens, float* y,
                            ThreadPool* pool) {
  const int64_t K = w.cols, M = w.rows, kp = (K + 1) / 2;
  std::vector<uint32_t> xb(static_cast<size_t>(tokens * kp));
  x_to_bf16_pairs(x, tokens, K, xb.data());
  // Keep the per-tensor and per-row factors out of the decoded weights (exact in BF16).
  LinearWeight wd = w;
  std::vector<float> ones;
  const OutputFactor factor = weight_format_row(w.format).factor;
  if (factor == OutputFactor::tensor) wd.global_scale = 1.f;
  const bool row_scaled = factor == OutputFactor::row;
  if (row_scaled) {
    ones.assign(size_t(M), 1.f);
    wd.scales = ones.data();
  }
  const int64_t block = std::max(1, weight_block(w));
  const int64_t kc = std::max(block, kBlockCols / block * block);
  for_row_tasks(pool, M, kTileRows, [&](int64_t r0, int64_t r1) {
    const int64_t nr = r1 - r0;
    const int64_t ncmax = std::min(kc, K) + 1;  // +1: room for an odd K's pad column
    std::vector<float> tile(static_cast<size_t>(nr * ncmax));
    std::vector<uint32_t> panels(static_cast<size_t>((kTileRows / kPanel) * (ncmax / 2 + 1) * kPanel));
    for (int64_t c0 = 0; c0 < K; c0 += kc) {
      const int64_t nc = std::min(kc, K - c0);
      const int64_t nce = nc + (nc & 1);
      const int64_t npanels = (nr + kPanel - 1) / kPanel;
      bool direct = true;
      for (int64_t p = 0; p < npanels && direct; ++p) {
        const int64_t pr = std::min(kPanel, nr - p * kPanel);
        uint32_t* panel = panels.data() + p * (nce / 2) * kPanel;
        if (pr < kPanel) std::fill(panel, panel + nce / 2 * kPanel, 0u);
        direct = pack_panel_direct(wd, r0 + p * kPanel, pr, c0, nc, panel);
      }
      if (!direct) {
        decode_tile(wd, r0, nr, c0, nc, tile.data(), nce);
        if (nce != nc)
          for (int64_t r = 0; r < nr; ++r) tile[size_t(r * nce + nc)] = 0.f;
        for (int64_t p = 0; p < npanels; ++p)
          pack_panel(tile.data() + p * kPanel * nce, nce, std::min(kPanel, nr - p * kPanel), nce,
                     panels.data() + p * (nce / 2) * kPanel);
      }
      for (int64_t t = 0; t < tokens; t += kTokens) {
        const int64_t nt = std::min(kTokens, tokens - t);
        for (int64_t p = 0; p < npanels; ++p) {
          const int64_t rows = std::min(kPanel, nr - p * kPanel);
          const __mmask16 m0 = __mmask16((1u << std::min<int64_t>(rows, 16)) - 1);
          const __mmask16 m1 = __mmask16((1u << std::max<int64_t>(0, rows - 16)) - 1);
          kMicro[nt](panels.data() + p * (nce / 2) * kPanel, nce / 2, xb.data() + t * kp + c0 / 2,
                     kp, y + t * M + r0 + p * kPanel, M, m0, m1, c0 > 0);
        }
      }
    }
    if (factor == OutputFactor::tensor)
      for (int64_t t = 0; t < tokens; ++t)
        for (int64_t r = r0; r < r1; ++r) y[t * M + r] *= w.global_scale;
    if (row_scaled)
      for (int64_t t = 0; t < tokens; ++t)
        for (int64_t r = r0; r < r1; ++r) y[t * M + r] *= w.scales[r];
  });
}

}  // namespace qf::kernels

#else  // not x86-64 GCC/Clang: the float kernel only

namespace qf::kernels {
bool cpu_has_avx512bf16() { return false; }
void matmul_bf16_avx512bf16(const LinearWeight&, const float*, int64_t, float*, ThreadPool*) {}
}  // namespace qf::kernels

#endif

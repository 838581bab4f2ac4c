// BF16 weights against a few tokens (batched decode, fast mode) on AMX-BF16 tiles: the weights
// are the A operand loaded straight from where they are stored (a BF16 row is already the pair
// layout a tile row holds: 16 rows x 32 elements per tile load, the row length as the stride),
// the tokens' BF16 activations the B operand (16 pairs x N tokens, laid out once per call), and
// the C tiles (16 rows x N tokens, float32) accumulate over the whole row. A tile product does
// 16 x 32 x N multiply-adds where vdpbf16ps does 32, so the weights stream from memory at the
// memory's pace instead of the vector unit's (at 8 tokens the AVX512-BF16 kernel was compute
// bound: the output head of a 1B model took a third of a batched decode step).
//
// Same roundings as matvec_bf16_tokens_avx512bf16 (activations to BF16, float32 sums), a
// different summation order. A token's outputs do not depend on the other tokens of the call
// (each column of C is its own chain) nor on the thread count (fixed row tasks).
#include "kernels/amx_tile_config.h"
#include "kernels/kernels_internal.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && defined(__linux__)

#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <vector>

namespace qf::kernels {
namespace {

constexpr int64_t kBlockRows = 32;  // two A tiles per step
constexpr int64_t kChunk = 32;      // elements of a row per tile load
// How far ahead of the tile loads each of the 32 row streams is prefetched: the hardware
// prefetchers follow too few of them.
constexpr int64_t kAheadBytes = 1024;


// Tiles 0-1: C (16 rows x n tokens of float32); 2-3: A (16 rows x 32 BF16); 4: B (16 pairs x
// n tokens). Loaded by every task: the prefill kernel configures the same tiles its own way.
QF_AMX_TARGET void configure(int64_t n) {
  AmxTileConfig cfg;
  for (int i = 0; i < 5; ++i) {
    cfg.rows[i] = 16;
    cfg.colsb[i] = uint16_t(i == 2 || i == 3 ? 64 : n * 4);
  }
  load_tile_config(cfg);
}

// y[t * rows + r] for rows [r0, r1) (a multiple of kBlockRows) and n tokens; b: the B tiles,
// chunk c's at b + c * 16 * n.
QF_AMX_TARGET void row_blocks(const uint16_t* w, int64_t cols, int64_t rows, int64_t r0,
                              int64_t r1, const uint32_t* b, int64_t n, float* y) {
  configure(n);
  const int64_t stride = cols * 2;
  alignas(64) float c[2 * 16 * 16];
  for (int64_t r = r0; r < r1; r += kBlockRows) {
    const uint16_t* a0 = w + r * cols;
    const uint16_t* a1 = a0 + 16 * cols;
    _tile_zero(0);
    _tile_zero(1);
    for (int64_t k = 0; k < cols; k += kChunk) {
      if (k % 32 == 0) {
        // One line per row per chunk: the line kAheadBytes ahead of this chunk, every row.
        const char* p = reinterpret_cast<const char*>(a0 + k) + kAheadBytes;
        for (int64_t i = 0; i < kBlockRows; ++i)
          asm volatile("prefetcht0 %0" : : "m"(p[i * stride]));
      }
      _tile_loadd(2, a0 + k, stride);
      _tile_loadd(3, a1 + k, stride);
      _tile_loadd(4, b + k / kChunk * 16 * n, n * 4);
      _tile_dpbf16ps(0, 2, 4);
      _tile_dpbf16ps(1, 3, 4);
    }
    _tile_stored(0, c, n * 4);
    _tile_stored(1, c + 16 * n, n * 4);
    for (int64_t i = 0; i < kBlockRows; ++i)
      for (int64_t t = 0; t < n; ++t) y[t * rows + r + i] = c[i * n + t];
  }
}

}  // namespace

bool fits_bf16_tokens_amx(const LinearWeight& w) {
  return w.format == WeightFormat::bf16 && !w.transposed && w.cols % kChunk == 0 &&
         w.rows >= kBlockRows && cpu_has_amx_bf16();
}

void matvec_bf16_tokens_amx(const LinearWeight& w, const float* x, int64_t tokens, float* y,
                            ThreadPool* pool) {
  const int64_t kp = w.cols / 2, chunks = w.cols / kChunk;
  std::vector<uint32_t> xb(static_cast<size_t>(tokens * kp));
  x_to_bf16_pairs(x, tokens, w.cols, xb.data());
  const auto* data = static_cast<const uint16_t*>(w.data);
  const int64_t amx_rows = w.rows / kBlockRows * kBlockRows;
  // ~256 KB of weights per task, whole 32-row blocks.
  const int64_t per_task =
      std::max<int64_t>(1, (int64_t(256) << 10) / (w.cols * 2 * kBlockRows)) * kBlockRows;
  std::vector<uint32_t> b;
  for (int64_t t0 = 0; t0 < tokens; t0 += 16) {
    const int64_t n = std::min<int64_t>(16, tokens - t0);
    // B tiles: pair p = 16 c + i of token t at b[(c * 16 + i) * n + t].
    b.assign(static_cast<size_t>(chunks * 16 * n), 0);
    for (int64_t t = 0; t < n; ++t)
      for (int64_t p = 0; p < kp; ++p) b[size_t(p * n + t)] = xb[size_t((t0 + t) * kp + p)];
    float* yt = y + t0 * w.rows;
    for_row_tasks(pool, amx_rows, per_task, [&](int64_t r0, int64_t r1) {
      row_blocks(data, w.cols, w.rows, r0, r1, b.data(), n, yt);
    });
  }
  if (amx_rows == w.rows) return;
  // The last rows % 32 rows: the AVX512-BF16 kernel on a view of them.
  LinearWeight tail = w;
  tail.rows = w.rows - amx_rows;
  tail.data = data + amx_rows * w.cols;
  std::vector<float> ty(static_cast<size_t>(tokens * tail.rows));
  matvec_bf16_tokens_avx512bf16(tail, x, tokens, ty.data(), pool);
  for (int64_t t = 0; t < tokens; ++t)
    std::copy_n(ty.data() + t * tail.rows, tail.rows, y + t * w.rows + amx_rows);
}

}  // namespace qf::kernels

#else

namespace qf::kernels {
bool fits_bf16_tokens_amx(const LinearWeight&) { return false; }
void matvec_bf16_tokens_amx(const LinearWeight&, const float*, int64_t, float*, ThreadPool*) {}
}  // namespace qf::kernels

#endif

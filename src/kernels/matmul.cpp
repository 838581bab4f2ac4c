// Matrix-matrix product (prefill) for every weight format: a task owns a tile of output rows,
// decodes it to float32 one K-block at a time (so quantized weights are read once per product,
// not once per token), packs it k-major in panels of two vectors of rows and multiplies each
// panel with 6 tokens at a time in register tiles (outer products: a broadcast of x against two
// vectors of weights), the layout BLAS kernels use to keep the multiply-add units busy; a few
// tokens take dot products on the unpacked tile instead.
#include "kernels/kernels_internal.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/matmul.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep

#include <hwy/highway.h>

#include <algorithm>
#include <vector>

HWY_BEFORE_NAMESPACE();
namespace qf::kernels {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

constexpr int64_t kTileRows = 64;
constexpr int64_t kBlockCols = 512;
constexpr int kTokens = 6;  // tokens per micro-kernel call
// Fewer tokens take dot products on the row-major tile: `bench --prompt N --kernels exact` of
// llama-1b BF16 on a 2-core AVX2 VM, panels vs dots: 2 tokens 1.8 vs 2.6 tok/s, 4: 4.5 vs 5.1,
// 8: 6.8 vs 6.8, 12: 9.1 vs 8.1, 24: 15.5 vs 9.4.
constexpr int64_t kMinPanelTokens = 8;

// The tile's rows in panels of 2 vectors' width, k-major: panel p holds rows p*W .. p*W+W-1 of
// the decoded tile as W consecutive floats per column k (rows past nr are 0), so that the
// micro-kernel loads one column of W rows with two vector loads.
template <class D>
void PackPanels(D d, const float* tile, int64_t nr, int64_t nc, float* panels) {
  const int64_t W = 2 * int64_t(hn::Lanes(d));
  for (int64_t p0 = 0; p0 < nr; p0 += W) {
    float* out = panels + p0 * nc;
    const int64_t rows = std::min(W, nr - p0);
    for (int64_t k = 0; k < nc; ++k) {
      for (int64_t i = 0; i < rows; ++i) out[k * W + i] = tile[(p0 + i) * nc + k];
      for (int64_t i = rows; i < W; ++i) out[k * W + i] = 0.f;
    }
  }
}

// y[j * ldy + i] (+)= sum_k panel[k * W + i] * x[j * ldx + k] for i < rows (<= W), j < NT:
// 2 x NT vector accumulators (12 of 16 registers on AVX2 at NT = 6), one broadcast of x and two
// panel loads per NT x 2 multiply-adds.
template <int NT, class D>
HWY_INLINE void MicroPanel(D d, const float* HWY_RESTRICT panel, int64_t nc,
                           const float* HWY_RESTRICT x, int64_t ldx, float* HWY_RESTRICT y,
                           int64_t ldy, int64_t rows, bool add) {
  const int64_t N = int64_t(hn::Lanes(d));
  hn::Vec<D> acc[NT][2];
  for (int j = 0; j < NT; ++j) acc[j][0] = acc[j][1] = hn::Zero(d);
  for (int64_t k = 0; k < nc; ++k) {
    const auto w0 = hn::LoadU(d, panel + k * 2 * N);
    const auto w1 = hn::LoadU(d, panel + k * 2 * N + N);
    for (int j = 0; j < NT; ++j) {
      const auto xb = hn::Set(d, x[j * ldx + k]);
      acc[j][0] = hn::MulAdd(w0, xb, acc[j][0]);
      acc[j][1] = hn::MulAdd(w1, xb, acc[j][1]);
    }
  }
  for (int j = 0; j < NT; ++j) {
    float* out = y + j * ldy;
    if (rows == 2 * N) {
      for (int h = 0; h < 2; ++h) {
        const auto v = add ? hn::Add(hn::LoadU(d, out + h * N), acc[j][h]) : acc[j][h];
        hn::StoreU(v, d, out + h * N);
      }
    } else {
      HWY_ALIGN float tmp[2 * hn::MaxLanes(d)];
      hn::Store(acc[j][0], d, tmp);
      hn::Store(acc[j][1], d, tmp + N);
      for (int64_t i = 0; i < rows; ++i) out[i] = add ? out[i] + tmp[i] : tmp[i];
    }
  }
}

template <class D>
void MicroPanelTokens(D d, int64_t nt, const float* panel, int64_t nc, const float* x,
                      int64_t ldx, float* y, int64_t ldy, int64_t rows, bool add) {
  switch (nt) {
    case 6: return MicroPanel<6>(d, panel, nc, x, ldx, y, ldy, rows, add);
    case 5: return MicroPanel<5>(d, panel, nc, x, ldx, y, ldy, rows, add);
    case 4: return MicroPanel<4>(d, panel, nc, x, ldx, y, ldy, rows, add);
    case 3: return MicroPanel<3>(d, panel, nc, x, ldx, y, ldy, rows, add);
    case 2: return MicroPanel<2>(d, panel, nc, x, ldx, y, ldy, rows, add);
    default: return MicroPanel<1>(d, panel, nc, x, ldx, y, ldy, rows, add);
  }
}

// A few tokens (below kMinPanelTokens): dot products on the row-major tile (4 rows x 4 tokens of
// accumulators), where packing the panels would cost more than the products it speeds up.
template <int NR, int NT, class D>
HWY_INLINE void MicroDot(D d, const float* HWY_RESTRICT w, int64_t ldw,
                         const float* HWY_RESTRICT x, int64_t ldx, int64_t n,
                         float* HWY_RESTRICT y, int64_t ldy, bool add) {
  const int64_t N = int64_t(hn::Lanes(d));
  hn::Vec<D> acc[NR][NT];
  for (int i = 0; i < NR; ++i)
    for (int j = 0; j < NT; ++j) acc[i][j] = hn::Zero(d);
  int64_t k = 0;
  for (; k + N <= n; k += N) {
    hn::Vec<D> xv[NT];
    for (int j = 0; j < NT; ++j) xv[j] = hn::LoadU(d, x + j * ldx + k);
    for (int i = 0; i < NR; ++i) {
      const auto wv = hn::LoadU(d, w + i * ldw + k);
      for (int j = 0; j < NT; ++j) acc[i][j] = hn::MulAdd(wv, xv[j], acc[i][j]);
    }
  }
  for (int i = 0; i < NR; ++i)
    for (int j = 0; j < NT; ++j) {
      float s = hn::GetLane(hn::SumOfLanes(d, acc[i][j]));
      for (int64_t kk = k; kk < n; ++kk) s += w[i * ldw + kk] * x[j * ldx + kk];
      float& out = y[j * ldy + i];
      out = add ? out + s : s;
    }
}

template <class D>
void DotTokens(D d, const float* tile, int64_t nr, int64_t nc, const float* x, int64_t K,
               int64_t tokens, float* y, int64_t M, bool add) {
  for (int64_t t = 0; t < tokens; t += 4) {
    const int64_t nt = std::min<int64_t>(4, tokens - t);
    for (int64_t r = 0; r < nr; r += 4) {
      if (nt == 4 && r + 4 <= nr) {
        MicroDot<4, 4>(d, tile + r * nc, nc, x + t * K, K, nc, y + t * M + r, M, add);
      } else {
        for (int64_t i = r; i < std::min(nr, r + 4); ++i)
          for (int64_t j = t; j < t + nt; ++j)
            MicroDot<1, 1>(d, tile + i * nc, nc, x + j * K, K, nc, y + j * M + i, M, add);
      }
    }
  }
}

// Each output element sums its K blocks in order, each block's products in k order, whatever
// the thread count.
void MatMulDecoded(const LinearWeight& w, const float* x, int64_t tokens, float* y,
                   ThreadPool* pool) {
  const hn::ScalableTag<float> d;
  const int64_t K = w.cols, M = w.rows, W = 2 * int64_t(hn::Lanes(d));
  const int64_t block = std::max(1, weight_block(w));
  const int64_t kc = std::max(block, kBlockCols / block * block);
  for_row_tasks(pool, M, kTileRows, [&](int64_t r0, int64_t r1) {
    const int64_t nr = r1 - r0;
    const int64_t width = std::min(kc, K);
    std::vector<float> tile(static_cast<size_t>(nr * width));
    std::vector<float> panels;
    if (tokens >= kMinPanelTokens) panels.resize(size_t((nr + W - 1) / W * W * width));
    for (int64_t c0 = 0; c0 < K; c0 += kc) {
      const int64_t nc = std::min(kc, K - c0);
      decode_tile(w, r0, nr, c0, nc, tile.data(), nc);
      const bool add = c0 > 0;
      if (tokens < kMinPanelTokens) {
        DotTokens(d, tile.data(), nr, nc, x + c0, K, tokens, y + r0, M, add);
        continue;
      }
      PackPanels(d, tile.data(), nr, nc, panels.data());
      for (int64_t t = 0; t < tokens; t += kTokens) {
        const int64_t nt = std::min<int64_t>(kTokens, tokens - t);
        for (int64_t p0 = 0; p0 < nr; p0 += W)
          MicroPanelTokens(d, nt, panels.data() + p0 * nc, nc, x + t * K + c0, K,
                           y + t * M + r0 + p0, M, std::min(W, nr - p0), add);
      }
    }
  });
}

}  // namespace HWY_NAMESPACE
}  // namespace qf::kernels
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace qf::kernels {
HWY_EXPORT(MatMulDecoded);
void matmul_decoded(const LinearWeight& w, const float* x, int64_t tokens, float* y,
                    ThreadPool* pool) {
  HWY_DYNAMIC_DISPATCH(MatMulDecoded)(w, x, tokens, y, pool);
}
}  // namespace qf::kernels
#endif

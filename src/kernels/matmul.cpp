// Matrix-matrix product (prefill) for every weight format: a task owns a tile of output rows,
// decodes it to float32 one K-block at a time (so quantized weights are read once per product,
// not once per token) and multiplies it with the token block in 4x4 register tiles.
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

// out[t * ldy + r] (+)= sum_k w[r * ldw + k] * x[t * ldx + k] for r < nr, t < nt, k < n.
template <int NR, int NT>
HWY_INLINE void Micro(const float* HWY_RESTRICT w, int64_t ldw, const float* HWY_RESTRICT x,
                      int64_t ldx, int64_t n, float* HWY_RESTRICT y, int64_t ldy, bool add) {
  const hn::ScalableTag<float> d;
  const int64_t N = int64_t(hn::Lanes(d));
  hn::Vec<decltype(d)> acc[NR][NT];
  for (int i = 0; i < NR; ++i)
    for (int j = 0; j < NT; ++j) acc[i][j] = hn::Zero(d);
  int64_t k = 0;
  for (; k + N <= n; k += N) {
    hn::Vec<decltype(d)> xv[NT];
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

void MatMulDecoded(const LinearWeight& w, const float* x, int64_t tokens, float* y,
                   ThreadPool* pool) {
  const int64_t K = w.cols, M = w.rows;
  const int64_t block = std::max(1, weight_block(w));
  const int64_t kc = std::max(block, kBlockCols / block * block);
  for_row_tasks(pool, M, kTileRows, [&](int64_t r0, int64_t r1) {
    const int64_t nr = r1 - r0;
    std::vector<float> tile(static_cast<size_t>(nr * std::min(kc, K)));
    for (int64_t c0 = 0; c0 < K; c0 += kc) {
      const int64_t nc = std::min(kc, K - c0);
      decode_tile(w, r0, nr, c0, nc, tile.data(), nc);
      const bool add = c0 > 0;
      for (int64_t t = 0; t < tokens; t += 4) {
        const int64_t nt = std::min<int64_t>(4, tokens - t);
        const float* xt = x + t * K + c0;
        float* yt = y + t * M + r0;
        for (int64_t r = 0; r < nr; r += 4) {
          const float* wr = tile.data() + r * nc;
          if (nt == 4 && r + 4 <= nr) {
            Micro<4, 4>(wr, nc, xt, K, nc, yt + r, M, add);
          } else {
            for (int64_t i = r; i < std::min(nr, r + 4); ++i)
              for (int64_t j = 0; j < nt; ++j)
                Micro<1, 1>(tile.data() + i * nc, nc, xt + j * K, K, nc, yt + j * M + i, M, add);
          }
        }
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

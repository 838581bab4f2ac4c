// GPTQ column sweep over ggml blocks with frozen scales (see the header).
#include "algo/ggml_gptq.h"

#include "algo/gptq.h"
#include "algo/linalg.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "formats/ggml_weighted.h"

#include <algorithm>

namespace qf {

namespace {
constexpr int64_t kRowTile = 32;  // rows per sweep task
}  // namespace

GgmlGptqReport ggml_gptq(GgmlType type, std::vector<float> w, int64_t rows, int64_t cols,
                         uint8_t* bytes, float g, const std::vector<double>& xtx, int64_t tokens,
                         const GgmlGptqOptions& options, ThreadPool& pool) {
  const int64_t n = cols;
  if (rows <= 0 || cols <= 0 || int64_t(w.size()) != rows * cols)
    fail("ggml gptq: weight has {} elements, expected {} x {}", w.size(), rows, cols);
  if (int64_t(xtx.size()) != n * n)
    fail("ggml gptq: XtX has {} elements, expected {} x {}", xtx.size(), n, n);
  if (tokens <= 0) fail("ggml gptq: no calibration tokens");
  const std::optional<uint64_t> rb = ggml_row_bytes(type, cols);
  if (!rb) fail("ggml gptq: row of {} does not fit {}", cols, ggml_type_info(type).name);
  const uint64_t row_bytes = *rb;

  GgmlGptqReport report;
  std::vector<double> h =
      gptq_damped_hessian(w, rows, n, xtx, tokens, options.damp, &report.dead_columns);
  std::vector<float> u;
  if (!inverse_cholesky_upper(h, n, u, pool)) {
    report.fell_back = true;  // the scale search's own codes stay
    return report;
  }
  h = {};

  const int64_t block = std::max(1, options.block_size);
  pool.parallel_for((rows + kRowTile - 1) / kRowTile, [&](int64_t task) {
    const int64_t r0 = task * kRowTile, m = std::min(kRowTile, rows - r0);
    float* wt = w.data() + r0 * n;
    std::vector<GgmlFrozenRow> grid(static_cast<size_t>(m));
    for (int64_t i = 0; i < m; ++i)
      ggml_frozen_row(type, bytes + uint64_t(r0 + i) * row_bytes, n, g, grid[size_t(i)]);
    std::vector<float> err(static_cast<size_t>(m * block));
    for (int64_t b0 = 0; b0 < n; b0 += block) {
      const int64_t b1 = std::min(b0 + block, n), bw = b1 - b0;
      for (int64_t j = b0; j < b1; ++j) {
        const float* uj = u.data() + j * n;
        for (int64_t i = 0; i < m; ++i) {
          float* wi = wt + i * n;
          float q;
          grid[size_t(i)].codes[size_t(j)] = ggml_frozen_round(grid[size_t(i)], j, wi[j], &q);
          const float e = (wi[j] - q) / uj[j];
          err[size_t(i * block + (j - b0))] = e;
          for (int64_t k = j + 1; k < b1; ++k) wi[k] -= e * uj[k];
        }
      }
      if (b1 < n) sub_matmul(wt + b1, n, err.data(), block, u.data() + b0 * n + b1, n, m, n - b1, bw);
    }
    for (int64_t i = 0; i < m; ++i)
      ggml_pack_codes(grid[size_t(i)], bytes + uint64_t(r0 + i) * row_bytes);
  });
  return report;
}

}  // namespace qf

// GPTQ column sweep with frozen scales over the inverse-Hessian factor.
#include "algo/gptq.h"

#include "algo/linalg.h"
#include "core/convert.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "formats/fake_quant.h"

#include <algorithm>
#include <cmath>

namespace qf {

namespace {

constexpr int64_t kRowTile = 32;  // rows per sweep task: 32 * in floats of working weights

}  // namespace

std::vector<double> gptq_damped_hessian(const std::vector<float>& w, int64_t rows, int64_t n,
                                        const std::vector<double>& xtx, int64_t tokens,
                                        double damp, int64_t* dead_columns) {
  // H = 2 XtX / n (the scale does not change U's direction, but damping is relative to it).
  std::vector<double> h(xtx.size());
  const double factor = 2.0 / double(tokens);
  for (size_t i = 0; i < h.size(); ++i) h[i] = xtx[i] * factor;
  for (int64_t i = 0; i < n; ++i) {
    bool zero_column = true;
    for (int64_t r = 0; r < rows && zero_column; ++r) zero_column = w[size_t(r * n + i)] == 0.f;
    if (h[size_t(i * n + i)] == 0.0 || zero_column) {
      for (int64_t k = 0; k < n; ++k) h[size_t(i * n + k)] = h[size_t(k * n + i)] = 0.0;
      h[size_t(i * n + i)] = 1.0;
      ++*dead_columns;
    }
  }
  double mean_diag = 0.0;
  for (int64_t i = 0; i < n; ++i) mean_diag += h[size_t(i * n + i)];
  mean_diag /= double(n);
  for (int64_t i = 0; i < n; ++i) h[size_t(i * n + i)] += damp * mean_diag;
  return h;
}

GptqResult gptq_with_scales(std::vector<float> w, QuantizedTensor frozen,
                            const std::vector<double>& xtx, int64_t tokens,
                            const GptqOptions& options, ThreadPool& pool) {
  const int64_t rows = frozen.rows, n = frozen.cols;
  if (int64_t(w.size()) != rows * n) fail("gptq: weight has {} elements, expected {}", w.size(), rows * n);
  if (int64_t(xtx.size()) != n * n)
    fail("gptq: XtX has {} elements, expected {} x {} (was it collected?)", xtx.size(), n, n);
  if (tokens <= 0) fail("gptq: no calibration tokens");
  if (options.block_size <= 0) fail("gptq: block size {} is not positive", options.block_size);

  GptqResult result;
  std::vector<double> h = gptq_damped_hessian(w, rows, n, xtx, tokens, options.damp,
                                              &result.dead_columns);

  std::vector<float> u;
  if (!inverse_cholesky_upper(h, n, u, pool)) {
    // ModelOpt and llm-compressor both fall back to plain rounding here.
    result.fell_back_to_rtn = true;
    encode_with_scales(frozen, w.data(), pool);
    result.tensor = std::move(frozen);
    return result;
  }
  h = {};

  const FrozenQuantizer fq(frozen);
  if (frozen.codes.empty()) set_code(frozen, 0, 0, 0);  // allocates the code array
  const int64_t block = options.block_size;
  pool.parallel_for((rows + kRowTile - 1) / kRowTile, [&](int64_t task) {
    const int64_t r0 = task * kRowTile, m = std::min(kRowTile, rows - r0);
    float* wt = w.data() + r0 * n;  // this task's rows, updated in place
    std::vector<float> err(size_t(m * block));
    for (int64_t b0 = 0; b0 < n; b0 += block) {
      const int64_t b1 = std::min(b0 + block, n), bw = b1 - b0;
      for (int64_t j = b0; j < b1; ++j) {
        const float* uj = u.data() + j * n;
        for (int64_t i = 0; i < m; ++i) {
          float* wi = wt + i * n;
          float q;
          set_code(frozen, r0 + i, j, fq.encode(r0 + i, j, wi[j], &q));
          const float e = (wi[j] - q) / uj[j];
          err[size_t(i * block + (j - b0))] = e;
          for (int64_t k = j + 1; k < b1; ++k) wi[k] -= e * uj[k];
        }
      }
      if (b1 < n) sub_matmul(wt + b1, n, err.data(), block, u.data() + b0 * n + b1, n, m, n - b1, bw);
    }
  });
  result.tensor = std::move(frozen);
  return result;
}

GptqResult quantize_gptq(const WeightRows& w, const LinearStats& stats, const GptqOptions& options,
                         float tensor_amax, ThreadPool& pool) {
  if (w.cols <= 0 || w.rows <= 0) fail("gptq: bad weight shape [{}, {}]", w.rows, w.cols);
  QuantizedTensor frozen = quantize_rtn(w, options.format, tensor_amax, pool);
  std::vector<float> wf(size_t(w.rows * w.cols));
  convert_to_f32(w.dtype, w.data, wf.data(), wf.size());
  return gptq_with_scales(std::move(wf), std::move(frozen), stats.xtx, stats.tokens, options, pool);
}

}  // namespace qf

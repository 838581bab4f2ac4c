// Hessian-weighted per-block FP8 scale sweep for static NVFP4 weights.
#include "algo/local_hessian.h"

#include "algo/mse.h"
#include "core/convert.h"
#include "core/error.h"
#include "core/numeric.h"
#include "core/thread_pool.h"
#include "formats/fake_quant.h"
#include "formats/nvfp4.h"

#include <cmath>

namespace qf {

uint8_t nvfp4_local_hessian_block(const float* x, const float* h, float global_amax) {
  uint8_t best = 1;
  float best_loss = 0.f;
  float d[kNvfp4Block];
  for (int code = 1; code <= 126; ++code) {
    const float c = e4m3_to_f32(uint8_t(code)) / 448.f;
    // Same arithmetic as nvfp4_fp8_sweep_block, so an identity Hessian picks the same code.
    const float scale = div_by_constant(c * global_amax, 6.0f);
    for (int k = 0; k < kNvfp4Block; ++k) {
      const float a = std::fabs(x[k]);
      const float e = a - kE2M1Values[e2m1_index_rne(a / scale)] * scale;
      d[k] = x[k] < 0.f ? -e : e;
    }
    float loss = 0.f;
    for (int k = 0; k < kNvfp4Block; ++k) {
      float hd = 0.f;
      for (int l = 0; l < kNvfp4Block; ++l) hd += h[k * kNvfp4Block + l] * d[l];
      loss += d[k] * hd;
    }
    if (code == 1 || loss < best_loss) best = uint8_t(code), best_loss = loss;
  }
  return best;
}

QuantizedTensor quantize_nvfp4_local_hessian(const WeightRows& w, const LinearStats& stats,
                                             float global_amax, ThreadPool& pool,
                                             std::vector<float>* block_amax) {
  const int64_t n = w.cols;
  if (n % kNvfp4Block != 0) fail("local_hessian: nvfp4 needs columns in multiples of 16, got {}", n);
  if (int64_t(stats.xtx.size()) != n * n)
    fail("local_hessian: XtX has {} elements, expected {} x {} (was it collected?)", stats.xtx.size(), n, n);
  if (stats.tokens <= 0) fail("local_hessian: no calibration tokens");
  if (!(global_amax > 0.f) || std::isinf(global_amax))
    fail("local_hessian: global amax {} is not positive and finite", global_amax);

  // The diagonal blocks of XtX / N, float32 [nb][16][16]; the scale is irrelevant to the argmin
  // but keeps the float sums in range.
  const int64_t nb = n / kNvfp4Block;
  std::vector<float> hb(size_t(nb * kNvfp4Block * kNvfp4Block));
  std::vector<char> dead(size_t(nb), 1);
  const double inv = 1.0 / double(stats.tokens);
  for (int64_t b = 0; b < nb; ++b)
    for (int k = 0; k < kNvfp4Block; ++k) {
      const int64_t i = b * kNvfp4Block + k;
      if (stats.xtx[size_t(i * n + i)] > 0.0) dead[size_t(b)] = 0;
      for (int l = 0; l < kNvfp4Block; ++l)
        hb[size_t((b * kNvfp4Block + k) * kNvfp4Block + l)] =
            float(stats.xtx[size_t(i * n + b * kNvfp4Block + l)] * inv);
    }

  std::vector<float> x(size_t(w.rows * n));
  convert_to_f32(w.dtype, w.data, x.data(), x.size());
  std::vector<float> amax(size_t(w.rows * nb));
  pool.parallel_for(w.rows, [&](int64_t r) {
    for (int64_t b = 0; b < nb; ++b) {
      const float* xb = x.data() + r * n + b * kNvfp4Block;
      const uint8_t code =
          dead[size_t(b)] ? nvfp4_fp8_sweep_block(xb, global_amax)
                          : nvfp4_local_hessian_block(xb, hb.data() + b * kNvfp4Block * kNvfp4Block,
                                                      global_amax);
      amax[size_t(r * nb + b)] = global_amax * (e4m3_to_f32(code) / 448.f);
    }
  });
  QuantizedTensor q = nvfp4_static_quantize(x.data(), w.rows, n, amax.data(), global_amax, pool);
  if (block_amax) *block_amax = std::move(amax);
  return q;
}

}  // namespace qf

// MSE amax search over a multiplier grid, and the NVFP4 static FP8 scale sweep.
#include "algo/mse.h"

#include "core/convert.h"
#include "core/error.h"
#include "core/numeric.h"
#include "core/thread_pool.h"
#include "formats/fake_quant.h"
#include "formats/int4.h"
#include "formats/mxfp4.h"
#include "formats/nvfp4.h"

#include <algorithm>
#include <cmath>

namespace qf {

std::vector<float> mse_multipliers(const MseOptions& o) {
  if (!(o.step > 0.f) || !(o.stop >= o.start) || !(o.start > 0.f))
    fail("mse: bad multiplier grid start {} stop {} step {}", o.start, o.stop, o.step);
  // Python: math.ceil((stop - start) / step) + 1 in double; torch.linspace in float32 fills the
  // first half forward from start and the second half backward from stop.
  const int64_t steps =
      int64_t(std::ceil((double(o.stop) - double(o.start)) / double(o.step))) + 1;
  std::vector<float> m(static_cast<size_t>(steps));
  if (steps == 1) {
    m[0] = o.start;
  } else {
    const float step = (o.stop - o.start) / float(steps - 1);
    for (int64_t i = 0; i < steps; ++i)
      m[size_t(i)] = i < steps / 2 ? o.start + step * float(i) : o.stop - step * float(steps - 1 - i);
  }
  if (o.include_one && std::find(m.begin(), m.end(), 1.f) == m.end())
    m.insert(std::upper_bound(m.begin(), m.end(), 1.f), 1.f);
  return m;
}

namespace {

std::vector<float> to_f32(const WeightRows& w) {
  std::vector<float> out(size_t(w.rows * w.cols));
  convert_to_f32(w.dtype, w.data, out.data(), out.size());
  return out;
}

float max_abs(const float* x, int64_t n) {
  float a = 0.f;
  for (int64_t i = 0; i < n; ++i) a = std::max(a, std::fabs(x[i]));
  return a;
}

// Squared error of one NVFP4 block under global scale g (dynamic block scale), as exported.
double nvfp4_block_error(const float* x, float bamax, float g) {
  const float e4m3 = e4m3_to_f32(nvfp4_dynamic_block_scale(bamax, g));
  const float divisor = e4m3 * g;
  double err = 0.0;
  for (int k = 0; k < kNvfp4Block; ++k) {
    const float deq = e2m1_to_f32(e2m1_from_f32_modelopt(x[k] / divisor)) * e4m3 * g;
    const double d = double(x[k]) - double(deq);
    err += d * d;
  }
  return err;
}

// Squared error of x[0, n) quantized with the scale the format derives from `amax`.
double unit_error(Format f, const float* x, int64_t n, float amax, DType scale_dtype,
                  std::vector<float>& scratch) {
  scratch.resize(size_t(n));
  fake_quantize_unit(f, x, n, amax, scale_dtype, scratch.data());
  double err = 0.0;
  for (int64_t k = 0; k < n; ++k) {
    const double d = double(x[k]) - double(scratch[size_t(k)]);
    err += d * d;
  }
  return err;
}

}  // namespace

float nvfp4_mse_global_amax(const WeightRows& w, float amax0, const MseOptions& options,
                            ThreadPool& pool, float* chosen_multiplier) {
  if (w.cols % kNvfp4Block != 0) fail("mse: nvfp4 needs columns in multiples of 16, got {}", w.cols);
  const std::vector<float> m = mse_multipliers(options);
  const std::vector<float> x = to_f32(w);
  const size_t nc = m.size();
  std::vector<float> g(nc);
  for (size_t i = 0; i < nc; ++i) g[i] = nvfp4_global_scale(amax0 * m[i]);
  // Per-row losses summed afterwards in row order: the sum does not depend on the threads.
  std::vector<double> row_loss(size_t(w.rows) * nc, 0.0);
  pool.parallel_for(w.rows, [&](int64_t r) {
    const float* xr = x.data() + r * w.cols;
    for (int64_t j = 0; j < w.cols; j += kNvfp4Block) {
      const float bamax = max_abs(xr + j, kNvfp4Block);
      for (size_t i = 0; i < nc; ++i) row_loss[size_t(r) * nc + i] += nvfp4_block_error(xr + j, bamax, g[i]);
    }
  });
  size_t best = 0;
  double best_loss = 0.0;
  for (size_t i = 0; i < nc; ++i) {
    double loss = 0.0;
    for (int64_t r = 0; r < w.rows; ++r) loss += row_loss[size_t(r) * nc + i];
    if (i == 0 || loss < best_loss) best = i, best_loss = loss;
  }
  if (chosen_multiplier) *chosen_multiplier = m[best];
  return amax0 * m[best];
}

QuantizedTensor quantize_mse(const WeightRows& w, const RtnOptions& format,
                             const MseOptions& options, ThreadPool& pool, float group_amax) {
  if (format_info(format.format).has_tensor_scale()) {
    // Two-level scales: the search is over the tensor amax, the block scales follow it.
    float amax = group_amax;
    if (!(amax > 0.f)) {
      const AmaxResult a = weight_amax(w, pool);
      amax = nvfp4_mse_global_amax(w, a.amax, options, pool);
    }
    return quantize_rtn(w, format, amax, pool);
  }
  const int block = int(scale_span(format.format, format.block, w.cols));
  if (w.cols % block != 0) fail("mse: input size {} is not a multiple of the block {}", w.cols, block);
  const std::vector<float> m = mse_multipliers(options);
  const std::vector<float> x = to_f32(w);
  const int64_t units_per_row = w.cols / block;
  std::vector<float> amax(size_t(w.rows * units_per_row));
  pool.parallel_for(w.rows, [&](int64_t r) {
    std::vector<float> scratch;
    for (int64_t j = 0; j < units_per_row; ++j) {
      const float* xu = x.data() + r * w.cols + j * block;
      const float a0 = max_abs(xu, block);
      float best = a0;
      double best_loss = 0.0;
      for (size_t i = 0; i < m.size(); ++i) {
        const double loss = unit_error(format.format, xu, block, a0 * m[i], format.scale_dtype, scratch);
        if (i == 0 || loss < best_loss) best = a0 * m[i], best_loss = loss;
      }
      amax[size_t(r * units_per_row + j)] = best;
    }
  });
  QuantizedTensor q = scales_from_amax(format.format, w.rows, w.cols, block, amax.data(), 0.f,
                                       format.scale_dtype);
  encode_with_scales(q, x.data(), pool);
  return q;
}

uint8_t nvfp4_fp8_sweep_block(const float* x, float global_amax) {
  uint8_t best = 1;
  float best_loss = 0.f;
  for (int code = 1; code <= 126; ++code) {
    const float c = e4m3_to_f32(uint8_t(code)) / 448.f;
    const float scale = div_by_constant(c * global_amax, 6.0f);
    float loss = 0.f;
    for (int k = 0; k < kNvfp4Block; ++k) {
      const float a = std::fabs(x[k]);
      const float d = a - kE2M1Values[e2m1_index_rne(a / scale)] * scale;
      loss += d * d;
    }
    if (code == 1 || loss < best_loss) best = uint8_t(code), best_loss = loss;
  }
  return best;
}

QuantizedTensor quantize_nvfp4_fp8_sweep(const WeightRows& w, float global_amax, ThreadPool& pool,
                                         std::vector<float>* block_amax) {
  if (w.cols % kNvfp4Block != 0) fail("fp8 sweep: nvfp4 needs columns in multiples of 16, got {}", w.cols);
  if (!(global_amax > 0.f) || std::isinf(global_amax))
    fail("fp8 sweep: global amax {} is not positive and finite", global_amax);
  const std::vector<float> x = to_f32(w);
  const int64_t blocks = w.rows * w.cols / kNvfp4Block;
  std::vector<float> amax(static_cast<size_t>(blocks));
  pool.parallel_for(w.rows, [&](int64_t r) {
    for (int64_t j = 0; j < w.cols / kNvfp4Block; ++j) {
      const int64_t b = r * (w.cols / kNvfp4Block) + j;
      const uint8_t code = nvfp4_fp8_sweep_block(x.data() + b * kNvfp4Block, global_amax);
      amax[size_t(b)] = global_amax * (e4m3_to_f32(code) / 448.f);
    }
  });
  QuantizedTensor q = nvfp4_static_quantize(x.data(), w.rows, w.cols, amax.data(), global_amax, pool);
  if (block_amax) *block_amax = std::move(amax);
  return q;
}

}  // namespace qf

// Four Over Six: the per-block M=6 / M=4 choice by fake-quantized block error, and the export
// through the static NVFP4 path with FP8 scales normalised to 256.
#include "algo/four_over_six.h"

#include "core/convert.h"
#include "core/error.h"
#include "core/numeric.h"
#include "core/thread_pool.h"
#include "formats/fake_quant.h"
#include "formats/nvfp4.h"

#include <algorithm>
#include <cmath>

namespace qf {

float four_over_six_block_error(const float* x, float cand_amax, float global_amax) {
  // compute_fp4_scales: scale = amax / 6.0, FP8-fake-quantized against the amax
  // global_amax * (448 / 256) / 6.0 (scaled_e4m3_impl).
  const float s = div_by_constant(cand_amax, 6.0f);
  float a = div_by_constant(global_amax * (kNvfp4Fp8Max / kNvfp4FourOverSixFp8Max), 6.0f);
  if (a <= 0x1p-24f) a = 1.f;  // fp8_eager / fake_e4m3fy: a near-zero amax scales by 1
  const float sc = constant_division() == ConstantDivision::gpu ? kNvfp4Fp8Max / a
                                                                : (1.0f / a) * kNvfp4Fp8Max;
  const float inv = 1.0f / sc;
  const float scale = e4m3_to_f32(f32_to_e4m3(std::min(s * sc, kNvfp4Fp8Max))) * inv;
  // nvfp4_scalar_quant, then F.mse_loss(reduction="none") and the block's sum.
  float e[kNvfp4Block];
  for (int k = 0; k < kNvfp4Block; ++k) {
    float xq = 0.f;
    if (scale != 0.f) {
      const float q = kE2M1Values[e2m1_index_rne(std::fabs(x[k]) / scale)] * scale;
      xq = x[k] >= 0.f ? q : -q;
    }
    const float d = x[k] - xq;
    e[k] = d * d;
  }
  float lanes[kNvfp4Block / 2];
  for (int k = 0; k < kNvfp4Block / 2; ++k) lanes[k] = e[k] + e[k + kNvfp4Block / 2];
  float sum = lanes[0];
  for (int k = 1; k < kNvfp4Block / 2; ++k) sum += lanes[k];
  return sum;
}

bool four_over_six_block_m4(const float* x, float global_amax) {
  float bamax = 0.f;
  for (int k = 0; k < kNvfp4Block; ++k) bamax = std::max(bamax, std::fabs(x[k]));
  const float m6 = four_over_six_block_error(x, bamax * kFourOverSixM6, global_amax);
  const float m4 = four_over_six_block_error(x, bamax * kFourOverSixM4, global_amax);
  return m4 < m6;
}

QuantizedTensor quantize_nvfp4_four_over_six(const WeightRows& w, float global_amax,
                                             ThreadPool& pool, std::vector<float>* block_amax,
                                             FourOverSixCounts* counts) {
  if (w.rows < 0 || w.cols <= 0 || w.cols % kNvfp4Block != 0)
    fail("four_over_six: nvfp4 needs columns in multiples of 16, got {}", w.cols);
  if (!(global_amax >= 0.f) || std::isinf(global_amax))
    fail("four_over_six: global amax {} is not a finite non-negative number", global_amax);
  const int64_t per_row = w.cols / kNvfp4Block;
  const int64_t blocks = w.rows * per_row;
  std::vector<float> x(size_t(w.rows * w.cols));
  convert_to_f32(w.dtype, w.data, x.data(), x.size());

  std::vector<float> amax(size_t(blocks), 0.f);
  QuantizedTensor q;
  int64_t m4 = 0;
  if (global_amax == 0.f) {
    // All zeros: the plain path's finite encoding (weight_scale_2 1.0, scales 1.0, codes 0).
    q.format = Format::nvfp4;
    q.rows = w.rows;
    q.cols = w.cols;
    q.block = kNvfp4Block;
    q.scale_dtype = DType::F8_E4M3;
    q.global_scale = nvfp4_global_scale(0.f, kNvfp4FourOverSixFp8Max);
    q.block_scales.assign(size_t(blocks), f32_to_e4m3(1.f));
    q.codes.assign(size_t(w.rows * w.cols / 2), 0);
  } else {
    std::vector<uint8_t> chose_m4(size_t(blocks), 0);
    pool.parallel_for(w.rows, [&](int64_t r) {
      for (int64_t j = 0; j < per_row; ++j) {
        const int64_t b = r * per_row + j;
        const float* xb = x.data() + b * kNvfp4Block;
        float bamax = 0.f;
        for (int k = 0; k < kNvfp4Block; ++k) bamax = std::max(bamax, std::fabs(xb[k]));
        const bool take_m4 = four_over_six_block_m4(xb, global_amax);
        chose_m4[size_t(b)] = take_m4;
        amax[size_t(b)] = bamax * (take_m4 ? kFourOverSixM4 : kFourOverSixM6);
      }
    });
    for (uint8_t c : chose_m4) m4 += c;
    q = nvfp4_static_quantize(x.data(), w.rows, w.cols, amax.data(), global_amax, pool,
                              kNvfp4FourOverSixFp8Max);
  }
  if (counts) {
    counts->blocks += blocks;
    counts->m4_blocks += m4;
  }
  if (block_amax) *block_amax = std::move(amax);
  return q;
}

}  // namespace qf

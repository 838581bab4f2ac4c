#include "formats/mxfp4_nvfp4_cast.h"

#include "core/error.h"
#include "core/numeric.h"
#include "core/thread_pool.h"
#include "formats/nvfp4.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace qf {
namespace {

constexpr int kMxBlock = 32;
constexpr int kE8m0Bias = 127;
// The powers of two E4M3FN holds: 2^-9 (its smallest subnormal) to 2^8 (448 is not one).
constexpr int kE4m3MinExp = -9, kE4m3MaxExp = 8;

bool zero_block(const uint8_t* codes) {  // 16 bytes, 32 E2M1 codes; the sign of zero aside
  for (int j = 0; j < kMxBlock / 2; ++j)
    if (codes[j] & 0x77) return false;
  return true;
}

}  // namespace

int mxfp4_max_scale_code(const uint8_t* packed, const uint8_t* scales, int64_t rows, int64_t cols) {
  int best = -1;
  const int64_t nb = cols / kMxBlock;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t b = 0; b < nb; ++b) {
      if (zero_block(packed + r * cols / 2 + b * kMxBlock / 2)) continue;
      const int code = scales[r * nb + b];
      if (code == 255) fail("MXFP4 block scale code 255 (NaN) in row {}, block {}", r, b);
      best = std::max(best, code);
    }
  return best;
}

int mxfp4_cast_exponent(int max_code) {
  return max_code < 0 ? 0 : max_code - kE8m0Bias - kE4m3MaxExp;
}

QuantizedTensor mxfp4_to_nvfp4(const uint8_t* packed, const uint8_t* scales, int64_t rows,
                               int64_t cols, int k, ThreadPool& pool, Mxfp4CastStats& stats) {
  if (cols % kMxBlock != 0) fail("MXFP4 -> NVFP4: {} columns is not a multiple of 32", cols);
  QuantizedTensor q;
  q.format = Format::nvfp4;
  q.rows = rows;
  q.cols = cols;
  q.block = kNvfp4Block;
  q.scale_dtype = DType::F8_E4M3;
  q.global_scale = std::ldexp(1.0f, k);
  if (!(q.global_scale > 0.f) || !std::isfinite(q.global_scale))
    fail("MXFP4 -> NVFP4: tensor scale 2^{} is not a float32", k);
  q.codes.assign(packed, packed + rows * cols / 2);
  q.block_scales.assign(size_t(rows * cols / kNvfp4Block), 0);
  const int64_t nb = cols / kMxBlock;
  std::vector<int64_t> inexact(size_t(rows), 0);
  pool.parallel_for(rows, [&](int64_t r) {
    float values[kMxBlock];
    for (int64_t b = 0; b < nb; ++b) {
      uint8_t* codes = q.codes.data() + r * cols / 2 + b * kMxBlock / 2;
      uint8_t* s = q.block_scales.data() + r * cols / kNvfp4Block + 2 * b;
      const int e = scales[r * nb + b] - kE8m0Bias - k;
      if (e >= kE4m3MinExp && e <= kE4m3MaxExp) {
        s[0] = s[1] = f32_to_e4m3(std::ldexp(1.0f, e));
        continue;
      }
      // Outside E4M3's powers of two (or a zero block with a far scale): the NVFP4 rule on
      // the block's own values, with this tensor scale.
      const float unit = std::ldexp(1.0f, scales[r * nb + b] - kE8m0Bias);
      for (int j = 0; j < kMxBlock; ++j) {
        const uint8_t nib = (codes[j / 2] >> (4 * (j % 2))) & 0xF;
        values[j] = e2m1_to_f32(nib) * unit;
      }
      const WeightRows w{values, DType::F32, 1, kMxBlock, {}};
      nvfp4_quantize_reference(w, q.global_scale, codes, s);
      float back[kMxBlock];
      nvfp4_dequantize(codes, s, q.global_scale, 1, kMxBlock, back);
      if (!std::equal(values, values + kMxBlock, back)) ++inexact[size_t(r)];
    }
  });
  stats.blocks += rows * nb;
  for (int64_t n : inexact) stats.inexact += n;
  return q;
}

}  // namespace qf

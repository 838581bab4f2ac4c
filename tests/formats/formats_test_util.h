// Test matrices for the format tests: synthetic data of several shapes of distribution stored as
// F32, BF16 or F16, and a helper that runs a check once per compiled SIMD target. Header-only:
// the test build compiles only *_test.cpp files.
#pragma once

#include "core/convert.h"
#include "core/dtype.h"
#include "formats/weight_rows.h"

#include <hwy/targets.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace qf::test {

enum class Dist {
  normal,        // N(0, 0.02), typical weights
  heavy_tailed,  // normal / uniform^2: a few outliers per block, most values tiny in comparison
  tiny,          // magnitudes near and below the dtype's smallest normal (subnormals)
  huge,          // magnitudes near the top of the dtype's range
  zeros,         // all zero, with some -0.0
  zero_rows,     // normal data with every third row all zero and some zero blocks
  fp4_ties,      // per block of `block`: amax 6*2^e and E2M1 ties (and neighbours) times 2^e
  int_ties,      // per group of `block`: amax 7*2^e and half-integers (k+0.5)*2^e
  wide_range,    // each block scaled by 2^e for e spread over the dtype's exponent range
};

// A matrix owning its bytes in `dtype`.
struct Matrix {
  DType dtype = DType::F32;
  int64_t rows = 0;
  int64_t cols = 0;
  std::vector<uint8_t> bytes;

  WeightRows view() const { return {bytes.data(), dtype, rows, cols}; }
  // The elements as float32 (exact).
  std::vector<float> values() const {
    std::vector<float> out(size_t(rows * cols));
    convert_to_f32(dtype, bytes.data(), out.data(), out.size());
    return out;
  }
};

inline std::string dist_name(Dist dist) {
  switch (dist) {
    case Dist::normal: return "normal";
    case Dist::heavy_tailed: return "heavy_tailed";
    case Dist::tiny: return "tiny";
    case Dist::huge: return "huge";
    case Dist::zeros: return "zeros";
    case Dist::zero_rows: return "zero_rows";
    case Dist::fp4_ties: return "fp4_ties";
    case Dist::int_ties: return "int_ties";
    case Dist::wide_range: return "wide_range";
  }
  return "?";
}

inline std::vector<Dist> all_dists() {
  return {Dist::normal, Dist::heavy_tailed, Dist::tiny,     Dist::huge,      Dist::zeros,
          Dist::zero_rows, Dist::fp4_ties,  Dist::int_ties, Dist::wide_range};
}

inline const char* dtype_label(DType dtype) { return dtype_name(dtype).data(); }

// Rounds `values` (row-major [rows, cols]) to `dtype` with round to nearest even.
inline Matrix matrix_from_floats(const std::vector<float>& values, DType dtype, int64_t rows,
                          int64_t cols) {
  Matrix m;
  m.dtype = dtype;
  m.rows = rows;
  m.cols = cols;
  m.bytes.resize(size_t(rows * cols) * dtype_size(dtype));
  convert_from_f32(dtype, values.data(), m.bytes.data(), values.size());
  return m;
}

namespace detail {

// Exponent range (of 2^e scale factors) whose products stay finite and normal-ish in dtype.
struct Range {
  int min_exp;  // smallest normal exponent
  int max_exp;  // largest exponent with headroom for a factor of 8
  float huge;   // a large finite magnitude
};
inline Range range_of(DType dtype) {
  if (dtype == DType::F16) return {-14, 12, 30000.f};
  return {-126, 124, 1e37f};
}

}  // namespace detail

// Finite test data; `block` is the scale block the structured distributions align to.
inline Matrix make_matrix(Dist dist, DType dtype, int64_t rows, int64_t cols, int block, uint64_t seed) {
  std::mt19937_64 rng(seed * 1000003u + uint64_t(dist) * 7919u + uint64_t(dtype));
  std::normal_distribution<float> normal(0.f, 0.02f);
  std::uniform_real_distribution<float> unit(0.f, 1.f);
  const detail::Range range = detail::range_of(dtype);
  std::vector<float> v(size_t(rows * cols), 0.f);
  const int64_t n = rows * cols;
  auto sign = [&] { return (rng() & 1) ? -1.f : 1.f; };

  switch (dist) {
    case Dist::normal:
      for (auto& x : v) x = normal(rng);
      break;
    case Dist::heavy_tailed:
      for (auto& x : v) {
        const float u = std::max(unit(rng), 1e-3f);
        x = normal(rng) / (u * u);
      }
      break;
    case Dist::tiny: {
      // F16: around 2^-14 (normal boundary) down to 2^-24; F32/BF16: 2^-120 .. 2^-149.
      const float lo = dtype == DType::F16 ? -24.f : -149.f;
      const float hi = dtype == DType::F16 ? -13.f : -120.f;
      for (auto& x : v) x = sign() * std::exp2(lo + (hi - lo) * unit(rng));
      break;
    }
    case Dist::huge:
      for (auto& x : v) x = sign() * range.huge * (0.25f + unit(rng));
      break;
    case Dist::zeros:
      for (auto& x : v) x = (rng() % 3 == 0) ? -0.f : 0.f;
      break;
    case Dist::zero_rows:
      for (int64_t i = 0; i < n; ++i) {
        const int64_t r = i / cols, blk = (i % cols) / block;
        const bool zero = r % 3 == 1 || (blk + r) % 4 == 0;
        v[size_t(i)] = zero ? ((i % 5 == 0) ? -0.f : 0.f) : normal(rng);
      }
      break;
    case Dist::fp4_ties: {
      const float ties[] = {0.f,  0.25f, 0.5f, 0.75f, 1.f, 1.25f, 1.5f, 1.75f,
                            2.f,  2.5f,  3.f,  3.5f,  4.f, 5.f,   6.f,  0.1f};
      for (int64_t b = 0; b < n / block; ++b) {
        const float scale = std::exp2(float(int(rng() % 16) - 10));
        for (int k = 0; k < block; ++k) {
          float t = ties[rng() % 16];
          const int nudge = int(rng() % 4);  // exact tie, or one float step either side
          if (nudge == 1) t = std::nextafter(t, 0.f);
          if (nudge == 2) t = std::nextafter(t, 7.f);
          v[size_t(b * block + k)] = sign() * t * scale;
        }
        v[size_t(b * block + int64_t(rng() % uint64_t(block)))] = sign() * 6.f * scale;
      }
      break;
    }
    case Dist::int_ties:
      for (int64_t b = 0; b < n / block; ++b) {
        const float scale = std::exp2(float(int(rng() % 16) - 10));
        for (int k = 0; k < block; ++k) {
          float t = float(rng() % 7) + 0.5f;
          const int nudge = int(rng() % 4);  // exact tie, or one float step either side
          if (nudge == 1) t = std::nextafter(t, 0.f);
          if (nudge == 2) t = std::nextafter(t, 8.f);
          v[size_t(b * block + k)] = sign() * t * scale;
        }
        v[size_t(b * block + int64_t(rng() % uint64_t(block)))] = sign() * 7.f * scale;
      }
      break;
    case Dist::wide_range:
      for (int64_t b = 0; b < n / block; ++b) {
        const int e = range.min_exp + int(rng() % uint64_t(range.max_exp - range.min_exp));
        for (int k = 0; k < block; ++k)
          v[size_t(b * block + k)] = std::ldexp(normal(rng) * 50.f, e);
      }
      break;
  }
  return matrix_from_floats(v, dtype, rows, cols);
}

// E2M1 nibble of q from the definition: the nearest grid value, a tie going to the even index
// (even mantissa bit), sign bit iff q < 0.
inline uint8_t e2m1_by_definition(double q) {
  static const double grid[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
  const double a = std::fabs(q);
  int best = 0;
  double best_d = std::numeric_limits<double>::infinity();
  for (int i = 0; i < 8; ++i) {
    const double d = std::fabs(a - grid[i]);
    if (d < best_d || (d == best_d && i % 2 == 0)) {
      best = i;
      best_d = d;
    }
  }
  return uint8_t((q < 0 ? 8 : 0) | best);
}

// Nibble i of a packed E2M1 row (element 2j in the low nibble).
inline uint8_t nibble(const std::vector<uint8_t>& packed, size_t i) {
  return i % 2 == 0 ? (packed[i / 2] & 0xF) : (packed[i / 2] >> 4);
}

// Runs fn(target_name) once for every SIMD target compiled in and supported by this CPU, with
// Highway's dispatch forced to that target, then restores normal dispatch.
inline void for_each_simd_target(const std::function<void(const std::string&)>& fn) {
  for (const int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    fn(hwy::TargetName(target));
  }
  hwy::SetSupportedTargetsForTest(0);
}

}  // namespace qf::test

// Scalar reference of weight_amax; the fast path is weight_amax_simd.cpp.
#include "formats/weight_rows.h"

#include <atomic>

#include "core/numeric.h"
#include "formats/formats_internal.h"

#include <algorithm>
#include <cmath>

namespace qf {

AmaxResult weight_amax_reference(const WeightRows& w) {
  detail::check_weight_rows(w, 0, "weight amax");
  AmaxResult result;
  const int64_t n = w.rows * w.cols;
  for (int64_t i = 0; i < n; ++i) {
    float x;
    switch (w.dtype) {
      case DType::BF16:
        x = bf16_to_f32(static_cast<const uint16_t*>(w.data)[i]);
        break;
      case DType::F16:
        x = f16_to_f32(static_cast<const uint16_t*>(w.data)[i]);
        break;
      default:
        x = static_cast<const float*>(w.data)[i];
        break;
    }
    if (!std::isfinite(x)) {
      ++result.nonfinite;
      continue;
    }
    result.amax = std::max(result.amax, std::fabs(x));
  }
  return result;
}

namespace {
std::atomic<ConstantDivision> g_constant_division{ConstantDivision::gpu};
}  // namespace

void set_constant_division(ConstantDivision d) { g_constant_division.store(d); }
ConstantDivision constant_division() { return g_constant_division.load(); }

}  // namespace qf

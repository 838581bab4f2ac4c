// The input every quantizer takes: a row-major [rows, cols] matrix of F32, F16 or BF16
// elements (rows = output features, cols = input features), usually inside a mapped file.
#pragma once

#include "core/dtype.h"

#include <cstdint>

namespace qf {

struct WeightRows {
  const void* data = nullptr;  // not owned
  DType dtype = DType::F32;    // F32, F16 or BF16
  int64_t rows = 0;
  int64_t cols = 0;
};

// Largest |x| over the matrix and the number of NaN/Inf elements (amax ignores them).
struct AmaxResult {
  float amax = 0.f;
  int64_t nonfinite = 0;
};

class ThreadPool;
// Throws qf::Error for a dtype other than F32/F16/BF16 or a malformed shape. SIMD, split into
// element ranges over the pool; the result does not depend on the thread count.
AmaxResult weight_amax(const WeightRows& w, ThreadPool& pool);
// Scalar reference of weight_amax, for tests.
AmaxResult weight_amax_reference(const WeightRows& w);

// Scalar-constant divisions (amax / 2688, amax / 448, amax / 7) follow ModelOpt on CUDA, where
// PyTorch computes `tensor / python_float` as `tensor * fl32(1 / c)` (specs modelopt-nvfp4 §0.3),
// so scales are bit-identical to checkpoints that ModelOpt writes on a GPU.
inline float div_by_constant(float amax, float reciprocal_of_constant) {
  return amax * reciprocal_of_constant;
}

}  // namespace qf

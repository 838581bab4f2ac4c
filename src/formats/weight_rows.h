// The input every quantizer takes: a row-major [rows, cols] matrix of F32, F16 or BF16
// elements (rows = output features, cols = input features), usually inside a mapped file.
#pragma once

#include "core/dtype.h"

#include <cstdint>
#include <memory>

namespace qf {

struct WeightRows {
  const void* data = nullptr;  // not owned (unless `owner` holds it)
  DType dtype = DType::F32;    // F32, F16 or BF16
  int64_t rows = 0;
  int64_t cols = 0;
  // Keeps `data` alive when it is a copy rather than a view (an expert weight stored
  // transposed, gpt-oss); copies of the rows share it.
  std::shared_ptr<const void> owner;
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

// Scalar-constant divisions of ModelOpt's scale math (amax / 2688, / 448, / 127, / 7, / 6).
// PyTorch on CUDA computes `tensor / python_float` as `tensor * fl32(1 / c)` (specs
// modelopt-nvfp4 §0.3), on the CPU as an exact division: the two builds of ModelOpt write scales
// one ulp apart about half the time. gpu (the default) reproduces GPU-made checkpoints, cpu
// CPU-made ones. Process-wide: `qforge quantize --scale-division` sets it once per run.
enum class ConstantDivision : uint8_t { gpu, cpu };
void set_constant_division(ConstantDivision d);
ConstantDivision constant_division();
inline float div_by_constant(float amax, float constant) {
  return constant_division() == ConstantDivision::gpu ? amax * (1.0f / constant) : amax / constant;
}

}  // namespace qf

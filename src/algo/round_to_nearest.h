// Round-to-nearest quantization with max calibration (ModelOpt's `max` algorithm for
// weights): scales come from the weights' own amax, codes are rounded to nearest.
#pragma once

#include "formats/quantized_tensor.h"
#include "formats/registry.h"
#include "formats/weight_rows.h"

namespace qf {

class ThreadPool;

struct RtnOptions {
  Format format = Format::nvfp4;
  int block = 0;                  // elements per scale; 0 = the format's default (int4 only)
  DType scale_dtype = DType::F32;  // dtype the FP8 / INT4 scales will be stored in
  ExportNumerics numerics = ExportNumerics::reference;  // the target's rounding (MXFP4)
};

// Quantizes `w`. For NVFP4, `tensor_amax` is the amax the tensor scale is computed from: the
// largest amax over the fused group the module belongs to (so siblings share weight_scale_2).
// Requires w.cols % block == 0.
QuantizedTensor quantize_rtn(const WeightRows& w, const RtnOptions& options, float tensor_amax,
                             ThreadPool& pool);

}  // namespace qf

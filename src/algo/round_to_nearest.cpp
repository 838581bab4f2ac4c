#include "algo/round_to_nearest.h"

#include "core/convert.h"
#include "core/error.h"
#include "formats/fp8.h"
#include "formats/int4.h"
#include "formats/int8.h"
#include "formats/mxfp4.h"
#include "formats/nvfp4.h"

namespace qf {

QuantizedTensor quantize_rtn(const WeightRows& w, const RtnOptions& options, float tensor_amax,
                             ThreadPool& pool) {
  QuantizedTensor q;
  q.format = options.format;
  q.rows = w.rows;
  q.cols = w.cols;
  q.block = options.block > 0 ? options.block : format_info(options.format).block;
  q.scale_dtype = options.scale_dtype;
  if (q.cols % q.block != 0)
    fail("input size {} is not a multiple of the {} block of {}", q.cols,
         format_info(q.format).name, q.block);
  const size_t n = size_t(w.rows * w.cols);
  switch (options.format) {
    case Format::nvfp4:
      q.codes.resize(n / 2);
      q.block_scales.resize(n / kNvfp4Block);
      q.global_scale = nvfp4_global_scale(tensor_amax);
      q.scale_dtype = DType::F8_E4M3;
      nvfp4_quantize(w, q.global_scale, q.codes.data(), q.block_scales.data(), pool);
      break;
    case Format::mxfp4:
      q.codes.resize(n / 2);
      q.block_scales.resize(n / kMxfp4Block);
      q.scale_dtype = DType::U8;
      mxfp4_quantize(w, q.codes.data(), q.block_scales.data(), pool);
      break;
    case Format::fp8:
      q.codes.resize(n);
      q.scales.resize(size_t(w.rows));
      fp8_channel_quantize(w, options.scale_dtype, q.codes.data(), q.scales.data(), pool);
      break;
    case Format::int4:
      q.codes.resize(n);
      q.scales.resize(n / size_t(q.block));
      int4_quantize(w, q.block, options.scale_dtype, reinterpret_cast<int8_t*>(q.codes.data()),
                    q.scales.data(), pool);
      break;
    case Format::int8: {
      // Per-channel INT8 (the SmoothQuant weight format without smoothing).
      std::vector<float> f(n);
      convert_to_f32(w.dtype, w.data, f.data(), n);
      q = int8_to_quantized(int8_channel_quantize(f.data(), w.rows, w.cols, options.scale_dtype, pool));
      break;
    }
  }
  return q;
}

}  // namespace qf

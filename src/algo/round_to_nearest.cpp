#include "algo/round_to_nearest.h"

#include "core/error.h"
#include "formats/registry.h"

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
  const FormatInfo& info = format_info(options.format);
  if (options.numerics == ExportNumerics::modelopt && info.quantize_modelopt)
    info.quantize_modelopt(w, tensor_amax, q, pool);
  else if (options.numerics == ExportNumerics::llm_compressor && info.quantize_llm_compressor)
    info.quantize_llm_compressor(w, tensor_amax, q, pool);
  else
    info.quantize(w, tensor_amax, q, pool);
  return q;
}

}  // namespace qf

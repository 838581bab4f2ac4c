// SmoothQuant scales, the smoothed weights and their INT8 per-channel quantization.
#include "algo/smoothquant.h"

#include "core/convert.h"
#include "core/error.h"
#include "formats/weight_rows.h"

#include <algorithm>
#include <cmath>

namespace qf {

SmoothQuantResult smoothquant(std::span<const WeightRows> members, const LinearStats& stats,
                              const SmoothQuantOptions& options, ThreadPool& pool) {
  if (members.empty()) fail("smoothquant: no Linear given");
  const int64_t in = members[0].cols;
  if (int64_t(stats.channel_amax.size()) != in)
    fail("smoothquant: statistics have {} channels, the weight {}", stats.channel_amax.size(), in);
  SmoothQuantResult result;
  std::vector<float> w_max(size_t(in), 0.f);
  for (const WeightRows& m : members) {
    if (m.cols != in) fail("smoothquant: members read the same input but have {} and {} columns", in, m.cols);
    std::vector<float> w(size_t(m.rows * in));
    convert_to_f32(m.dtype, m.data, w.data(), w.size());
    for (int64_t r = 0; r < m.rows; ++r)
      for (int64_t c = 0; c < in; ++c) w_max[size_t(c)] = std::max(w_max[size_t(c)], std::fabs(w[size_t(r * in + c)]));
    result.smoothed.push_back(std::move(w));
  }
  const float alpha = options.alpha;
  std::vector<float>& s = result.pre_quant_scale;
  s.resize(size_t(in));
  for (int64_t c = 0; c < in; ++c) {
    const float a = stats.channel_amax[size_t(c)];
    s[size_t(c)] = a <= 0x1p-31f ? 1.f
                                 : std::clamp(std::pow(w_max[size_t(c)], 1.f - alpha) / std::pow(a, alpha),
                                              1e-4f, 1e4f);
  }
  if (!is_quantizable_float(options.pre_quant_scale_dtype))
    fail("smoothquant: pre_quant_scale dtype {} is not F32, BF16 or F16",
         dtype_name(options.pre_quant_scale_dtype));
  round_through(options.pre_quant_scale_dtype, s.data(), s.size());
  for (int64_t c = 0; c < in; ++c)
    result.input_amax = std::max(result.input_amax, stats.channel_amax[size_t(c)] * s[size_t(c)]);
  result.input_scale = div_by_constant(result.input_amax, 127.0f);
  for (size_t m = 0; m < members.size(); ++m) {
    std::vector<float>& w = result.smoothed[m];
    for (int64_t r = 0; r < members[m].rows; ++r)
      for (int64_t c = 0; c < in; ++c) w[size_t(r * in + c)] /= s[size_t(c)];
    result.tensors.push_back(int8_channel_quantize(w.data(), members[m].rows, in, options.scale_dtype, pool));
  }
  return result;
}

}  // namespace qf

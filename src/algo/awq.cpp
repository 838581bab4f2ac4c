// AWQ scale search (awq_lite), clipping search (awq_clip) and the helpers that apply the scales.
#include "algo/awq.h"

#include "core/convert.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "formats/fake_quant.h"
#include "formats/int4.h"
#include "formats/mxfp4.h"
#include "formats/nvfp4.h"
#include "kernels/linear.h"

#include <algorithm>
#include <cfloat>
#include <cmath>

namespace qf {

namespace {

// Elements per scale along a row (per-row formats: the whole row).
int64_t unit_span(const RtnOptions& f, int64_t cols) { return scale_span(f.format, f.block, cols); }

float max_abs(const std::vector<float>& x) {
  float a = 0.f;
  for (float v : x) a = std::max(a, std::fabs(v));
  return a;
}

struct Layer {
  std::vector<std::vector<float>> w;  // members, float32 [rows_i, in]
  std::vector<int64_t> rows;
  int64_t in = 0;
  int64_t total_rows = 0;
};

// mean over samples and all outputs of (x (deq_i / s - W_i)^T)^2, summed over members.
double output_loss(const Layer& layer, const std::vector<std::vector<float>>& deq,
                   const std::vector<float>& s, const float* samples, int64_t n_samples,
                   ThreadPool& pool) {
  double total = 0.0;
  std::vector<float> e, y;
  for (size_t m = 0; m < layer.w.size(); ++m) {
    const int64_t rows = layer.rows[m], in = layer.in;
    e.resize(size_t(rows * in));
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < in; ++c) {
        const size_t i = size_t(r * in + c);
        e[i] = deq[m][i] / s[size_t(c)] - layer.w[m][i];
      }
    LinearWeight lw;
    lw.format = WeightFormat::f32;
    lw.rows = rows;
    lw.cols = in;
    lw.data = e.data();
    y.resize(size_t(n_samples * rows));
    linear_forward(lw, samples, n_samples, y.data(), &pool, KernelMode::exact);
    for (float v : y) total += double(v) * double(v);
  }
  return total / double(n_samples * layer.total_rows);
}

// Quantizes (max calibration, or nvfp4 with the given global amax) and dequantizes.
QuantizedTensor quantize_max(const std::vector<float>& w, int64_t rows, int64_t in,
                             const RtnOptions& f, float group_amax, ThreadPool& pool) {
  return quantize_rtn(WeightRows{w.data(), DType::F32, rows, in}, f, group_amax, pool);
}

std::vector<float> dequantized(const QuantizedTensor& q) {
  std::vector<float> out(size_t(q.rows * q.cols));
  dequantize(q, out.data());
  return out;
}

std::vector<float> clip_ratios(const AwqOptions& o) {
  if (!(o.clip_step > 0.f) || !(o.min_clip_ratio > 0.f) || !(o.min_clip_ratio <= 1.f))
    fail("awq: bad clip grid min {} step {}", o.min_clip_ratio, o.clip_step);
  std::vector<float> r;
  for (int k = 0;; ++k) {
    const float v = o.min_clip_ratio + float(k) * o.clip_step;
    if (v >= 1.f - 1e-6f) break;
    r.push_back(v);
  }
  r.push_back(1.f);
  return r;
}

}  // namespace

AwqResult quantize_awq(std::span<const WeightRows> members, const LinearStats& stats,
                       const AwqOptions& options, ThreadPool& pool) {
  if (members.empty()) fail("awq: no Linear given");
  Layer layer;
  layer.in = members[0].cols;
  const int64_t in = layer.in;
  for (const WeightRows& m : members) {
    if (m.cols != in) fail("awq: members read the same input but have {} and {} columns", in, m.cols);
    std::vector<float> w(size_t(m.rows * m.cols));
    convert_to_f32(m.dtype, m.data, w.data(), w.size());
    layer.w.push_back(std::move(w));
    layer.rows.push_back(m.rows);
    layer.total_rows += m.rows;
  }
  if (int64_t(stats.channel_mean_abs.size()) != in || int64_t(stats.channel_amax.size()) != in)
    fail("awq: statistics have {} channels, the weight {}", stats.channel_mean_abs.size(), in);
  const int64_t n_samples = stats.sample_count(in);
  if (n_samples < 1 || int64_t(stats.samples.size()) != n_samples * in)
    fail("awq: needs sample input rows of {} channels", in);
  if (!(options.alpha_step > 0.f)) fail("awq: alpha step {} is not positive", options.alpha_step);
  const RtnOptions& fmt = options.format;
  const int64_t span = unit_span(fmt, in);
  if (in % span != 0) fail("awq: input size {} is not a multiple of the block {}", in, span);

  // w_scale: mean over rows of |W| normalised by its quantization block's amax.
  std::vector<double> wsum(size_t(in), 0.0);
  for (size_t m = 0; m < layer.w.size(); ++m)
    for (int64_t r = 0; r < layer.rows[m]; ++r) {
      const float* wr = layer.w[m].data() + r * in;
      for (int64_t j = 0; j < in; j += span) {
        float bamax = 0.f;
        for (int64_t k = j; k < j + span; ++k) bamax = std::max(bamax, std::fabs(wr[k]));
        for (int64_t k = j; k < j + span; ++k) wsum[size_t(k)] += double(std::fabs(wr[k]) / (bamax + FLT_MIN));
      }
    }
  std::vector<float> w_scale(static_cast<size_t>(in));
  for (int64_t c = 0; c < in; ++c) w_scale[size_t(c)] = float(wsum[size_t(c)] / double(layer.total_rows));
  const std::vector<float>& act = stats.channel_mean_abs;

  AwqResult result;
  std::vector<float> best_s(static_cast<size_t>(in), 1.f), s(static_cast<size_t>(in));
  std::vector<std::vector<float>> scaled(layer.w.size()), deq(layer.w.size());
  double best_loss = 0.0;
  const int steps = int(std::lround(1.0 / double(options.alpha_step)));
  for (int k = 0; k <= steps; ++k) {
    const float alpha = std::min(1.f, float(k) * options.alpha_step);
    float smax = 0.f, smin = 0.f;
    for (int64_t c = 0; c < in; ++c) {
      const float v = std::pow(act[size_t(c)], alpha) / (std::pow(w_scale[size_t(c)], 1.f - alpha) + FLT_MIN);
      s[size_t(c)] = std::clamp(v, 1e-4f, 1e4f);
      smax = c == 0 ? s[0] : std::max(smax, s[size_t(c)]);
      smin = c == 0 ? s[0] : std::min(smin, s[size_t(c)]);
    }
    const float norm = std::sqrt(smax * smin);
    for (float& v : s) v /= norm;
    float group_amax = 0.f;
    for (size_t m = 0; m < layer.w.size(); ++m) {
      scaled[m].resize(layer.w[m].size());
      for (int64_t r = 0; r < layer.rows[m]; ++r)
        for (int64_t c = 0; c < in; ++c)
          scaled[m][size_t(r * in + c)] = layer.w[m][size_t(r * in + c)] * s[size_t(c)];
      group_amax = std::max(group_amax, max_abs(scaled[m]));
    }
    for (size_t m = 0; m < layer.w.size(); ++m)
      deq[m] = dequantized(quantize_max(scaled[m], layer.rows[m], in, fmt, group_amax, pool));
    const double loss = output_loss(layer, deq, s, stats.samples.data(), n_samples, pool);
    result.alpha_losses.push_back(loss);
    if (k == 0 || loss < best_loss) best_loss = loss, best_s = s, result.alpha = alpha;
  }

  // Apply the best scales.
  result.pre_quant_scale.resize(size_t(in));
  for (int64_t c = 0; c < in; ++c) result.pre_quant_scale[size_t(c)] = 1.f / best_s[size_t(c)];
  if (!is_quantizable_float(options.pre_quant_scale_dtype))
    fail("awq: pre_quant_scale dtype {} is not F32, BF16 or F16",
         dtype_name(options.pre_quant_scale_dtype));
  if (options.pre_quant_scale_dtype != DType::F32) {
    round_through(options.pre_quant_scale_dtype, result.pre_quant_scale.data(), size_t(in));
    for (int64_t c = 0; c < in; ++c) best_s[size_t(c)] = 1.f / result.pre_quant_scale[size_t(c)];
  }
  for (int64_t c = 0; c < in; ++c)
    result.input_amax = std::max(result.input_amax, stats.channel_amax[size_t(c)] * result.pre_quant_scale[size_t(c)]);
  float group_amax = 0.f;
  for (size_t m = 0; m < layer.w.size(); ++m) {
    scaled[m].resize(layer.w[m].size());
    for (int64_t r = 0; r < layer.rows[m]; ++r)
      for (int64_t c = 0; c < in; ++c)
        scaled[m][size_t(r * in + c)] = layer.w[m][size_t(r * in + c)] * best_s[size_t(c)];
    group_amax = std::max(group_amax, max_abs(scaled[m]));
  }
  result.group_amax = group_amax;

  if (!options.clip) {
    for (size_t m = 0; m < layer.w.size(); ++m)
      result.tensors.push_back(quantize_max(scaled[m], layer.rows[m], in, fmt, group_amax, pool));
  } else if (format_info(fmt.format).has_tensor_scale()) {
    // Only the per-tensor global amax is clipped (dynamic block scales follow it).
    double best_clip_loss = 0.0;
    const std::vector<float> ratios = clip_ratios(options);
    for (size_t k = 0; k < ratios.size(); ++k) {
      std::vector<QuantizedTensor> qs;
      for (size_t m = 0; m < layer.w.size(); ++m) {
        qs.push_back(quantize_max(scaled[m], layer.rows[m], in, fmt, group_amax * ratios[k], pool));
        deq[m] = dequantized(qs.back());
      }
      const double loss = output_loss(layer, deq, best_s, stats.samples.data(), n_samples, pool);
      if (k == 0 || loss < best_clip_loss) {
        best_clip_loss = loss;
        result.clip_ratio = ratios[k];
        result.tensors = std::move(qs);
      }
    }
    result.group_amax = group_amax * result.clip_ratio;
  } else {
    // Per (row, block) clipping on the scaled inputs' partial products.
    const int64_t t_count = std::min(n_samples, std::max<int64_t>(1, options.clip_max_samples));
    std::vector<float> xs(size_t(t_count * in));
    for (int64_t t = 0; t < t_count; ++t)
      for (int64_t c = 0; c < in; ++c)
        xs[size_t(t * in + c)] = stats.samples[size_t(t * in + c)] * result.pre_quant_scale[size_t(c)];
    const std::vector<float> ratios = clip_ratios(options);
    const int64_t units = in / span;
    for (size_t m = 0; m < layer.w.size(); ++m) {
      const int64_t rows = layer.rows[m];
      std::vector<float> amax(size_t(rows * units));
      pool.parallel_for(rows, [&](int64_t r) {
        std::vector<float> q(static_cast<size_t>(span));
        for (int64_t j = 0; j < units; ++j) {
          const float* wu = scaled[m].data() + r * in + j * span;
          float a0 = 0.f;
          for (int64_t k = 0; k < span; ++k) a0 = std::max(a0, std::fabs(wu[k]));
          double best = 0.0;
          for (size_t k = 0; k < ratios.size(); ++k) {
            fake_quantize_unit(fmt.format, wu, span, a0 * ratios[k], fmt.scale_dtype, q.data());
            double loss = 0.0;
            for (int64_t t = 0; t < t_count; ++t) {
              const float* xt = xs.data() + t * in + j * span;
              double acc = 0.0;
              for (int64_t c = 0; c < span; ++c) acc += double(xt[c]) * double(q[size_t(c)] - wu[c]);
              loss += acc * acc;
            }
            if (k == 0 || loss < best) best = loss, amax[size_t(r * units + j)] = a0 * ratios[k];
          }
        }
      });
      QuantizedTensor q = scales_from_amax(fmt.format, rows, in, int(span),
                                           amax.data(), 0.f, fmt.scale_dtype);
      encode_with_scales(q, scaled[m].data(), pool);
      result.tensors.push_back(std::move(q));
    }
  }
  result.scaled_weights = std::move(scaled);
  return result;
}

LinearStats scale_linear_stats(const LinearStats& stats, std::span<const float> pqs) {
  const int64_t in = int64_t(pqs.size());
  LinearStats out;
  out.tokens = stats.tokens;
  if (!stats.channel_amax.empty() && int64_t(stats.channel_amax.size()) != in)
    fail("scale stats: {} channels, {} scales", stats.channel_amax.size(), in);
  out.channel_amax.resize(stats.channel_amax.size());
  for (size_t c = 0; c < out.channel_amax.size(); ++c) {
    out.channel_amax[c] = stats.channel_amax[c] * pqs[c];
    out.input_amax = std::max(out.input_amax, out.channel_amax[c]);
  }
  out.channel_mean_abs.resize(stats.channel_mean_abs.size());
  for (size_t c = 0; c < out.channel_mean_abs.size(); ++c) out.channel_mean_abs[c] = stats.channel_mean_abs[c] * pqs[c];
  if (!stats.xtx.empty()) {
    if (int64_t(stats.xtx.size()) != in * in) fail("scale stats: XtX is not {} x {}", in, in);
    out.xtx.resize(stats.xtx.size());
    for (int64_t i = 0; i < in; ++i)
      for (int64_t j = 0; j < in; ++j)
        out.xtx[size_t(i * in + j)] = stats.xtx[size_t(i * in + j)] * double(pqs[size_t(i)]) * double(pqs[size_t(j)]);
  }
  out.samples = stats.samples;
  if (in > 0)
    for (size_t i = 0; i < out.samples.size(); ++i) out.samples[i] *= pqs[i % size_t(in)];
  return out;
}

void fold_pre_quant_scale_into_norm(float* norm_weight, float* norm_bias, std::span<const float> pqs,
                                    bool one_plus) {
  for (size_t c = 0; c < pqs.size(); ++c) {
    norm_weight[c] = one_plus ? (norm_weight[c] + 1.f) * pqs[c] - 1.f : norm_weight[c] * pqs[c];
    if (norm_bias) norm_bias[c] *= pqs[c];
  }
}

}  // namespace qf

// Fake quantization with straight-through, LSQ and SignRound gradients (see the header). The
// forward calls the format row's encoder once per scale, as FrozenQuantizer::encode_row does.
#include "train/fake_quant_ste.h"

#include "core/error.h"

#include <algorithm>

namespace qf {

namespace {

// The code value the format's encoder gives for the already-divided y (a unit scale: y / 1 is
// y, so the code is the one the real call, which divides W + V d by d, picks).
float code_value(const FormatInfo& row, float y) {
  uint8_t code = 0;
  float q = 0.f;
  row.encode_frozen(&y, 1, 1.f, 1.f, 1.f, &code, &q);
  return q;
}

float clamp_offset(float v) { return std::clamp(v, -0.5f, 0.5f); }

}  // namespace

FakeQuantSte::FakeQuantSte(const QuantizedTensor& q)
    : row_(&format_info(q.format)), rows_(q.rows), cols_(q.cols) {
  span_ = scale_span(q.format, q.block, q.cols);
  if (span_ <= 0 || q.cols % span_ != 0)
    fail("fake quant ste: bad block {} for {} columns", span_, q.cols);
  scales_per_row_ = q.cols / span_;
  const size_t n = size_t(q.rows * scales_per_row_);
  if (row_->scale_code_dtype != DType::F32 ? q.block_scales.size() != n : q.scales.size() != n)
    fail("fake quant ste: {} needs {} scales for [{}, {}]", row_->name, n, q.rows, q.cols);
  divisor_.resize(n);
  value_.resize(n);
  for (size_t j = 0; j < n; ++j) divisor_[j] = row_->frozen_divisor(q, j, &value_[j]);
  g_ = row_->has_tensor_scale() ? q.global_scale : 1.f;
  scales_ = q;
  scales_.codes.clear();
  hi_ = code_value(*row_, 1e30f);
  lo_ = code_value(*row_, -1e30f);
}

QuantizedTensor FakeQuantSte::quantize(const float* w, const float* v) const {
  // Codes from the format's encoder; the caller takes values from the dequantizer: the
  // encoder's own dequantized output can differ from the dequantizer in the sign of zero (INT4:
  // nearbyint(-0.3) * d is -0, code 0 decodes to +0), and the forward is held to the exported
  // bytes.
  QuantizedTensor q = scales_;
  const size_t n = size_t(rows_ * cols_);
  std::vector<uint8_t> codes(n);
  std::vector<float> x(static_cast<size_t>(span_)), scratch(static_cast<size_t>(span_));
  for (int64_t j = 0; j < scale_count(); ++j) {
    const int64_t o = j * span_;  // scales run along rows, so unit j starts at element j * span
    const float d = divisor_[size_t(j)];
    const float* in = w + o;
    if (v) {
      for (int64_t k = 0; k < span_; ++k) x[size_t(k)] = w[o + k] + clamp_offset(v[o + k]) * d;
      in = x.data();
    }
    row_->encode_frozen(in, span_, d, value_[size_t(j)], g_, codes.data() + o, scratch.data());
  }
  if (row_->packed_pairs) {
    q.codes.resize(n / 2);
    for (size_t i = 0; i < n; i += 2)
      q.codes[i / 2] = uint8_t((codes[i] & 0xF) | ((codes[i + 1] & 0xF) << 4));
  } else {
    q.codes = std::move(codes);
  }
  return q;
}

void FakeQuantSte::forward(const float* w, const float* v, float* w_hat) const {
  const QuantizedTensor q = quantize(w, v);
  row_->dequantize_rows(q, 0, rows_, w_hat);
}

void FakeQuantSte::backward(const float* w, const float* v, const float* g,
                            FakeQuantGrads& grads) const {
  const size_t n = size_t(rows_ * cols_);
  grads.w.assign(n, 0.f);
  grads.scale.assign(divisor_.size(), 0.f);
  grads.v.assign(v ? n : 0, 0.f);
  double tensor = 0;
  for (int64_t j = 0; j < scale_count(); ++j) {
    const float d = divisor_[size_t(j)];
    double gs = 0;
    for (int64_t k = 0; k < span_; ++k) {
      const size_t i = size_t(j * span_ + k);
      const float vi = v ? clamp_offset(v[i]) : 0.f;
      // What the encoder divides (forward: (W + V d) / d), so clipping is judged on its input.
      const float y = (v ? w[i] + vi * d : w[i]) / d;
      const float q = code_value(*row_, y);
      if (y >= lo_ && y <= hi_) {
        grads.w[i] = g[i];
        gs += double(g[i]) * (double(q) - double(w[i]) / double(d));
        if (v) grads.v[i] = g[i] * d;
      } else {
        gs += double(g[i]) * double(q);
      }
    }
    grads.scale[size_t(j)] = float(gs);
    tensor += gs * double(value_[size_t(j)]);
  }
  grads.tensor_scale = row_->has_tensor_scale() ? float(tensor) : 0.f;
}

}  // namespace qf

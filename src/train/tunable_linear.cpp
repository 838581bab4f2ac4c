// SignRound offsets over a frozen-scale fake quantizer; see the header.
#include "train/tunable_linear.h"

#include "core/error.h"
#include "formats/fake_quant.h"

#include <algorithm>
#include <cstring>

namespace qf {

TunableLinear::TunableLinear(std::vector<float> w, const QuantizedTensor& init, TuneParams params)
    : base_(std::move(w)), bound_(params == TuneParams::rounding ? 0.5f : 1e6f), ste_(init) {
  const size_t n = size_t(ste_.rows() * ste_.cols());
  if (base_.size() != n)
    fail("tunable linear: {} weights for a [{}, {}] tensor", base_.size(), ste_.rows(),
         ste_.cols());
  // Where the init's code is not round-to-nearest under its own scales, start from its value.
  std::vector<float> rtn(n), ref(n);
  ste_.forward(base_.data(), nullptr, rtn.data());
  dequantize(init, ref.data());
  for (size_t i = 0; i < n; ++i)
    if (std::memcmp(&rtn[i], &ref[i], sizeof(float)) != 0) base_[i] = ref[i];
  v_.assign(n, 0.f);
  adam_ = AdamState(n);
}

void TunableLinear::shifted(std::vector<float>& out) const {
  // W + V d in float, as FakeQuantSte computes it from (W, V) (so rounding mode gives the same
  // bits as passing V to it), without its ±0.5 clamp.
  const std::vector<float>& d = ste_.divisors();
  const int64_t span = cols() / (int64_t(d.size()) / rows());
  out.resize(base_.size());
  for (size_t i = 0; i < base_.size(); ++i) out[i] = base_[i] + v_[i] * d[i / size_t(span)];
}

void TunableLinear::forward(float* w_hat) const {
  std::vector<float> x;
  shifted(x);
  ste_.forward(x.data(), nullptr, w_hat);
}

void TunableLinear::step(const float* g, TuneOptimizer optimizer, float lr) {
  std::vector<float> x;
  shifted(x);
  ste_.backward(x.data(), nullptr, g, grads_);
  // dL/dV = dL/d(W + V d) · d: the straight-through gradient, 0 where the encoder clips.
  const std::vector<float>& d = ste_.divisors();
  const size_t span = size_t(cols() / (int64_t(d.size()) / rows()));
  std::vector<float>& gv = grads_.w;
  for (size_t i = 0; i < gv.size(); ++i) gv[i] *= d[i / span];
  if (optimizer == TuneOptimizer::adam) {
    AdamOptions o;
    o.lr = lr;
    adam_step(o, adam_, v_.data(), gv.data());
  } else {
    for (size_t i = 0; i < v_.size(); ++i) v_[i] -= gv[i] > 0.f ? lr : gv[i] < 0.f ? -lr : 0.f;
  }
  for (float& v : v_) v = std::clamp(v, -bound_, bound_);
}

void TunableLinear::reset() {
  std::fill(v_.begin(), v_.end(), 0.f);
  adam_ = AdamState(v_.size());
}

QuantizedTensor TunableLinear::export_tensor() const {
  std::vector<float> x;
  shifted(x);
  return ste_.quantize(x.data(), nullptr);
}

}  // namespace qf

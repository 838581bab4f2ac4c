// SignRound offsets over a frozen-scale fake quantizer; see the header.
#include "train/tunable_linear.h"

#include "core/error.h"
#include "formats/fake_quant.h"

#include <algorithm>
#include <cstring>

namespace qf {

TunableLinear::TunableLinear(std::vector<float> w, const QuantizedTensor& init)
    : base_(std::move(w)), ste_(init) {
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

void TunableLinear::forward(float* w_hat) const { ste_.forward(base_.data(), v_.data(), w_hat); }

void TunableLinear::step(const float* g, TuneOptimizer optimizer, float lr) {
  ste_.backward(base_.data(), v_.data(), g, grads_);
  if (optimizer == TuneOptimizer::adam) {
    AdamOptions o;
    o.lr = lr;
    adam_step(o, adam_, v_.data(), grads_.v.data());
  } else {
    for (size_t i = 0; i < v_.size(); ++i) {
      const float gv = grads_.v[i];
      v_[i] -= gv > 0.f ? lr : gv < 0.f ? -lr : 0.f;
    }
  }
  for (float& v : v_) v = std::clamp(v, -0.5f, 0.5f);
}

void TunableLinear::reset() {
  std::fill(v_.begin(), v_.end(), 0.f);
  adam_ = AdamState(v_.size());
}

QuantizedTensor TunableLinear::export_tensor() const {
  return ste_.quantize(base_.data(), v_.data());
}

}  // namespace qf

// Sampling and the generation loop.
#include "engine/generate.h"

#include "core/error.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace qf {

int32_t argmax(const float* x, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i)
    if (x[i] > x[best]) best = i;
  return int32_t(best);
}

Sampler::Sampler(const SamplingOptions& opt)
    : opt_(opt), state_(opt.seed * 0x9E3779B97F4A7C15ull + 0x2545F4914F6CDD1Dull) {
  if (state_ == 0) state_ = 1;
}

float Sampler::next_uniform() {
  state_ ^= state_ >> 12;
  state_ ^= state_ << 25;
  state_ ^= state_ >> 27;
  return float((state_ * 0x2545F4914F6CDD1Dull) >> 40) / 16777216.0f;
}

int32_t Sampler::sample(float* logits, int64_t n) {
  if (opt_.temperature <= 0.f) return argmax(logits, n);
  const float mx = *std::max_element(logits, logits + n);
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    logits[i] = std::exp((logits[i] - mx) / opt_.temperature);
    sum += logits[i];
  }
  std::vector<int32_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  int64_t keep = n;
  if (opt_.top_p < 1.f) {
    // Stable sort: equal probabilities keep id order, so the result is reproducible.
    std::stable_sort(order.begin(), order.end(),
                     [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
    double cum = 0;
    for (keep = 0; keep < n;) {
      cum += logits[order[size_t(keep)]] / sum;
      ++keep;
      if (cum >= opt_.top_p) break;
    }
  }
  double total = 0;
  for (int64_t i = 0; i < keep; ++i) total += logits[order[size_t(i)]];
  const double r = double(next_uniform()) * total;
  double cum = 0;
  for (int64_t i = 0; i < keep; ++i) {
    cum += logits[order[size_t(i)]];
    if (r < cum) return order[size_t(i)];
  }
  return order[size_t(keep - 1)];
}

std::vector<int32_t> generate(Model& model, std::span<const int32_t> prompt, int64_t max_new,
                              const SamplingOptions& opt, int32_t eos,
                              const std::function<void(int32_t)>& on_token) {
  if (prompt.empty()) fail("generate: the prompt has no tokens");
  if (int64_t(prompt.size()) > model.max_seq())
    fail("prompt of {} tokens exceeds the model's context of {}", prompt.size(), model.max_seq());
  Sampler sampler(opt);
  std::vector<float> logits(static_cast<size_t>(model.vocab_size()));
  std::vector<int32_t> out;
  // The whole context allocated once (no cache copies mid-generation); max_new beyond the
  // model's context is capped first, so the sum cannot overflow.
  model.reserve_context(1, int64_t(prompt.size()) + std::min(max_new, model.max_seq()));
  model.forward(prompt, 0, logits.data(), false);
  int64_t pos = int64_t(prompt.size());
  for (int64_t i = 0; i < max_new; ++i) {
    const int32_t id = sampler.sample(logits.data(), model.vocab_size());
    out.push_back(id);
    if (on_token) on_token(id);
    if (id == eos || pos >= model.max_seq()) break;
    model.forward(std::span<const int32_t>(&id, 1), pos, logits.data(), false);
    ++pos;
  }
  return out;
}

}  // namespace qf

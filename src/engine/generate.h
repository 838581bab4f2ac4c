// Token sampling (greedy, temperature, nucleus) and the generation loop: prefill the prompt in
// one window, then decode one token at a time.
#pragma once

#include "engine/model.h"

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

namespace qf {

struct SamplingOptions {
  float temperature = 0.f;  // 0: greedy (argmax, lowest id on ties)
  float top_p = 1.f;        // nucleus: smallest set of tokens whose probability reaches top_p
  uint64_t seed = 0;        // same seed, same model, same tokens: same output on every machine
};

class Sampler {
 public:
  explicit Sampler(const SamplingOptions& opt);
  // Picks a token from logits[0, n) (modified in place when sampling).
  int32_t sample(float* logits, int64_t n);

 private:
  float next_uniform();  // [0, 1), xorshift64*: portable and reproducible
  SamplingOptions opt_;
  uint64_t state_;
};

int32_t argmax(const float* x, int64_t n);

// Runs `prompt` (non-empty) through the model from position 0 and generates up to `max_new`
// tokens, stopping after `eos` (if >= 0) or at the model's context limit. Calls on_token with
// each new id as it is chosen. Returns the new ids.
std::vector<int32_t> generate(Model& model, std::span<const int32_t> prompt, int64_t max_new,
                              const SamplingOptions& opt, int32_t eos,
                              const std::function<void(int32_t)>& on_token);

}  // namespace qf

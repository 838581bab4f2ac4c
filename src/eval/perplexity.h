// Perplexity and KL divergence of models over a token stream, with the windowing of the
// fixtures' reference protocol: windows of `ctx` input tokens overlapping by one (window k feeds
// ids[k*ctx .. k*ctx + ctx - 1] and scores ids[k*ctx + 1 .. k*ctx + ctx]), each evaluated on its
// own from position 0. The caller puts BOS at the start of the stream.
#pragma once

#include "engine/model.h"

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

namespace qf {

struct PerplexityResult {
  double ppl = 0;       // exp(mean negative log-likelihood)
  double nll_mean = 0;  // nats per token
  int64_t tokens = 0;   // scored tokens
};

struct KlResult {
  double kl_mean = 0;  // mean over scored tokens of KL(base || quant), nats
  double kl_p99 = 0;   // 99th percentile (nearest rank) of the per-token KL
  double top1 = 0;     // fraction of tokens where both models' argmax agree
  double ppl_base = 0, ppl_quant = 0;
  int64_t tokens = 0;
};

// Called after each window with (scored tokens so far, total).
using EvalProgress = std::function<void(int64_t, int64_t)>;

// Throws qf::Error if ctx < 1, ctx exceeds the model's context, fewer than 2 ids are given, or
// an id is outside the model's vocabulary.
PerplexityResult perplexity(Model& model, std::span<const int32_t> ids, int64_t ctx,
                            const EvalProgress& progress = {});

// llama.cpp's `llama-perplexity` protocol (tools/perplexity/perplexity.cpp, no stride): the stream
// (BOS first, as llama.cpp tokenizes with add_bos) is cut into ids.size() / ctx chunks of ctx
// tokens, each evaluated from position 0 with its first token replaced by `bos`, and only the
// second half scored: positions ctx/2 .. ctx-2 predict the next token. So that `eval ppl` and
// llama-perplexity can be compared on the same file. Throws qf::Error as perplexity(), and when
// the stream holds fewer than 2 * ctx tokens (llama-perplexity's own limit).
PerplexityResult perplexity_llama_cpp(Model& model, std::span<const int32_t> ids, int64_t ctx,
                                      int32_t bos, const EvalProgress& progress = {});

// Both models see the same windows. Throws qf::Error as perplexity(), and if the vocabularies
// differ. KL of a model against itself is exactly 0 with top1 1.
KlResult kl_divergence(Model& base, Model& quant, std::span<const int32_t> ids, int64_t ctx,
                       const EvalProgress& progress = {});
// The same for several variants against one base, whose logits are computed once per window
// (result k is quants[k]'s, identical to the two-model call). progress counts windows of the
// base, after all variants ran on them.
std::vector<KlResult> kl_divergence(Model& base, std::span<Model* const> quants,
                                    std::span<const int32_t> ids, int64_t ctx,
                                    const EvalProgress& progress = {});

}  // namespace qf

// Perplexity and KL divergence over overlapping windows. Log-softmax in double precision so that
// the sums over thousands of tokens do not drift.
#include "eval/perplexity.h"

#include "core/error.h"
#include "engine/generate.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace qf {
namespace {

void check(const Model& m, std::span<const int32_t> ids, int64_t ctx) {
  if (ctx < 1) fail("--ctx must be at least 1 (got {})", ctx);
  if (ctx > m.max_seq())
    fail("context {} exceeds the model's limit of {} tokens (max_position_embeddings)", ctx,
         m.max_seq());
  if (ids.size() < 2) fail("the text has fewer than 2 tokens; nothing to score");
}

// log-softmax of logits[0, n) into out (double).
void log_softmax(const float* logits, int64_t n, std::vector<double>& out) {
  out.resize(size_t(n));
  double mx = logits[0];
  for (int64_t i = 1; i < n; ++i) mx = std::max(mx, double(logits[i]));
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += std::exp(double(logits[i]) - mx);
  const double lse = mx + std::log(sum);
  for (int64_t i = 0; i < n; ++i) out[size_t(i)] = double(logits[i]) - lse;
}

// Calls fn(window start, window length) for each window.
template <class Fn>
void for_windows(int64_t n_ids, int64_t ctx, Fn&& fn) {
  for (int64_t s = 0; s + 1 < n_ids; s += ctx) fn(s, std::min(ctx, n_ids - 1 - s));
}

}  // namespace

namespace {

PerplexityResult from_nll(double nll, int64_t count) {
  PerplexityResult r;
  r.tokens = count;
  r.nll_mean = nll / double(count);
  r.ppl = std::exp(r.nll_mean);
  return r;
}

}  // namespace

PerplexityResult perplexity(Model& model, std::span<const int32_t> ids, int64_t ctx,
                            const EvalProgress& progress) {
  check(model, ids, ctx);
  const int64_t V = model.vocab_size();
  const int64_t total = int64_t(ids.size()) - 1;
  std::vector<float> logits(size_t(std::min(ctx, total) * V));
  std::vector<double> lp;
  double nll = 0;
  int64_t count = 0;
  for_windows(int64_t(ids.size()), ctx, [&](int64_t s, int64_t n) {
    model.forward(ids.subspan(size_t(s), size_t(n)), 0, logits.data(), true);
    for (int64_t t = 0; t < n; ++t) {
      log_softmax(logits.data() + t * V, V, lp);
      nll -= lp[size_t(ids[size_t(s + t + 1)])];
    }
    count += n;
    if (progress) progress(count, total);
  });
  return from_nll(nll, count);
}

PerplexityResult perplexity_llama_cpp(Model& model, std::span<const int32_t> ids, int64_t ctx,
                                      int32_t bos, const EvalProgress& progress) {
  check(model, ids, ctx);
  if (int64_t(ids.size()) < 2 * ctx)
    fail("the llama.cpp protocol needs at least {} tokens for --ctx {} (llama-perplexity's "
         "limit); the text gives {}", 2 * ctx, ctx, ids.size());
  const int64_t V = model.vocab_size(), chunks = int64_t(ids.size()) / ctx, first = ctx / 2;
  std::vector<int32_t> chunk(static_cast<size_t>(ctx));
  std::vector<float> logits(size_t(ctx * V));
  std::vector<double> lp;
  double nll = 0;
  int64_t count = 0;
  const int64_t total = chunks * (ctx - 1 - first);
  for (int64_t c = 0; c < chunks; ++c) {
    std::copy_n(ids.begin() + c * ctx, ctx, chunk.begin());
    chunk[0] = bos;
    model.forward(chunk, 0, logits.data(), true);
    for (int64_t p = first; p < ctx - 1; ++p) {
      log_softmax(logits.data() + p * V, V, lp);
      nll -= lp[size_t(chunk[size_t(p + 1)])];
      ++count;
    }
    if (progress) progress(count, total);
  }
  return from_nll(nll, count);
}

std::vector<KlResult> kl_divergence(Model& base, std::span<Model* const> quants,
                                    std::span<const int32_t> ids, int64_t ctx,
                                    const EvalProgress& progress) {
  check(base, ids, ctx);
  for (Model* q : quants) {
    check(*q, ids, ctx);
    if (base.vocab_size() != q->vocab_size())
      fail("the models' vocabularies differ ({} vs {} tokens)", base.vocab_size(),
           q->vocab_size());
  }
  const int64_t V = base.vocab_size();
  const int64_t total = int64_t(ids.size()) - 1;
  const size_t nq = quants.size();
  std::vector<float> lb(size_t(std::min(ctx, total) * V)), lq(lb.size());
  std::vector<double> pb, pq;
  std::vector<std::vector<double>> kls(nq);
  std::vector<double> nll_q(nq, 0.0);
  std::vector<int64_t> agree(nq, 0);
  std::vector<int32_t> top_b;
  double nll_b = 0;
  int64_t scored = 0;
  for_windows(int64_t(ids.size()), ctx, [&](int64_t s, int64_t n) {
    const auto window = ids.subspan(size_t(s), size_t(n));
    // The base's logits of a window are kept while each variant runs on it, so the base model
    // runs once whatever the number of variants (its log-softmax is recomputed per variant:
    // cheap next to a forward pass, and no V-sized double array per position is held).
    base.forward(window, 0, lb.data(), true);
    top_b.resize(size_t(n));
    for (int64_t t = 0; t < n; ++t) {
      log_softmax(lb.data() + t * V, V, pb);
      top_b[size_t(t)] = argmax(lb.data() + t * V, V);
      nll_b -= pb[size_t(ids[size_t(s + t + 1)])];
    }
    for (size_t k = 0; k < nq; ++k) {
      quants[k]->forward(window, 0, lq.data(), true);
      for (int64_t t = 0; t < n; ++t) {
        const float* q = lq.data() + t * V;
        log_softmax(lb.data() + t * V, V, pb);
        log_softmax(q, V, pq);
        double kl = 0;
        for (int64_t i = 0; i < V; ++i)
          if (pb[size_t(i)] > -745) kl += std::exp(pb[size_t(i)]) * (pb[size_t(i)] - pq[size_t(i)]);
        kls[k].push_back(std::max(0.0, kl));
        nll_q[k] -= pq[size_t(ids[size_t(s + t + 1)])];
        agree[k] += top_b[size_t(t)] == argmax(q, V);
      }
    }
    scored += n;
    if (progress) progress(scored, total);
  });
  std::vector<KlResult> out(nq);
  for (size_t k = 0; k < nq; ++k) {
    KlResult& r = out[k];
    r.tokens = scored;
    double sum = 0;
    for (double v : kls[k]) sum += v;
    r.kl_mean = sum / double(r.tokens);
    std::vector<double> sorted = kls[k];
    std::sort(sorted.begin(), sorted.end());
    const auto rank = size_t(std::ceil(0.99 * double(r.tokens)));
    r.kl_p99 = sorted[std::max<size_t>(rank, 1) - 1];
    r.top1 = double(agree[k]) / double(r.tokens);
    r.ppl_base = std::exp(nll_b / double(r.tokens));
    r.ppl_quant = std::exp(nll_q[k] / double(r.tokens));
  }
  return out;
}

KlResult kl_divergence(Model& base, Model& quant, std::span<const int32_t> ids, int64_t ctx,
                       const EvalProgress& progress) {
  Model* const q[] = {&quant};
  return kl_divergence(base, q, ids, ctx, progress).front();
}

}  // namespace qf

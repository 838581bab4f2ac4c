// Timing prefill and decode.
#include "eval/bench.h"

#include "core/error.h"
#include "core/progress.h"
#include "core/thread_pool.h"
#include "engine/generate.h"

#include <algorithm>
#include <chrono>
#include <vector>

namespace qf {

BenchResult bench_model(Model& model, int64_t prompt, int64_t gen) {
  if (prompt < 1 || gen < 1) fail("--prompt and --gen must be at least 1");
  if (prompt + gen > model.max_seq())
    fail("--prompt {} + --gen {} exceeds the model's context of {}", prompt, gen, model.max_seq());
  const int64_t V = model.vocab_size();
  std::vector<int32_t> ids(static_cast<size_t>(prompt));
  uint64_t s = 0x9E3779B97F4A7C15ull;
  for (auto& id : ids) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    id = int32_t((s >> 33) % uint64_t(V));
  }
  std::vector<float> logits(static_cast<size_t>(V));
  using clock = std::chrono::steady_clock;
  BenchResult r;
  r.prompt = prompt;
  r.gen = gen;
  r.threads = model.pool().size();
  // One untimed token first: page the weights in, warm the caches and the thread pool.
  model.forward(std::span<const int32_t>(ids.data(), 1), 0, logits.data(), false);
  auto t0 = clock::now();
  model.forward(ids, 0, logits.data(), false);
  r.prefill_s = std::chrono::duration<double>(clock::now() - t0).count();
  int32_t next = argmax(logits.data(), V);
  t0 = clock::now();
  for (int64_t i = 0; i < gen; ++i) {
    model.forward(std::span<const int32_t>(&next, 1), prompt + i, logits.data(), false);
    next = argmax(logits.data(), V);
  }
  r.decode_s = std::chrono::duration<double>(clock::now() - t0).count();
  r.prefill_tok_s = double(prompt) / r.prefill_s;
  r.decode_tok_s = double(gen) / r.decode_s;
  r.weight_bytes_per_token = model.weights().weight_bytes_per_token();
  r.decode_gbps = double(r.weight_bytes_per_token) * r.decode_tok_s / 1e9;
  r.peak_rss_bytes = peak_rss_bytes();
  return r;
}

BenchSeries bench_repeated(Model& model, int64_t prompt, int64_t gen, int repeat) {
  if (repeat < 1) fail("--repeat must be at least 1");
  BenchSeries s;
  for (int i = 0; i < repeat; ++i) s.runs.push_back(bench_model(model, prompt, gen));
  std::vector<double> prefill, decode;
  for (const BenchResult& r : s.runs) {
    prefill.push_back(r.prefill_tok_s);
    decode.push_back(r.decode_tok_s);
  }
  std::sort(prefill.begin(), prefill.end());
  std::sort(decode.begin(), decode.end());
  const size_t mid = (s.runs.size() - 1) / 2;
  for (const BenchResult& r : s.runs)
    if (r.decode_tok_s == decode[mid]) s.median = r;
  s.median.prefill_tok_s = prefill[mid];
  s.median.prefill_s = double(prompt) / prefill[mid];
  s.median.peak_rss_bytes = s.runs.back().peak_rss_bytes;
  s.prefill_min = prefill.front();
  s.prefill_max = prefill.back();
  s.decode_min = decode.front();
  s.decode_max = decode.back();
  return s;
}

}  // namespace qf

// Timing prefill and decode.
#include "eval/bench.h"

#include "core/error.h"
#include "core/huge_pages.h"
#include "core/progress.h"
#include "core/thread_pool.h"
#include "engine/generate.h"
#include "kernels/linear.h"
#include "kernels/memory_read.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <utility>
#include <vector>

namespace qf {

void check_prefill_products(const Model& model, std::string_view name) {
  const auto& layers = model.arch().layers;
  for (size_t l = 0; l < layers.size(); ++l)
    if (layers[l].is_moe)
      fail("{}: --vs-gemm: layer {} is an MoE block (which rows a routed expert sees is the "
           "engine's choice, not a fixed GEMM); only models without MoE layers",
           name, l);
}

ProductsTiming time_prefill_products(Model& model, int64_t tokens) {
  if (tokens < 1) fail("--prompt must be at least 1");
  check_prefill_products(model, "bench");
  const ModelWeights& w = model.weights();
  std::vector<const LinearWeight*> products;
  int64_t widest_in = 0, widest_out = 0;
  ProductsTiming t;
  for (size_t l = 0; l < w.layers.size(); ++l) {
    for (const EngineLinear& L : w.layers[l].linears) {
      if (L.w.rows == 0) continue;
      products.push_back(&L.w);
      widest_in = std::max(widest_in, L.w.cols);
      widest_out = std::max(widest_out, L.w.rows);
      t.flops += 2.0 * double(tokens) * double(L.w.rows) * double(L.w.cols);
    }
  }
  std::vector<float> x(static_cast<size_t>(tokens * widest_in)),
      y(static_cast<size_t>(tokens * widest_out));
  uint64_t s = 0x2545F4914F6CDD1Dull;
  for (float& v : x) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    v = float(int64_t(s >> 40) - (int64_t(1) << 23)) / float(1 << 23);  // [-1, 1)
  }
  const auto t0 = std::chrono::steady_clock::now();
  for (const LinearWeight* p : products)
    linear_forward(*p, x.data(), tokens, y.data(), &model.pool(), model.kernels());
  t.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return t;
}

BenchResult bench_model(Model& model, int64_t prompt, int64_t gen, int64_t batch,
                        bool products) {
  if (prompt < 1 || gen < 1) fail("--prompt and --gen must be at least 1");
  if (batch < 1) fail("--batch must be at least 1");
  if (prompt + gen > model.max_seq())
    fail("--prompt {} + --gen {} exceeds the model's context of {}", prompt, gen, model.max_seq());
  const int64_t V = model.vocab_size();
  std::vector<std::vector<int32_t>> ids(static_cast<size_t>(batch));
  uint64_t s = 0x9E3779B97F4A7C15ull;
  for (auto& seq : ids) {
    seq.resize(size_t(prompt));
    for (auto& id : seq) {
      s = s * 6364136223846793005ull + 1442695040888963407ull;
      id = int32_t((s >> 33) % uint64_t(V));
    }
  }
  std::vector<float> logits(static_cast<size_t>(batch * V));
  using clock = std::chrono::steady_clock;
  BenchResult r;
  r.prompt = prompt;
  r.gen = gen;
  r.batch = batch;
  r.threads = model.pool().size();
  // One untimed token first: page the weights in, warm the caches and the thread pool.
  model.forward(std::span<const int32_t>(ids[0].data(), 1), 0, logits.data(), false);
  // Every sequence's KV cache sized for the whole run before the clock starts, as an engine
  // allocates its context up front: growing it inside the timed steps (a copy and fresh pages
  // per doubling, 8 sequences at once in a batch) cost a batched step ~5%.
  model.reserve_context(batch, prompt + gen);
  std::vector<int32_t> next(static_cast<size_t>(batch));
  auto t0 = clock::now();
  for (int64_t q = 0; q < batch; ++q) {
    model.forward(ids[size_t(q)], 0, logits.data(), false, q);
    next[size_t(q)] = argmax(logits.data(), V);
  }
  r.prefill_s = std::chrono::duration<double>(clock::now() - t0).count();
  if (products) {
    const ProductsTiming p = time_prefill_products(model, prompt);
    r.products_s = p.seconds;
    r.linear_flops_per_token = p.flops / double(prompt);
  }
  std::vector<int64_t> positions(static_cast<size_t>(batch));
  t0 = clock::now();
  for (int64_t i = 0; i < gen; ++i) {
    if (batch == 1) {
      model.forward(std::span<const int32_t>(next.data(), 1), prompt + i, logits.data(), false);
    } else {
      std::fill(positions.begin(), positions.end(), prompt + i);
      model.decode_batch(next, positions, logits.data());
    }
    for (int64_t q = 0; q < batch; ++q) next[size_t(q)] = argmax(logits.data() + q * V, V);
  }
  r.decode_s = std::chrono::duration<double>(clock::now() - t0).count();
  r.prefill_tok_s = double(batch * prompt) / r.prefill_s;
  r.decode_tok_s_per_sequence = double(gen) / r.decode_s;
  r.decode_tok_s = double(batch) * r.decode_tok_s_per_sequence;
  r.weight_bytes_per_token = model.weights().weight_bytes_per_token();
  r.decode_gbps = double(r.weight_bytes_per_token) * r.decode_tok_s_per_sequence / 1e9;
  r.peak_rss_bytes = peak_rss_bytes();
  r.kv_cache = model.kv_cache_type();
  r.kv_cache_bytes = model.kv_cache_bytes();
  r.mamba_state_bytes = model.mamba_state_bytes();
  return r;
}

namespace {

RatioOverRounds over_rounds(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return {n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]), v.front(), v.back()};
}

// The median, smallest and largest rates of a model's runs (see BenchSeries).
BenchSeries series_of(std::vector<BenchResult> runs) {
  BenchSeries s;
  s.runs = std::move(runs);
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
  s.median.prefill_s = double(s.median.batch * s.median.prompt) / prefill[mid];
  s.median.peak_rss_bytes = s.runs.back().peak_rss_bytes;
  s.prefill_min = prefill.front();
  s.prefill_max = prefill.back();
  s.decode_min = decode.front();
  s.decode_max = decode.back();
  if (s.runs[0].products_s > 0) {
    std::vector<double> of_products, rates;
    for (const BenchResult& r : s.runs) {
      of_products.push_back(r.products_s * double(r.batch) / r.prefill_s);
      rates.push_back(r.linear_flops_per_token * double(r.prompt) / r.products_s);
    }
    s.prefill_of_products = over_rounds(std::move(of_products));
    s.products_flop_s = over_rounds(std::move(rates)).median;
  }
  return s;
}

}  // namespace

BenchSeries bench_repeated(Model& model, int64_t prompt, int64_t gen, int repeat,
                           int64_t batch, bool products) {
  if (repeat < 1) fail("--repeat must be at least 1");
  std::vector<BenchResult> runs;
  for (int i = 0; i < repeat; ++i)
    runs.push_back(bench_model(model, prompt, gen, batch, products));
  return series_of(std::move(runs));
}

AlternatingBench bench_alternating(std::span<const BenchCase> cases, int64_t gen, int repeat,
                                   bool products) {
  if (repeat < 1) fail("--repeat must be at least 1");
  if (cases.empty()) fail("bench: nothing to measure");
  std::vector<std::vector<BenchResult>> runs(cases.size());
  for (int i = 0; i < repeat; ++i)
    for (size_t c = 0; c < cases.size(); ++c)
      runs[c].push_back(
          bench_model(*cases[c].model, cases[c].prompt, gen, cases[c].batch, products));
  AlternatingBench a;
  for (size_t c = 0; c < cases.size(); ++c) {
    std::vector<double> prefill, decode;
    for (size_t i = 0; i < runs[c].size(); ++i) {
      prefill.push_back(runs[c][i].prefill_tok_s / runs[0][i].prefill_tok_s);
      decode.push_back(runs[c][i].decode_tok_s / runs[0][i].decode_tok_s);
    }
    a.prefill_vs_first.push_back(over_rounds(std::move(prefill)));
    a.decode_vs_first.push_back(over_rounds(std::move(decode)));
    a.series.push_back(series_of(runs[c]));
  }
  return a;
}

namespace {
// A volatile store keeps the STREAM sums, and so the reads, from being optimized away.
volatile uint64_t stream_sink = 0;
}  // namespace

double stream_read_gbps(int threads, size_t bytes, int repeat) {
  ThreadPool pool(std::max(threads, 1));
  const size_t words = bytes / 8;
  std::shared_ptr<const void> pages;
  {
    std::vector<uint64_t> filled(words);
    for (size_t i = 0; i < words; ++i) filled[i] = i;
    // On 2 MB pages, as the engine keeps the weights a decode streams (core/huge_pages.h).
    pages = copy_to_huge_pages(filled.data(), words * 8);
  }
  const auto* buffer = static_cast<const uint64_t*>(pages.get());
  const int64_t tasks = 8 * int64_t(pool.size());
  std::vector<uint64_t> sums(static_cast<size_t>(tasks));
  std::vector<double> rates;
  for (int pass = 0; pass <= repeat; ++pass) {
    const auto t0 = std::chrono::steady_clock::now();
    pool.parallel_for(tasks, [&](int64_t t) {
      const size_t b = words * size_t(t) / size_t(tasks), e = words * size_t(t + 1) / size_t(tasks);
      sums[size_t(t)] = kernels::read_all(buffer + b, (e - b) * 8);
    });
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    stream_sink = sums[0];
    if (pass > 0) rates.push_back(double(words * 8) / s / 1e9);
  }
  std::sort(rates.begin(), rates.end());
  return rates[rates.size() / 2];
}

}  // namespace qf

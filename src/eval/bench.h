// Inference speed of a model: prefill of a prompt in one window and token-by-token decode,
// with the weight bytes each decode step reads and the memory bandwidth that implies.
#pragma once

#include "engine/model.h"

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

namespace qf {

struct BenchResult {
  int64_t prompt = 0, gen = 0;
  int64_t batch = 1;  // sequences decoded together
  int threads = 0;
  double prefill_s = 0, decode_s = 0;
  // Tokens of all sequences per second; decode also per sequence (decode steps per second).
  double prefill_tok_s = 0, decode_tok_s = 0, decode_tok_s_per_sequence = 0;
  uint64_t weight_bytes_per_token = 0;  // per decode step: stored Linear weights + scales + head
  double decode_gbps = 0;  // weight_bytes_per_token * decode steps per second / 1e9
  uint64_t peak_rss_bytes = 0;
  KvCacheType kv_cache = KvCacheType::f32;
  uint64_t kv_cache_bytes = 0;  // held after the last decoded token (reserve included)
  // The Mamba layers' recurrent state (hybrid models; 0 otherwise): fixed per sequence, read
  // and written every decode step.
  uint64_t mamba_state_bytes = 0;
  // With `products` (bench --vs-gemm): every layer's Linear products run alone right after the
  // prefill (time_prefill_products), in seconds for one sequence's prompt, and their FLOPs per
  // prompt token (2 x rows x cols per Linear); 0 otherwise.
  double products_s = 0, linear_flops_per_token = 0;
};

// The Linear products of a prefill of `tokens` tokens, each alone: every layer's Linears in
// order, one linear_forward each (the model's kernels and threads) on fixed pseudo-random
// activations [tokens, cols]. What the prefill's products cost if nothing else ran: the GEMM
// kernel's rate on this model's shapes and weights. Biases, AWQ pre-scales and simulated
// activation quantization are left out (they are the rest of the layer). Throws qf::Error as
// check_prefill_products.
struct ProductsTiming {
  double seconds = 0;
  double flops = 0;  // 2 x tokens x rows x cols, summed over the Linears
};
ProductsTiming time_prefill_products(Model& model, int64_t tokens);
// Throws qf::Error, starting with `name`, when the model has MoE layers (a routed expert sees a
// share of the rows, which the engine decides: no fixed GEMM to compare with).
void check_prefill_products(const Model& model, std::string_view name);

// Prompt ids are fixed pseudo-random sequences (no tokenizer needed), one per sequence. `batch`
// sequences are prefilled one after another, then decoded together (Model::decode_batch; one
// sequence: Model::forward). `products`: time_prefill_products(model, prompt) right after the
// prefill, so both see the machine in the same second. Throws qf::Error if prompt < 1, gen < 1,
// batch < 1, or prompt + gen exceeds the model's context, and as time_prefill_products.
BenchResult bench_model(Model& model, int64_t prompt, int64_t gen, int64_t batch = 1,
                        bool products = false);

struct RatioOverRounds {
  double median = 1, min = 1, max = 1;
};

// `repeat` runs of bench_model (>= 1): each run's result, and the median, smallest and largest
// prefill and decode rates over them (the median of an even count is the lower middle run's, a
// rate that was measured).
struct BenchSeries {
  std::vector<BenchResult> runs;
  BenchResult median;  // the run whose decode rate is the median; prefill_tok_s is the median
                       // prefill rate
  double prefill_min = 0, prefill_max = 0, decode_min = 0, decode_max = 0;
  // Runs with products timed: the products' median rate in FLOP/s, and the prefill's rate over
  // theirs (products_s / the prefill's seconds per sequence) over the runs, each a same-run ratio
  // (median of an even count: the mean of the middle two).
  double products_flop_s = 0;
  RatioOverRounds prefill_of_products;
};
BenchSeries bench_repeated(Model& model, int64_t prompt, int64_t gen, int repeat,
                           int64_t batch = 1, bool products = false);

// Several cases (a model, a prompt length and a batch each) measured in turns: round i < repeat
// runs bench_model once on each case, in order, so a machine that slows down for a while slows
// every case of the round alike. Per case, its BenchSeries over the rounds and, against the first
// case, its rate / the first case's rate in the same round: the median over rounds (of an even
// count, the mean of the two middle ratios), smallest and largest (all 1 for the first case).
// Throws as bench_model, and if `cases` is empty.
struct BenchCase {
  Model* model;
  int64_t prompt;
  int64_t batch = 1;
};
struct AlternatingBench {
  std::vector<BenchSeries> series;
  std::vector<RatioOverRounds> prefill_vs_first, decode_vs_first;
};
AlternatingBench bench_alternating(std::span<const BenchCase> cases, int64_t gen, int repeat,
                                   bool products = false);

// The machine's STREAM-style read bandwidth in GB/s, the ceiling of a decode step that streams
// its weights: a `bytes` buffer (well past the caches, on 2 MB pages as the engine's weights)
// read with vector loads and prefetches (kernels::read_all) by `threads` threads in contiguous
// parts, the median of `repeat` passes
// after one warm pass. The buffer is freed before returning (call it after measuring peak RSS).
double stream_read_gbps(int threads, size_t bytes = size_t(256) << 20, int repeat = 5);

}  // namespace qf

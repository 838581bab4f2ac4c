// The tuning loop of one block: fake-quantize the seven weights, forward and backward a batch of
// windows, one optimiser step per Linear; the error over all windows before and after decides
// whether the tuned offsets are kept.
#include "train/block_tuning.h"

#include "core/error.h"

#include <algorithm>
#include <memory>
#include <optional>
#include <random>

namespace qf {

std::vector<float>& block_matrix(BlockWeights<float>& w, int r) {
  switch (r) {
    case 0: return w.q;
    case 1: return w.k;
    case 2: return w.v;
    case 3: return w.o;
    case 4: return w.gate;
    case 5: return w.up;
    default: return w.down;
  }
}

const std::vector<float>& block_matrix(const BlockWeights<float>& w, int r) {
  return block_matrix(const_cast<BlockWeights<float>&>(w), r);
}

namespace {

// Mean squared error of the block's output over windows [0, windows).
double block_mse(const BlockShape& s, const BlockWeights<float>& w, const RopeTable<float>& rope,
                 const BlockActQuant* act, const float* inputs, const float* targets,
                 int64_t windows, int64_t seq, ThreadPool* pool) {
  const int64_t per = seq * s.hidden;
  std::vector<float> y(static_cast<size_t>(per));
  BlockSaved<float> saved;
  double sum = 0;
  for (int64_t b = 0; b < windows; ++b) {
    block_forward<float>(s, w, rope, inputs + b * per, seq, y.data(), saved, act, pool);
    const float* t = targets + b * per;
    for (int64_t i = 0; i < per; ++i) {
      const double e = double(y[size_t(i)]) - double(t[i]);
      sum += e * e;
    }
  }
  return sum / double(windows * per);
}

}  // namespace

BlockTuneResult tune_block(const BlockShape& s, const BlockWeights<float>& original,
                           const RopeTable<float>& rope,
                           const std::array<const QuantizedTensor*, kBlockLinears>& init,
                           const BlockActQuant* act, const float* inputs, const float* targets,
                           int64_t windows, int64_t seq, const BlockTuneOptions& o,
                           ThreadPool* pool, const std::function<void()>& on_step) {
  if (o.batch < 1 || o.batch > windows)
    fail("block tuning: batch of {} windows out of [1, {}]", o.batch, windows);
  if (o.iters < 0) fail("block tuning: {} iterations", o.iters);
  const float lr0 = o.lr > 0.f ? o.lr : 1.f / float(std::max<int64_t>(o.iters, 1));
  std::array<std::optional<TunableLinear>, kBlockLinears> lin;
  BlockWeights<float> cur = original;
  auto refresh = [&] {
    for (int r = 0; r < kBlockLinears; ++r)
      if (lin[size_t(r)]) lin[size_t(r)]->forward(block_matrix(cur, r).data());
  };
  for (int r = 0; r < kBlockLinears; ++r)
    if (init[size_t(r)]) lin[size_t(r)].emplace(block_matrix(original, r), *init[size_t(r)], o.params);
  refresh();

  BlockTuneResult res;
  res.mse_init = block_mse(s, cur, rope, act, inputs, targets, windows, seq, pool);
  const int64_t per = seq * s.hidden;
  std::vector<float> y(static_cast<size_t>(per)), dy(static_cast<size_t>(per));
  std::vector<int64_t> order(static_cast<size_t>(windows));
  BlockSaved<float> saved;
  BlockWeights<float> grads = BlockWeights<float>::zeros(s);
  std::mt19937_64 rng(o.seed);
  const double norm = 2.0 / double(o.batch * per);
  for (int64_t it = 0; it < o.iters; ++it) {
    // `batch` distinct windows (a partial Fisher-Yates shuffle from a seeded generator).
    for (int64_t i = 0; i < windows; ++i) order[size_t(i)] = i;
    for (int64_t i = 0; i < o.batch; ++i) {
      const int64_t j = i + int64_t(rng() % uint64_t(windows - i));
      std::swap(order[size_t(i)], order[size_t(j)]);
    }
    for (int r = 0; r < kBlockLinears; ++r)
      std::fill(block_matrix(grads, r).begin(), block_matrix(grads, r).end(), 0.f);
    double loss = 0;
    for (int64_t bi = 0; bi < o.batch; ++bi) {
      const int64_t b = order[size_t(bi)];
      block_forward<float>(s, cur, rope, inputs + b * per, seq, y.data(), saved, act, pool);
      const float* t = targets + b * per;
      for (int64_t i = 0; i < per; ++i) {
        const double e = double(y[size_t(i)]) - double(t[i]);
        loss += e * e;
        dy[size_t(i)] = float(norm * e);
      }
      block_backward<float>(s, cur, rope, saved, dy.data(), dy.data(), grads, act, pool);
    }
    loss /= double(o.batch * per);
    if (it == 0) res.first_loss = loss;
    res.last_loss = loss;
    // SignRound's schedule: the learning rate decays linearly to 0 over the run (sign);
    // Adam keeps it constant.
    const float lr = o.optimizer == TuneOptimizer::sign
                         ? lr0 * float(o.iters - it) / float(o.iters)
                         : lr0;
    for (int r = 0; r < kBlockLinears; ++r)
      if (lin[size_t(r)]) lin[size_t(r)]->step(block_matrix(grads, r).data(), o.optimizer, lr);
    refresh();
    if (on_step) on_step();
  }
  res.mse_tuned = block_mse(s, cur, rope, act, inputs, targets, windows, seq, pool);
  if (!(res.mse_tuned < res.mse_init)) {
    res.kept_init = true;
    for (int r = 0; r < kBlockLinears; ++r)
      if (lin[size_t(r)]) lin[size_t(r)]->reset();
  }
  for (int r = 0; r < kBlockLinears; ++r)
    if (lin[size_t(r)]) res.tensors[size_t(r)] = lin[size_t(r)]->export_tensor();
  return res;
}

}  // namespace qf

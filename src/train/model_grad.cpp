// The whole model's loss and gradient with gradient checkpointing: forward through the blocks
// keeping each block's input, the head's KL and its dL/dx, then the blocks in reverse, each
// recomputing its forward (BlockSaved) before its backward. Windows of a batch run as parallel
// tasks; each block's per-window gradients are summed in window order.
#include "train/model_grad.h"

#include "core/error.h"
#include "kernels/linear.h"
#include "train/linear_fast.h"
#include "train/linear_grad.h"
#include "train/rmsnorm_grad.h"

#include <algorithm>
#include <cmath>
#include <type_traits>

namespace qf {

namespace {

void run_tasks(ThreadPool* pool, int64_t n, const std::function<void(int64_t)>& fn) {
  if (pool) pool->parallel_for(n, fn);
  else
    for (int64_t i = 0; i < n; ++i) fn(i);
}

template <typename T>
std::vector<std::vector<T>*> parts(BlockWeights<T>& w) {
  return {&w.attn_norm, &w.mlp_norm, &w.q, &w.k, &w.v, &w.o, &w.gate, &w.up, &w.down};
}

// log Σ exp of a row of `vocab` logits, in double (the max subtracted first).
template <typename T>
double log_sum_exp(const T* row, int64_t vocab) {
  const T m = *std::max_element(row, row + vocab);
  double s = 0;
  for (int64_t v = 0; v < vocab; ++v) s += std::exp(double(row[v] - m));
  return double(m) + std::log(s);
}

// Mean over the rows of KL(softmax(p_logits) ‖ softmax(q_logits)), [tokens, vocab] each.
template <typename T>
double kl_rows(const T* p_logits, const T* q_logits, int64_t tokens, int64_t vocab) {
  double total = 0;
  for (int64_t t = 0; t < tokens; ++t) {
    const T* p = p_logits + t * vocab;
    const T* q = q_logits + t * vocab;
    const double plse = log_sum_exp(p, vocab), qlse = log_sum_exp(q, vocab);
    double kl = 0;
    for (int64_t v = 0; v < vocab; ++v) {
      const double lp = double(p[v]) - plse, lq = double(q[v]) - qlse;
      kl += std::exp(lp) * (lp - lq);
    }
    total += kl;
  }
  return total / double(tokens);
}

// KL(softmax(p) ‖ softmax(q)) of one row of `vocab` logits; q becomes dL/dq = (softmax(q) − p)
// times `mean` (the gradient of the mean over the window's tokens).
template <typename T>
double kl_row_grad(const T* p, T* q, int64_t vocab, T mean) {
  const double plse = log_sum_exp(p, vocab), qlse = log_sum_exp(q, vocab);
  double kl = 0;
  for (int64_t v = 0; v < vocab; ++v) {
    const double lp = double(p[v]) - plse, lq = double(q[v]) - qlse;
    const double pv = std::exp(lp);
    kl += pv * (lp - lq);
    q[v] = T((std::exp(lq) - pv)) * mean;
  }
  return kl;
}

// The head's KL and the gradient of `weight` times it: dL/dx [n, hidden] (written to dx) for
// x [n, hidden] and, when dhead is not null, dL/d lm_head (accumulated; a [vocab, hidden]
// product as costly as the logits', so only when the head is trained). With a pool (float): the
// logits of all n tokens in one product on the engine's f32 kernels, the rows' KL as parallel
// tasks and the gradients by the transposed products ([n, vocab] floats of scratch); without:
// one token at a time in plain loops.
template <typename T>
double head_kl_dx(const DenseModel<T>& m, const T* x, int64_t n, const T* teacher, T weight,
                  T* dx, T* dhead, ThreadPool* pool) {
  const int64_t H = m.block.hidden, V = m.vocab;
  std::vector<T> xn(size_t(n * H)), inv(static_cast<size_t>(n));
  rmsnorm_forward<T>(x, m.final_norm.data(), n, H, m.final_eps, xn.data(), inv.data());
  std::vector<T> dxn(size_t(n * H), T(0));
  double total = 0;
  const T mean = weight / T(n);
  bool done = false;
  if constexpr (std::is_same_v<T, float>) {
    if (pool) {
      done = true;
      std::vector<float> logits(size_t(n * V));
      linear_forward_fast(xn.data(), m.head.data(), n, H, V, logits.data(), pool);
      std::vector<double> kl(static_cast<size_t>(n));
      pool->parallel_for(n, [&](int64_t t) {
        kl[size_t(t)] = kl_row_grad<float>(teacher + t * V, logits.data() + t * V, V, mean);
      });
      for (double k : kl) total += k;  // token order: the same sum at any thread count
      linear_backward_fast(xn.data(), m.head.data(), logits.data(), n, H, V, dxn.data(), dhead,
                           pool);
    }
  }
  if (!done) {
    std::vector<T> row(static_cast<size_t>(V));
    for (int64_t t = 0; t < n; ++t) {
      linear_forward<T>(xn.data() + t * H, m.head.data(), nullptr, 1, H, V, row.data());
      total += kl_row_grad<T>(teacher + t * V, row.data(), V, mean);
      // dxn_t = Σ_v dlogit_v · head_v;  dhead_v += dlogit_v · xn_t
      T* d = dxn.data() + t * H;
      const T* xt = xn.data() + t * H;
      for (int64_t v = 0; v < V; ++v) {
        const T g = row[size_t(v)];
        const T* w = m.head.data() + v * H;
        for (int64_t h = 0; h < H; ++h) d[h] += g * w[h];
        if (dhead)
          for (int64_t h = 0; h < H; ++h) dhead[v * H + h] += g * xt[h];
      }
    }
  }
  std::vector<T> dnorm(size_t(H), T(0));
  rmsnorm_backward<T>(x, m.final_norm.data(), inv.data(), dxn.data(), n, H, dx, dnorm.data());
  return total / double(n);
}

}  // namespace

DenseModel<float> dense_model(const ModelWeights& mw, int64_t positions) {
  const Architecture& a = mw.arch;
  if (a.final_softcap != 0.f || a.logits_divisor != 1.f || a.embedding_scale != 1.f)
    fail("{}: a head with logit soft-capping or scaling, or scaled embeddings, is not "
         "differentiated by the training code (plain Llama models only)", a.model_type);
  DenseModel<float> m;
  for (int64_t l = 0; l < a.num_layers; ++l) {
    const BlockShape s = block_shape(a, l);
    if (l == 0) m.block = s;
    m.blocks.push_back(block_weights<float>(mw, l));
  }
  if (a.num_layers == 0) fail("{}: a model without decoder layers", a.model_type);
  m.vocab = a.vocab_size;
  m.final_eps = a.rms_norm_eps;
  m.final_norm = mw.final_norm;
  const LinearWeight& h = mw.lm_head.w;
  if (h.rows != m.vocab || h.cols != m.block.hidden)
    fail("{}: lm_head is [{}, {}], expected [{}, {}]", a.model_type, h.rows, h.cols, m.vocab,
         m.block.hidden);
  m.head.resize(size_t(h.rows * h.cols));
  dequantize_weight_rows(h, 0, h.rows, m.head.data());
  m.rope = rope_table<float>(a.ropes[size_t(a.layers[0].rope)], positions);
  return m;
}

template <typename T>
void model_logits(const DenseModel<T>& m, const T* x0, int64_t n, T* logits, ThreadPool* pool) {
  const int64_t H = m.block.hidden;
  std::vector<T> x(x0, x0 + n * H);
  BlockSaved<T> sv;
  for (size_t l = 0; l < m.blocks.size(); ++l)
    block_forward<T>(m.block, m.blocks[l], m.rope, x.data(), n, x.data(), sv, m.act_of(l), pool);
  std::vector<T> xn(size_t(n * H)), inv(static_cast<size_t>(n));
  rmsnorm_forward<T>(x.data(), m.final_norm.data(), n, H, m.final_eps, xn.data(), inv.data());
  if constexpr (std::is_same_v<T, float>) {
    if (pool) return linear_forward_fast(xn.data(), m.head.data(), n, H, m.vocab, logits, pool);
  }
  linear_forward<T>(xn.data(), m.head.data(), nullptr, n, H, m.vocab, logits);
}

template <typename T>
double model_kl(const DenseModel<T>& m, const DistillBatch<T>& batch,
                std::vector<BlockWeights<T>>* grads, ThreadPool* pool,
                std::vector<double>* window_loss, const EmbeddingGrads<T>& embedding) {
  const int64_t B = int64_t(batch.x0.size()), n = batch.tokens, H = m.block.hidden;
  const int64_t L = int64_t(m.blocks.size());
  if (B == 0 || int64_t(batch.teacher_logits.size()) != B)
    fail("model_kl: {} windows and {} teacher logits", B, batch.teacher_logits.size());
  if (n > m.rope.positions)
    fail("model_kl: windows of {} tokens, RoPE table for {}", n, m.rope.positions);
  std::vector<double> loss(static_cast<size_t>(B), 0.0);
  // Float with a pool: the windows one after another, each block's products and attention heads
  // and the head's products on the pool (the engine's f32 kernels); otherwise the windows as
  // parallel tasks in plain loops. Either way a window's arithmetic does not depend on the
  // thread count.
  const bool inner = pool != nullptr && std::is_same_v<T, float>;
  ThreadPool* windows = inner ? nullptr : pool;
  ThreadPool* ops = inner ? pool : nullptr;

  if (!grads && (embedding.head || embedding.x0))
    fail("model_kl: the head's and the inputs' gradients need the blocks' (grads)");
  if (!grads) {  // Forward only: no hidden states kept.
    run_tasks(windows, B, [&](int64_t b) {
      std::vector<T> logits(size_t(n * m.vocab));
      model_logits<T>(m, batch.x0[size_t(b)], n, logits.data(), ops);
      loss[size_t(b)] = kl_rows<T>(batch.teacher_logits[size_t(b)], logits.data(), n, m.vocab);
    });
  } else {
    if (grads->size() != size_t(L)) grads->assign(size_t(L), BlockWeights<T>::zeros(m.block));
    // inputs[b][l]: block l's input of window b; dx[b]: dL/d(current block's output).
    std::vector<std::vector<std::vector<T>>> inputs(static_cast<size_t>(B));
    std::vector<std::vector<T>> dx(static_cast<size_t>(B));
    // The head's gradient: accumulated in place while the windows run one after another, else a
    // buffer per window summed in window order (the same sum at any thread count).
    std::vector<std::vector<T>> head_parts(embedding.head && windows ? size_t(B) : 0);
    if (embedding.head && embedding.head->size() != size_t(m.vocab * H))
      embedding.head->assign(size_t(m.vocab * H), T(0));
    run_tasks(windows, B, [&](int64_t b) {
      auto& in = inputs[size_t(b)];
      in.resize(size_t(L));
      std::vector<T> x(batch.x0[size_t(b)], batch.x0[size_t(b)] + n * H);
      BlockSaved<T> sv;
      for (int64_t l = 0; l < L; ++l) {
        in[size_t(l)] = x;
        block_forward<T>(m.block, m.blocks[size_t(l)], m.rope, x.data(), n, x.data(), sv,
                         m.act_of(size_t(l)), ops);
      }
      std::vector<T>& d = dx[size_t(b)];
      d.resize(size_t(n * H));
      T* dhead = nullptr;
      if (embedding.head) {
        if (windows) head_parts[size_t(b)].assign(size_t(m.vocab * H), T(0));
        dhead = windows ? head_parts[size_t(b)].data() : embedding.head->data();
      }
      // Weighted by 1/B: the gradients are the batch mean's.
      loss[size_t(b)] = head_kl_dx<T>(m, x.data(), n, batch.teacher_logits[size_t(b)],
                                      T(1) / T(B), d.data(), dhead, ops);
    });
    for (const std::vector<T>& part : head_parts)
      for (size_t i = 0; i < part.size(); ++i) (*embedding.head)[i] += part[i];
    std::vector<BlockWeights<T>> gw(static_cast<size_t>(B));
    for (int64_t l = L - 1; l >= 0; --l) {
      run_tasks(windows, B, [&](int64_t b) {
        BlockWeights<T>& g = gw[size_t(b)];
        if (g.q.empty()) g = BlockWeights<T>::zeros(m.block);
        else
          for (std::vector<T>* p : parts(g)) std::fill(p->begin(), p->end(), T(0));
        BlockSaved<T> sv;
        std::vector<T> y(size_t(n * H));
        auto& in = inputs[size_t(b)][size_t(l)];
        block_forward<T>(m.block, m.blocks[size_t(l)], m.rope, in.data(), n, y.data(), sv,
                         m.act_of(size_t(l)), ops);
        std::vector<T>().swap(in);  // this block's input is no longer needed
        std::vector<T>& d = dx[size_t(b)];
        block_backward<T>(m.block, m.blocks[size_t(l)], m.rope, sv, d.data(), d.data(), g,
                          m.act_of(size_t(l)), ops);
      });
      // Sum the windows' gradients in window order, split by parameter arrays and chunks.
      std::vector<std::vector<T>*> dst = parts((*grads)[size_t(l)]);
      std::vector<std::vector<std::vector<T>*>> src;
      for (auto& g : gw) src.push_back(parts(g));
      constexpr int64_t kChunk = 1 << 14;
      std::vector<std::pair<size_t, int64_t>> tasks;
      for (size_t p = 0; p < dst.size(); ++p)
        for (int64_t c = 0; c < int64_t(dst[p]->size()); c += kChunk) tasks.push_back({p, c});
      run_tasks(pool, int64_t(tasks.size()), [&](int64_t t) {
        const auto [p, c0] = tasks[size_t(t)];
        T* o = dst[p]->data();
        const int64_t c1 = std::min<int64_t>(c0 + kChunk, int64_t(dst[p]->size()));
        for (int64_t b = 0; b < B; ++b) {
          const T* s = src[size_t(b)][p]->data();
          for (int64_t c = c0; c < c1; ++c) o[c] += s[c];
        }
      });
    }
    if (embedding.x0) *embedding.x0 = std::move(dx);  // after block 0's backward: dL/dx0
  }
  double total = 0;
  for (double v : loss) total += v;
  if (window_loss) *window_loss = loss;
  return total / double(B);
}

#define QF_INSTANTIATE(T)                                                                    \
  template struct DenseModel<T>;                                                             \
  template struct DistillBatch<T>;                                                           \
  template void model_logits<T>(const DenseModel<T>&, const T*, int64_t, T*, ThreadPool*);   \
  template struct EmbeddingGrads<T>;                                                         \
  template double model_kl<T>(const DenseModel<T>&, const DistillBatch<T>&,                  \
                              std::vector<BlockWeights<T>>*, ThreadPool*, std::vector<double>*, \
                              const EmbeddingGrads<T>&);
QF_INSTANTIATE(float)
QF_INSTANTIATE(double)
#undef QF_INSTANTIATE

}  // namespace qf

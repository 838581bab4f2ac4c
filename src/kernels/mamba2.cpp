// Mamba2 (SSD) mixer kernels: conv1d + SiLU vectored over channels, the recurrent scan vectored
// over the state (N), and the chunked scan as register-blocked matrix products (an R x V tile of
// accumulators fed by broadcast scalars of one operand and vector rows of the other, the shape
// of attention.cpp's WeighValues). Highway, runtime dispatch; only tails are scalar.
//
// The chunked scan in matrices, per chunk of L positions, group g, head h (cum = the chunk's
// inclusive cumulative sum of dt * A[h]):
//   scores  G[l,s]  = C_l . B_s                                 (per group: shared by its heads)
//   M[l,s]          = G[l,s] * exp(cum_l - cum_s) * dt_s, s <= l
//   Y[l,:]          = exp(cum_l) * (C_l . S^T) + M[l,:] X + D x_l
//   S^T[i,:]       <- exp(cum_L-1) * S^T[i,:] + sum_s B_s[i] * exp(cum_L-1 - cum_s) dt_s x_s
// The state is kept transposed ([N, P], P contiguous) during the call so that both of its
// products have it as the vector operand; it is transposed back at the end.
#include "kernels/mamba2.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/mamba2.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep

#include <hwy/contrib/math/math-inl.h>
#include <hwy/highway.h>

#include "core/error.h"
#include "core/thread_pool.h"

#include <algorithm>
#include <cmath>
#include <vector>

#ifndef QFORGE_KERNELS_MAMBA2_ONCE
#define QFORGE_KERNELS_MAMBA2_ONCE
namespace qf {
namespace {

inline int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

// Channels per conv task: a few vectors wide, so 6144 channels (Nemotron-H Nano) make 24 tasks.
constexpr int64_t kConvBlock = 256;
// Rows of the matrix-product tiles (the vector columns per tile are per target: kTileVectors).
// 4 and 6 measure the same on the Nemotron-H shape; 6 loads each operand row for more rows.
constexpr int kTileRows = 6;
// The chunked scan keeps the C.B scores and packed B, C rows of a window of chunks (all groups)
// at most this large, then runs the heads over that window: bounded memory whatever the prompt
// length.
constexpr int64_t kScoreWindowBytes = int64_t(8) << 20;
// (row, group) units of the gated norm per task.
constexpr int64_t kNormUnits = 16;

}  // namespace
}  // namespace qf
#endif

HWY_BEFORE_NAMESPACE();
namespace qf {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;

// Vector columns per tile: R x V accumulators plus V operand rows must fit the registers (32 on
// AVX-512, 16 below it).
constexpr int kTileVectors = HWY_LANES(float) >= 16 ? 4 : 2;

// silu(x) = x / (1 + exp(-x)); the argument of Exp is capped (defined to 104) so x -> -inf gives
// x / inf = -0 as the scalar form does.
HWY_INLINE VF SiluV(DF d, VF x) {
  const VF e = hn::Exp(d, hn::Min(hn::Neg(x), hn::Set(d, 100.f)));
  return hn::Div(x, hn::Add(hn::Set(d, 1.f), e));
}
inline float SiluScalar(float x) { return x / (1.f + std::exp(-x)); }

// ---------------------------------------------------------------------------------------------
// Conv1d + SiLU.

void Conv1dSilu(const Mamba2Dims& dm, float* xbc, int64_t n, int64_t stride, const float* weight,
                const float* bias, float* state, ThreadPool& pool) {
  const int64_t channels = dm.conv_dim(), K = dm.conv_kernel, H1 = K - 1;
  const int64_t tasks = (channels + kConvBlock - 1) / kConvBlock;
  pool.parallel_for(tasks, [&](int64_t task) {
    const DF d;
    const int64_t NL = int64_t(hn::Lanes(d)), W = kConvBlock;
    const int64_t c0 = task * W, w = std::min(W, channels - c0);
    // Transposed weights [K, W], the bias, a ring of the last H1 inputs [H1, W] (slot `oldest`
    // holds the earliest), so every loop below runs over contiguous channels.
    thread_local std::vector<float> buf;
    thread_local std::vector<const float*> taps;
    buf.resize(size_t((K + 1 + H1) * W));
    taps.resize(size_t(K));
    float* wt = buf.data();
    float* bs = wt + K * W;
    float* ring = bs + W;
    // Written row by row (rows W floats apart: writing down a column would touch a line per
    // element), read with the small strides K and K - 1.
    for (int64_t k = 0; k < K; ++k)
      for (int64_t j = 0; j < w; ++j) wt[k * W + j] = weight[(c0 + j) * K + k];
    for (int64_t j = 0; j < w; ++j) bs[j] = bias ? bias[c0 + j] : 0.f;
    for (int64_t k = 0; k < H1; ++k)
      for (int64_t j = 0; j < w; ++j) ring[k * W + j] = state[(c0 + j) * H1 + k];
    int64_t oldest = 0;
    for (int64_t t = 0; t < n; ++t) {
      float* row = xbc + t * stride + c0;
      for (int64_t k = 0; k < H1; ++k) taps[size_t(k)] = ring + ((oldest + k) % H1) * W;
      float* slot = ring + oldest * W;  // the oldest input, replaced by this token's
      int64_t j = 0;
      for (; j + NL <= w; j += NL) {
        const VF v = hn::LoadU(d, row + j);
        VF acc = hn::LoadU(d, bs + j);
        for (int64_t k = 0; k < H1; ++k)
          acc = hn::MulAdd(hn::LoadU(d, wt + k * W + j), hn::LoadU(d, taps[size_t(k)] + j), acc);
        acc = hn::MulAdd(hn::LoadU(d, wt + H1 * W + j), v, acc);
        if (H1 > 0) hn::StoreU(v, d, slot + j);
        hn::StoreU(SiluV(d, acc), d, row + j);
      }
      for (; j < w; ++j) {
        const float v = row[j];
        float acc = bs[j];
        for (int64_t k = 0; k < H1; ++k) acc = std::fma(wt[k * W + j], taps[size_t(k)][j], acc);
        acc = std::fma(wt[H1 * W + j], v, acc);
        if (H1 > 0) slot[j] = v;
        row[j] = SiluScalar(acc);
      }
      if (H1 > 0) oldest = (oldest + 1) % H1;
    }
    for (int64_t k = 0; k < H1; ++k) taps[size_t(k)] = ring + ((oldest + k) % H1) * W;
    for (int64_t j = 0; j < w; ++j)
      for (int64_t k = 0; k < H1; ++k) state[(c0 + j) * H1 + k] = taps[size_t(k)][j];
  });
}

// ---------------------------------------------------------------------------------------------
// Recurrent scan.

// One token's operands for the rows of a head (pointers at the head's first row p).
struct RecurrentToken {
  const float* x;
  const float* B;
  const float* C;
  float dt, dA;
  float* y;
};

// R rows p of one head's state S [P, N] for T consecutive tokens: per token S = S * dA +
// (dt x_p) B, y_p = S . C + D x_p. The state is loaded and stored once for the T tokens (the
// loop is bound by those loads and stores), B and C once for the R rows. The arithmetic per
// token is the same whatever T, so results do not depend on how tokens are grouped.
template <int R, int T>
HWY_INLINE void RecurrentRows(DF d, float* HWY_RESTRICT S, int64_t N, const RecurrentToken* tok,
                              int64_t p, float Dh) {
  const int64_t NL = int64_t(hn::Lanes(d));
  float us[T][R];
  VF vdA[T], u[T][R], acc[T][R];
  for (int t = 0; t < T; ++t) {
    vdA[t] = hn::Set(d, tok[t].dA);
    for (int r = 0; r < R; ++r) {
      us[t][r] = tok[t].dt * tok[t].x[p + r];
      u[t][r] = hn::Set(d, us[t][r]);
      acc[t][r] = hn::Zero(d);
    }
  }
  int64_t i = 0;
  for (; i + NL <= N; i += NL) {
    VF v[R];
    for (int r = 0; r < R; ++r) v[r] = hn::LoadU(d, S + (p + r) * N + i);
    for (int t = 0; t < T; ++t) {
      const VF b = hn::LoadU(d, tok[t].B + i), c = hn::LoadU(d, tok[t].C + i);
      for (int r = 0; r < R; ++r) {
        v[r] = hn::MulAdd(v[r], vdA[t], hn::Mul(u[t][r], b));
        acc[t][r] = hn::MulAdd(v[r], c, acc[t][r]);
      }
    }
    for (int r = 0; r < R; ++r) hn::StoreU(v[r], d, S + (p + r) * N + i);
  }
  for (int t = 0; t < T; ++t)
    for (int r = 0; r < R; ++r) {
      float sum = hn::GetLane(hn::SumOfLanes(d, acc[t][r]));
      for (int64_t k = i; k < N; ++k) {
        float& st = S[(p + r) * N + k];
        st = std::fma(st, tok[t].dA, us[t][r] * tok[t].B[k]);
        sum = std::fma(st, tok[t].C[k], sum);
      }
      tok[t].y[p + r] = std::fma(Dh, tok[t].x[p + r], sum);
    }
}

template <int T>
HWY_INLINE void RecurrentTokens(DF d, float* S, int64_t P, int64_t N, const RecurrentToken* tok,
                                float Dh) {
  int64_t p = 0;
  for (; p + 4 <= P; p += 4) RecurrentRows<4, T>(d, S, N, tok, p, Dh);
  for (; p < P; ++p) RecurrentRows<1, T>(d, S, N, tok, p, Dh);
}

void ScanRecurrent(const Mamba2Dims& dm, const Mamba2ScanArgs& a, ThreadPool& pool) {
  const int64_t H = dm.heads, P = dm.head_dim, N = dm.state, per_group = H / dm.groups;
  pool.parallel_for(H, [&](int64_t h) {
    const DF d;
    const int64_t g = h / per_group;
    float* S = a.ssm_state + h * P * N;
    const float Ah = a.A[h], Dh = a.D[h];
    auto token = [&](int64_t t) {
      const float dt = a.dt[t * H + h];
      return RecurrentToken{a.x + t * a.x_stride + h * P, a.B + t * a.bc_stride + g * N,
                            a.C + t * a.bc_stride + g * N, dt, std::exp(dt * Ah),
                            a.y + t * a.y_stride + h * P};
    };
    int64_t t = 0;
    for (; t + 2 <= a.n; t += 2) {
      const RecurrentToken tok[2] = {token(t), token(t + 1)};
      RecurrentTokens<2>(d, S, P, N, tok, Dh);
    }
    if (t < a.n) {
      const RecurrentToken tok[1] = {token(t)};
      RecurrentTokens<1>(d, S, P, N, tok, Dh);
    }
  });
}

// ---------------------------------------------------------------------------------------------
// Chunked scan.

// acc[r][v] += sum_{k < K} A[r * a_r + k * a_k] * Bm[k * ldb + v * lanes]: an outer-product
// tile, R broadcasts and V vector loads per k for R * V multiply-adds.
template <int R, int V>
HWY_INLINE void TileMulAdd(DF d, const float* HWY_RESTRICT A, int64_t a_r, int64_t a_k,
                           const float* HWY_RESTRICT Bm, int64_t ldb, int64_t K, VF (&acc)[R][V]) {
  const int64_t NL = int64_t(hn::Lanes(d));
  for (int64_t k = 0; k < K; ++k) {
    VF b[V];
    for (int v = 0; v < V; ++v) b[v] = hn::LoadU(d, Bm + k * ldb + v * NL);
    for (int r = 0; r < R; ++r) {
      const VF av = hn::Set(d, A[r * a_r + k * a_k]);
      for (int v = 0; v < V; ++v) acc[r][v] = hn::MulAdd(av, b[v], acc[r][v]);
    }
  }
}

// Runs op.Block<R, V>(row0, col0) over rows [0, rows) in blocks of kTileRows (then single rows)
// and, per row block, column vectors [0, op.Vectors(row0, R)) in blocks of kTileVectors (then
// single vectors).
template <int R, class Op>
HWY_INLINE void BlockColumns(DF d, const Op& op, int64_t r0) {
  const int64_t NL = int64_t(hn::Lanes(d)), nv = op.Vectors(r0, R);
  int64_t v = 0;
  for (; v + kTileVectors <= nv; v += kTileVectors) op.template Block<R, kTileVectors>(d, r0, v * NL);
  for (; v < nv; ++v) op.template Block<R, 1>(d, r0, v * NL);
}
template <class Op>
void ForTiles(DF d, const Op& op, int64_t rows) {
  int64_t r = 0;
  for (; r + kTileRows <= rows; r += kTileRows) BlockColumns<kTileRows>(d, op, r);
  for (; r < rows; ++r) BlockColumns<1>(d, op, r);
}

// Columns [0, span) of score / decay rows that the tiles of the row block holding l read: up to
// the block's last row (kTileRows, or l itself for the single rows past the last whole block).
inline int64_t ScoreSpan(int64_t l, int64_t len, int64_t lanes) {
  const int64_t block_end = std::min(len, (l / kTileRows + 1) * kTileRows);
  const int64_t end = (len / kTileRows) * kTileRows > l ? block_end : l + 1;
  return round_up(end, lanes);
}

// G[l, s] = C_l . B_s for one (group, chunk): rows l < len, columns [0, ScoreSpan(l)).
struct ScoresOp {
  const float* C;    // the chunk's C rows of the group, packed [len, N]
  int64_t bc;        // row stride of C (N)
  const float* BT;   // B transposed [N, Lp], zero past len
  int64_t N, Lp, len;
  float* G;          // [len, Lp]
  int64_t Vectors(int64_t r0, int R) const {
    const int64_t NL = int64_t(hn::Lanes(DF()));
    return ScoreSpan(r0 + R - 1, len, NL) / NL;
  }
  template <int R, int V>
  HWY_INLINE void Block(DF d, int64_t r0, int64_t col0) const {
    const int64_t NL = int64_t(hn::Lanes(d));
    VF acc[R][V];
    for (int r = 0; r < R; ++r)
      for (int v = 0; v < V; ++v) acc[r][v] = hn::Zero(d);
    TileMulAdd<R, V>(d, C + r0 * bc, bc, 1, BT + col0, Lp, N, acc);
    for (int r = 0; r < R; ++r)
      for (int v = 0; v < V; ++v) hn::StoreU(acc[r][v], d, G + (r0 + r) * Lp + col0 + v * NL);
  }
};

// Y[l, :] = exp(cum_l) (C_l . S^T) + M[l, :] X + D x_l for one (head, chunk), written to y.
struct OutputOp {
  const float* C;      // the chunk's C rows of the group, packed [len, bc]
  int64_t bc;
  const float* ST;     // state transposed [N, Pp]
  const float* M;      // [len, Lp], zero past the diagonal within the tiles' spans
  const float* X;      // x of the chunk [len, Pp], zero padded
  const float* decay;  // [len] exp(cum_l)
  float Dh;
  int64_t N, Pp, Lp, len, P;
  float* y;            // the chunk's first row, at the head
  int64_t ys;
  int64_t Vectors(int64_t, int) const { return Pp / int64_t(hn::Lanes(DF())); }
  template <int R, int V>
  HWY_INLINE void Block(DF d, int64_t r0, int64_t col0) const {
    const int64_t NL = int64_t(hn::Lanes(d));
    VF acc[R][V];
    for (int r = 0; r < R; ++r)
      for (int v = 0; v < V; ++v) acc[r][v] = hn::Zero(d);
    TileMulAdd<R, V>(d, C + r0 * bc, bc, 1, ST + col0, Pp, N, acc);
    for (int r = 0; r < R; ++r) {
      const VF dec = hn::Set(d, decay[r0 + r]);
      for (int v = 0; v < V; ++v) acc[r][v] = hn::Mul(acc[r][v], dec);
    }
    TileMulAdd<R, V>(d, M + r0 * Lp, Lp, 1, X + col0, Pp, std::min(r0 + R, len), acc);
    const VF vD = hn::Set(d, Dh);
    for (int r = 0; r < R; ++r) {
      float* out = y + (r0 + r) * ys;
      for (int v = 0; v < V; ++v) {
        const int64_t c = col0 + v * NL;
        const VF o = hn::MulAdd(vD, hn::LoadU(d, X + (r0 + r) * Pp + c), acc[r][v]);
        if (c + NL <= P) {
          hn::StoreU(o, d, out + c);
        } else {  // the head's last partial vector: never write into the next head
          HWY_ALIGN float tmp[HWY_MAX_BYTES / sizeof(float)];
          hn::Store(o, d, tmp);
          for (int64_t k = 0; c + k < P; ++k) out[c + k] = tmp[k];
        }
      }
    }
  }
};

// S^T[i, :] = total * S^T[i, :] + sum_s B_s[i] Xw[s, :] for one (head, chunk).
struct StateOp {
  const float* B;   // the chunk's B rows of the group, packed [len, bc]
  int64_t bc;
  const float* Xw;  // [len, Pp] exp(cum_L-1 - cum_s) dt_s x_s
  float* ST;        // [N, Pp]
  float total;      // exp(cum_L-1)
  int64_t Pp, len;
  int64_t Vectors(int64_t, int) const { return Pp / int64_t(hn::Lanes(DF())); }
  template <int R, int V>
  HWY_INLINE void Block(DF d, int64_t r0, int64_t col0) const {
    const int64_t NL = int64_t(hn::Lanes(d));
    const VF vt = hn::Set(d, total);
    VF acc[R][V];
    for (int r = 0; r < R; ++r)
      for (int v = 0; v < V; ++v) acc[r][v] = hn::Mul(vt, hn::LoadU(d, ST + (r0 + r) * Pp + col0 + v * NL));
    TileMulAdd<R, V>(d, B + r0, 1, bc, Xw + col0, Pp, len, acc);
    for (int r = 0; r < R; ++r)
      for (int v = 0; v < V; ++v) hn::StoreU(acc[r][v], d, ST + (r0 + r) * Pp + col0 + v * NL);
  }
};

// In place exp over x[0, n), n a multiple of the lanes.
HWY_INLINE void ExpInPlace(DF d, float* x, int64_t n) {
  const int64_t NL = int64_t(hn::Lanes(d));
  for (int64_t i = 0; i < n; i += NL) hn::StoreU(hn::Exp(d, hn::LoadU(d, x + i)), d, x + i);
}

void ScanChunked(const Mamba2Dims& dm, const Mamba2ScanArgs& a, int64_t chunk_size,
                 ThreadPool& pool) {
  const DF d;
  const int64_t NL = int64_t(hn::Lanes(d));
  const int64_t H = dm.heads, P = dm.head_dim, N = dm.state, G = dm.groups, per_group = H / G;
  const int64_t n = a.n, L = std::min(chunk_size, n), Lp = round_up(L, NL), Pp = round_up(P, NL);
  const int64_t chunks = (n + chunk_size - 1) / chunk_size;
  // Per (group, chunk): the scores [L, Lp], then the chunk's B and C rows packed [L, N] each.
  // The heads read B and C from the packed copies: in place they lie one in_proj row apart
  // (tens of KB), a TLB miss per row.
  const int64_t score_floats = L * Lp, unit_floats = score_floats + 2 * L * N;
  const int64_t window = std::max<int64_t>(1, kScoreWindowBytes / (G * unit_floats * 4));
  // Reused by the calling thread across calls (no page faults or zeroing per call); every
  // element read is written first. (A thread_local is not captured: the workers see the
  // calling thread's buffer through this pointer.)
  thread_local std::vector<float> window_buffer;
  window_buffer.resize(size_t(std::min(window, chunks) * G * unit_floats));
  float* const units = window_buffer.data();

  for (int64_t w0 = 0; w0 < chunks; w0 += window) {
    const int64_t wn = std::min(window, chunks - w0);
    // 1. Per (group, chunk) of the window: B and C packed, the C.B scores.
    pool.parallel_for(G * wn, [&](int64_t task) {
      const int64_t g = task / wn, c = w0 + task % wn;
      const int64_t c0 = c * chunk_size, len = std::min(chunk_size, n - c0);
      float* unit = units + task * unit_floats;
      float* Bp = unit + score_floats;
      float* Cp = Bp + L * N;
      for (int64_t s = 0; s < len; ++s) {
        const float* B = a.B + (c0 + s) * a.bc_stride + g * N;
        const float* C = a.C + (c0 + s) * a.bc_stride + g * N;
        std::copy(B, B + N, Bp + s * N);
        std::copy(C, C + N, Cp + s * N);
      }
      thread_local std::vector<float> bt;
      bt.resize(size_t(N * Lp));
      for (int64_t i = 0; i < N; ++i) {
        for (int64_t s = 0; s < len; ++s) bt[size_t(i * Lp + s)] = Bp[s * N + i];
        for (int64_t s = len; s < Lp; ++s) bt[size_t(i * Lp + s)] = 0.f;
      }
      const ScoresOp op{Cp, N, bt.data(), N, Lp, len, unit};
      ForTiles(DF(), op, len);
    });
    // 2. Per head, the window's chunks in order, the state carried in registers' reach.
    pool.parallel_for(H, [&](int64_t h) {
      const DF dd;
      const int64_t g = h / per_group;
      const float Ah = a.A[h], Dh = a.D[h];
      thread_local std::vector<float> buf;
      thread_local std::vector<double> cum;
      buf.resize(size_t(N * Pp + 2 * L * Pp + L * Lp + 5 * Lp));
      cum.resize(size_t(L));
      float* ST = buf.data();
      float* X = ST + N * Pp;
      float* Xw = X + L * Pp;
      float* M = Xw + L * Pp;
      float* dts = M + L * Lp;
      float* hi = dts + Lp;    // cum as a float pair hi + lo: differences of nearby cums exact
      float* lo = hi + Lp;
      float* decay = lo + Lp;  // exp(cum_l)
      float* wdec = decay + Lp;  // exp(cum_L-1 - cum_s)
      float* S = a.ssm_state + h * P * N;
      for (int64_t i = 0; i < N; ++i) {
        for (int64_t p = 0; p < P; ++p) ST[i * Pp + p] = S[p * N + i];
        for (int64_t p = P; p < Pp; ++p) ST[i * Pp + p] = 0.f;
      }
      for (int64_t c = w0; c < w0 + wn; ++c) {
        const int64_t c0 = c * chunk_size, len = std::min(chunk_size, n - c0);
        const float* Gc = units + (g * wn + (c - w0)) * unit_floats;
        const float* Bc = Gc + score_floats;
        const float* Cc = Bc + L * N;
        // Decays from the cumulative sum in double (differences of long sums would lose bits).
        double run = 0;
        for (int64_t l = 0; l < len; ++l) {
          dts[l] = a.dt[(c0 + l) * H + h];
          run += double(dts[l]) * double(Ah);
          cum[size_t(l)] = run;
          hi[l] = float(run);
          lo[l] = float(run - double(hi[l]));
          decay[l] = float(run);
        }
        for (int64_t l = 0; l < len; ++l) wdec[l] = float(run - cum[size_t(l)]);
        for (int64_t l = len; l < Lp; ++l) dts[l] = hi[l] = lo[l] = decay[l] = wdec[l] = 0.f;
        ExpInPlace(dd, decay, Lp);
        ExpInPlace(dd, wdec, Lp);
        const float total = float(std::exp(run));
        // The chunk's x, and x weighted by its decay to the chunk's end. The rows lie one
        // in_proj row apart: prefetched a few rows ahead (the hardware prefetcher does not
        // follow such strides).
        constexpr int64_t kAhead = 6;
        for (int64_t s = 0; s < len; ++s) {
          if (s + kAhead < len) {
            const char* next = reinterpret_cast<const char*>(a.x + (c0 + s + kAhead) * a.x_stride + h * P);
            for (int64_t b = 0; b < P * 4; b += 64) __builtin_prefetch(next + b);
          }
          const float* xs = a.x + (c0 + s) * a.x_stride + h * P;
          const VF ws = hn::Set(dd, wdec[s] * dts[s]);
          float* xr = X + s * Pp;
          float* wr = Xw + s * Pp;
          int64_t p = 0;
          for (; p + NL <= P; p += NL) {
            const VF v = hn::LoadU(dd, xs + p);
            hn::StoreU(v, dd, xr + p);
            hn::StoreU(hn::Mul(ws, v), dd, wr + p);
          }
          for (; p < P; ++p) {
            xr[p] = xs[p];
            wr[p] = wdec[s] * dts[s] * xs[p];
          }
          for (; p < Pp; ++p) xr[p] = wr[p] = 0.f;
        }
        // M[l, s] = G[l, s] exp(cum_l - cum_s) dt_s for s <= l, zero past l.
        for (int64_t l = 0; l < len; ++l) {
          const VF hl = hn::Set(dd, hi[l]), ll = hn::Set(dd, lo[l]);
          const int64_t span = ScoreSpan(l, len, NL);
          for (int64_t s = 0; s < span; s += NL) {
            const VF arg = hn::Add(hn::Sub(hl, hn::LoadU(dd, hi + s)), hn::Sub(ll, hn::LoadU(dd, lo + s)));
            // Past the diagonal the argument is positive: capped at 0 so nothing overflows.
            const VF e = hn::Exp(dd, hn::Min(arg, hn::Zero(dd)));
            const VF m = hn::Mul(hn::Mul(e, hn::LoadU(dd, Gc + l * Lp + s)), hn::LoadU(dd, dts + s));
            const auto keep = hn::FirstN(dd, size_t(std::max<int64_t>(0, l + 1 - s)));
            hn::StoreU(hn::IfThenElseZero(keep, m), dd, M + l * Lp + s);
          }
        }
        const OutputOp out{Cc, N, ST, M, X, decay, Dh, N, Pp, Lp, len, P,
                           a.y + c0 * a.y_stride + h * P, a.y_stride};
        ForTiles(dd, out, len);
        const StateOp st{Bc, N, Xw, ST, total, Pp, len};
        ForTiles(dd, st, N);
      }
      for (int64_t p = 0; p < P; ++p)
        for (int64_t i = 0; i < N; ++i) S[p * N + i] = ST[i * Pp + p];
    });
  }
}

// ---------------------------------------------------------------------------------------------
// Gated grouped RMSNorm.

void GatedRmsNorm(const Mamba2Dims& dm, float* y, int64_t y_stride, const float* z,
                  int64_t z_stride, int64_t n, const float* weight, double eps, ThreadPool& pool) {
  const int64_t G = dm.groups, gs = dm.inner() / G, units = n * G;
  const float feps = float(eps);
  pool.parallel_for((units + kNormUnits - 1) / kNormUnits, [&](int64_t task) {
    const DF d;
    const int64_t NL = int64_t(hn::Lanes(d));
    for (int64_t u = task * kNormUnits; u < std::min(units, (task + 1) * kNormUnits); ++u) {
      const int64_t t = u / G, g = u % G;
      float* yr = y + t * y_stride + g * gs;
      const float* zr = z + t * z_stride + g * gs;
      const float* wr = weight + g * gs;
      VF s0 = hn::Zero(d), s1 = hn::Zero(d);
      int64_t i = 0;
      for (; i + 2 * NL <= gs; i += 2 * NL) {
        const VF a = hn::Mul(hn::LoadU(d, yr + i), SiluV(d, hn::LoadU(d, zr + i)));
        const VF b = hn::Mul(hn::LoadU(d, yr + i + NL), SiluV(d, hn::LoadU(d, zr + i + NL)));
        hn::StoreU(a, d, yr + i);
        hn::StoreU(b, d, yr + i + NL);
        s0 = hn::MulAdd(a, a, s0);
        s1 = hn::MulAdd(b, b, s1);
      }
      float ss = hn::GetLane(hn::SumOfLanes(d, hn::Add(s0, s1)));
      for (; i < gs; ++i) {
        const float v = yr[i] * SiluScalar(zr[i]);
        yr[i] = v;
        ss += v * v;
      }
      const float inv = 1.f / std::sqrt(ss / float(gs) + feps);
      const VF vinv = hn::Set(d, inv);
      i = 0;
      for (; i + NL <= gs; i += NL)
        hn::StoreU(hn::Mul(hn::LoadU(d, wr + i), hn::Mul(hn::LoadU(d, yr + i), vinv)), d, yr + i);
      for (; i < gs; ++i) yr[i] = wr[i] * (yr[i] * inv);
    }
  });
}

}  // namespace HWY_NAMESPACE
}  // namespace qf
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace qf {
namespace {

void check_stride(const char* fn, const char* name, int64_t stride, int64_t width, const char* what) {
  if (stride < width) fail("{}: {} {} is less than {} {}", fn, name, stride, what, width);
}

void check_scan_args(const char* fn, const Mamba2Dims& d, const Mamba2ScanArgs& a) {
  mamba2_check_dims(d);
  if (a.n < 0) fail("{}: token count n {} is negative", fn, a.n);
  if (a.n == 0) return;
  if (!a.x || !a.B || !a.C || !a.dt || !a.A || !a.D || !a.y || !a.ssm_state)
    fail("{}: a null pointer among x, B, C, dt, A, D, y, ssm_state", fn);
  check_stride(fn, "x_stride", a.x_stride, d.inner(), "the inner size heads * head_dim");
  check_stride(fn, "y_stride", a.y_stride, d.inner(), "the inner size heads * head_dim");
  check_stride(fn, "bc_stride", a.bc_stride, d.groups * d.state, "groups * state");
}

}  // namespace

HWY_EXPORT(Conv1dSilu);
HWY_EXPORT(ScanRecurrent);
HWY_EXPORT(ScanChunked);
HWY_EXPORT(GatedRmsNorm);

void mamba2_check_dims(const Mamba2Dims& d) {
  if (d.heads <= 0) fail("mamba2: heads (mamba_num_heads) {} must be positive", d.heads);
  if (d.head_dim <= 0) fail("mamba2: head_dim (mamba_head_dim) {} must be positive", d.head_dim);
  if (d.groups <= 0) fail("mamba2: groups (n_groups) {} must be positive", d.groups);
  if (d.state <= 0) fail("mamba2: state (ssm_state_size) {} must be positive", d.state);
  if (d.conv_kernel < 1) fail("mamba2: conv_kernel {} must be at least 1", d.conv_kernel);
  if (d.heads % d.groups != 0)
    fail("mamba2: groups (n_groups) {} does not divide heads (mamba_num_heads) {}", d.groups, d.heads);
}

void mamba2_conv1d_silu(const Mamba2Dims& d, float* xbc, int64_t n, int64_t stride,
                        const float* weight, const float* bias, float* state, ThreadPool& pool) {
  mamba2_check_dims(d);
  const char* fn = "mamba2_conv1d_silu";
  if (n < 0) fail("{}: token count n {} is negative", fn, n);
  if (n == 0) return;
  if (!xbc || !weight) fail("{}: null xbc or weight", fn);
  if (d.conv_kernel > 1 && !state) fail("{}: null conv state with conv_kernel {}", fn, d.conv_kernel);
  check_stride(fn, "stride", stride, d.conv_dim(), "conv_dim");
  HWY_DYNAMIC_DISPATCH(Conv1dSilu)(d, xbc, n, stride, weight, bias, state, pool);
}

void mamba2_dt(const Mamba2Dims& d, const float* raw, int64_t raw_stride, int64_t n,
               const float* dt_bias, float lo, float hi, float* out) {
  mamba2_check_dims(d);
  const char* fn = "mamba2_dt";
  if (n < 0) fail("{}: token count n {} is negative", fn, n);
  if (!(lo <= hi)) fail("{}: dt limits [{}, {}] are empty", fn, lo, hi);
  if (n == 0) return;
  if (!raw || !dt_bias || !out) fail("{}: null raw, dt_bias or out", fn);
  check_stride(fn, "raw_stride", raw_stride, d.heads, "heads");
  for (int64_t t = 0; t < n; ++t)
    for (int64_t h = 0; h < d.heads; ++h) {
      const float v = raw[t * raw_stride + h] + dt_bias[h];
      const float sp = v > 20.f ? v : std::log1p(std::exp(v));
      out[t * d.heads + h] = std::min(std::max(sp, lo), hi);
    }
}

void mamba2_scan_recurrent(const Mamba2Dims& d, const Mamba2ScanArgs& a, ThreadPool& pool) {
  check_scan_args("mamba2_scan_recurrent", d, a);
  if (a.n == 0) return;
  HWY_DYNAMIC_DISPATCH(ScanRecurrent)(d, a, pool);
}

void mamba2_scan_chunked(const Mamba2Dims& d, const Mamba2ScanArgs& a, int64_t chunk_size,
                         ThreadPool& pool) {
  if (chunk_size <= 0) fail("mamba2_scan_chunked: chunk_size {} must be positive", chunk_size);
  check_scan_args("mamba2_scan_chunked", d, a);
  if (a.n == 0) return;
  HWY_DYNAMIC_DISPATCH(ScanChunked)(d, a, std::min(chunk_size, kMamba2MaxChunk), pool);
}

void mamba2_scan(const Mamba2Dims& d, const Mamba2ScanArgs& a, int64_t chunk_size, ThreadPool& pool) {
  if (chunk_size <= 0) fail("mamba2_scan: chunk_size {} must be positive", chunk_size);
  if (a.n < kMamba2ChunkedMinTokens) mamba2_scan_recurrent(d, a, pool);
  else mamba2_scan_chunked(d, a, chunk_size, pool);
}

void mamba2_gated_rmsnorm(const Mamba2Dims& d, float* y, int64_t y_stride, const float* z,
                          int64_t z_stride, int64_t n, const float* weight, double eps,
                          ThreadPool& pool) {
  mamba2_check_dims(d);
  const char* fn = "mamba2_gated_rmsnorm";
  if (n < 0) fail("{}: token count n {} is negative", fn, n);
  if (!(eps >= 0)) fail("{}: eps {} must be non-negative", fn, eps);
  if (n == 0) return;
  if (!y || !z || !weight) fail("{}: null y, z or weight", fn);
  check_stride(fn, "y_stride", y_stride, d.inner(), "the inner size heads * head_dim");
  check_stride(fn, "z_stride", z_stride, d.inner(), "the inner size heads * head_dim");
  HWY_DYNAMIC_DISPATCH(GatedRmsNorm)(d, y, y_stride, z, z_stride, n, weight, eps, pool);
}

}  // namespace qf
#endif

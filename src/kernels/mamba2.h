// The numeric kernels of a Mamba2 mixer (the SSD layer of Nemotron-H and other hybrid models),
// float32 in and out: the causal depthwise conv1d + SiLU over xBC, dt (softplus, clamped), the
// selective state space scan token by token (decode) or by the chunked SSD algorithm (prefill),
// and the gated grouped RMSNorm. The in_proj / out_proj Linears are the ordinary kernels'.
//
// One call covers consecutive tokens of one sequence; the conv state and the SSM state carry a
// sequence across calls (zeros at its start). Rows are read and written with strides, so the
// engine passes the in_proj output rows [z | xBC | dt] directly: x, B and C live inside the
// conv's output rows, dt and z inside the in_proj rows. SIMD with runtime dispatch
// (Highway), multi-threaded over heads (scan) or channels (conv). Results do not depend on the
// thread count. Every function throws qf::Error naming the quantity for impossible dims or
// arguments (checked once per call, never inside the loops).
#pragma once

#include <cstdint>

namespace qf {

class ThreadPool;  // core/thread_pool.h (parallel_for(n, fn(i)))

struct Mamba2Dims {
  int64_t heads = 0;       // nh (mamba_num_heads)
  int64_t head_dim = 0;    // P  (mamba_head_dim); I = heads * head_dim
  int64_t groups = 0;      // G  (n_groups): head h uses B/C group h / (heads / groups)
  int64_t state = 0;       // N  (ssm_state_size)
  int64_t conv_kernel = 0; // K  (conv_kernel)
  int64_t inner() const { return heads * head_dim; }
  int64_t conv_dim() const { return inner() + 2 * groups * state; }  // channels of xBC
  // Sizes of the per-sequence states, in floats: the SSM state [heads, P, N] and the conv
  // state [conv_dim, K - 1].
  int64_t ssm_state_floats() const { return heads * head_dim * state; }
  int64_t conv_state_floats() const { return conv_dim() * (conv_kernel - 1); }
};

// Throws qf::Error unless every dim is positive and groups divides heads (what all the functions
// below check first; the engine may call it once when it loads a layer).
void mamba2_check_dims(const Mamba2Dims& d);

// Causal depthwise conv1d over n consecutive tokens of one sequence, then SiLU, in place.
// xbc: [n rows, row stride `stride` >= conv_dim()], the first conv_dim() floats of each row are
// the channels. weight [conv_dim, K] (the checkpoint's conv1d.weight [conv_dim,1,K] as floats),
// bias [conv_dim] or null. state [conv_dim, K-1]: the K-1 inputs (pre-conv) before the first
// token (zeros at sequence start); on return it holds the last K-1 inputs (so decode = n=1
// calls; a sequence split into calls of any sizes gives the same bytes as one call). May be
// null when K == 1. out[t,c] = silu(bias[c] + sum_k w[c,k]*in[t-K+1+k, c]), the sum in k order.
void mamba2_conv1d_silu(const Mamba2Dims& d, float* xbc, int64_t n, int64_t stride,
                        const float* weight, const float* bias, float* state, ThreadPool& pool);

// dt[t,h] = clamp(softplus(raw[t*raw_stride + h] + dt_bias[h]), lo, hi) written to
// out[t*heads + h] (softplus as torch.nn.functional.softplus: x > 20 ? x : log1p(exp(x)); clamp
// as torch.clamp: min(max(x, lo), hi)). raw_stride >= heads, lo <= hi (hi may be +inf: the
// config's time_step_limit (time_step_min, inf)). Cheap: runs on the calling thread.
void mamba2_dt(const Mamba2Dims& d, const float* raw, int64_t raw_stride, int64_t n,
               const float* dt_bias, float lo, float hi, float* out);

struct Mamba2ScanArgs {
  int64_t n = 0;                                   // tokens (of one sequence)
  const float* x = nullptr; int64_t x_stride = 0;  // x[t*x_stride + h*P + p], x_stride >= I
  // B[t*bc_stride + g*N + i], C likewise; bc_stride >= groups * N.
  const float* B = nullptr; const float* C = nullptr; int64_t bc_stride = 0;
  const float* dt = nullptr;                       // [n, heads] from mamba2_dt
  const float* A = nullptr;                        // [heads] = -exp(A_log)
  const float* D = nullptr;                        // [heads]
  float* y = nullptr; int64_t y_stride = 0;        // y[t*y_stride + h*P + p] (may not alias x)
  float* ssm_state = nullptr;  // [heads, P, N] float32, in/out (zeros at sequence start)
};

// The selective state space recurrence, per head h, position t:
//   S[h] = S[h] * exp(dt[t,h]*A[h]) + dt[t,h] * x[t,h,:] ⊗ B[t,g(h),:]      (S: [P, N])
//   y[t,h,p] = sum_i S[h,p,i] * C[t,g(h),i] + D[h] * x[t,h,p]
// Token by token (decode, short n): one task per head, vectors over N, the head's state
// (P*N*4 bytes) read and written once per pair of tokens. The arithmetic per token does not
// depend on the call's length: a sequence in calls of any sizes gives the same bytes.
void mamba2_scan_recurrent(const Mamba2Dims& d, const Mamba2ScanArgs& a, ThreadPool& pool);

// The same result by the chunked SSD algorithm (prefill): chunks of `chunk_size` > 0 positions
// (counted from the call's first token); within a chunk the C·B scores times the decay
// exp(cumA_l - cumA_s) (s <= l) weigh dt_s x_s, plus the chunk's start state read through C
// with decay exp(cumA_l); the state is carried chunk to chunk. Agrees with
// mamba2_scan_recurrent to float32 rounding (transformers' torch `mamba2_chunk_scan` and
// mamba_ssm's kernels compute the same). The C·B scores are computed once per (group, chunk)
// and shared by the group's heads; everything else is register-blocked matrix products per
// head. Memory: the scores and the chunk's B and C rows packed, ~8 MB per window of chunks
// (more only when one chunk's alone exceed it), kept by the calling thread for its next call,
// plus per-thread scratch of about a chunk's rows. Chunks longer than kMamba2MaxChunk run as chunks of kMamba2MaxChunk: the same result to
// rounding, while the scores (L^2 per chunk) and the intra-chunk work (L/2 per position) grow
// with L.
inline constexpr int64_t kMamba2MaxChunk = 256;
void mamba2_scan_chunked(const Mamba2Dims& d, const Mamba2ScanArgs& a, int64_t chunk_size,
                         ThreadPool& pool);

// Below this many tokens the recurrence is faster than the chunked algorithm (whose fixed costs
// per call are the state transposed in and out and a chunk's scores); measured on the
// Nemotron-H Nano shape, one thread, the two cross between 32 and 48 tokens
// (bench/mamba2_bench.cpp).
inline constexpr int64_t kMamba2ChunkedMinTokens = 40;
// mamba2_scan_recurrent when a.n < kMamba2ChunkedMinTokens, else mamba2_scan_chunked (what the
// engine calls for prefill and decode alike; chunk_size is checked either way).
void mamba2_scan(const Mamba2Dims& d, const Mamba2ScanArgs& a, int64_t chunk_size, ThreadPool& pool);

// Gated grouped RMSNorm (Zamba2RMSNormGated / NemotronHRMSNormGated with
// norm_before_gate=False), in place on y [n, I] (row stride y_stride >= I): t = y * silu(z);
// each group of I/groups consecutive channels: t *= 1/sqrt(mean(t^2) + eps) (in float32, as
// torch); y = weight[c] * t. z[t*z_stride + c], z_stride >= I; weight [I]; eps >= 0.
void mamba2_gated_rmsnorm(const Mamba2Dims& d, float* y, int64_t y_stride, const float* z,
                          int64_t z_stride, int64_t n, const float* weight, double eps,
                          ThreadPool& pool);

}  // namespace qf

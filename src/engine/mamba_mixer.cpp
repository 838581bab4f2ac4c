// The Mamba2 mixer of a Nemotron-H layer (../shared/specs/moe-hybrid.md §3.3): in_proj, the
// causal convolution and the selective state space scan from the sequence's state
// (engine/mamba_cache.h), the gated group norm, out_proj. The numerics are kernels/mamba2's.
#include "core/thread_pool.h"
#include "engine/model.h"
#include "kernels/mamba2.h"

namespace qf {
namespace {

Mamba2Dims dims_of(const MambaSpec& m) {
  Mamba2Dims d;
  d.heads = m.heads;
  d.head_dim = m.head_dim;
  d.groups = m.groups;
  d.state = m.state;
  d.conv_kernel = m.conv_kernel;
  return d;
}

}  // namespace

void Model::mamba_mixer(int64_t l, const LayerSpec& spec, const LayerWeights& L, int64_t n,
                        LayerObserver* obs) {
  const MambaSpec& m = w_.arch.mamba;
  const Mamba2Dims d = dims_of(m);
  const int64_t inner = m.inner(), rows = m.in_proj_rows(), gn = m.groups * m.state;
  const LayerWeights::Mamba& mw = L.mamba;
  linear(L.linear(spec, LinearRole::in_proj), xb_.data(), n, zxbcdt_.data());

  // Each row's [z | xBC | dt]: the convolution runs in place on xBC, x / B / C are read there.
  float* xbc = zxbcdt_.data() + inner;
  mamba2_dt(d, zxbcdt_.data() + inner + m.conv_dim(), rows, n, mw.dt_bias.data(), float(m.dt_min),
            float(m.dt_max), dt_.data());
  auto scan_args = [&](int64_t t0, int64_t count, float* state) {
    Mamba2ScanArgs s;
    s.n = count;
    s.x = xbc + t0 * rows;
    s.x_stride = rows;
    s.B = xbc + t0 * rows + inner;
    s.C = xbc + t0 * rows + inner + gn;
    s.bc_stride = rows;
    s.dt = dt_.data() + t0 * m.heads;
    s.A = mw.a.data();
    s.D = mw.d.data();
    s.y = ssm_y_.data() + t0 * inner;
    s.y_stride = inner;
    s.ssm_state = state;
    return s;
  };
  const float* conv_bias = mw.conv_bias.empty() ? nullptr : mw.conv_bias.data();
  if (batch_pos_) {
    // decode_batch: row t is one step of sequence t, from its own state.
    for (int64_t t = 0; t < n; ++t) {
      MambaCache& c = mamba_[size_t(t)];
      mamba2_conv1d_silu(d, xbc + t * rows, 1, rows, mw.conv_weight.data(), conv_bias, c.conv(l),
                         *pool_);
      mamba2_scan_recurrent(d, scan_args(t, 1, c.ssm(l)), *pool_);
    }
  } else {
    MambaCache& c = mamba_[size_t(seq_)];
    mamba2_conv1d_silu(d, xbc, n, rows, mw.conv_weight.data(), conv_bias, c.conv(l), *pool_);
    // The recurrence for short runs, the chunked scan from kMamba2ChunkedMinTokens on (the same
    // result to float32 rounding).
    mamba2_scan(d, scan_args(0, n, c.ssm(l)), m.chunk_size, *pool_);
  }
  mamba2_gated_rmsnorm(d, ssm_y_.data(), inner, zxbcdt_.data(), rows, n, mw.norm.data(),
                       w_.arch.rms_norm_eps, *pool_);
  if (obs) obs->linear_input(LayerInput::ssm_out, kNoExpert, ssm_y_.data(), n, inner);
  linear(L.linear(spec, LinearRole::out_proj), ssm_y_.data(), n, xb_.data());
}

}  // namespace qf

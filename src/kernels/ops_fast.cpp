// Vectorized variants of ops.h for the fast kernel mode: SiLU gating with Highway's Exp (within
// 1 ulp of std::exp where it is defined) instead of the C library's scalar expf, and RMSNorm
// with its sum of squares in vector order. Highway, runtime dispatch.
#include "kernels/ops.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/ops_fast.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep

#include <hwy/contrib/math/math-inl.h>
#include <hwy/highway.h>

#include <cmath>

HWY_BEFORE_NAMESPACE();
namespace qf {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

void SiluMulFast(float* gate, const float* up, int64_t n) {
  const hn::ScalableTag<float> d;
  const int64_t N = int64_t(hn::Lanes(d));
  const auto one = hn::Set(d, 1.f);
  // Exp is defined up to 104 (inf past ln(FLT_MAX) ~ 88.72, as expf): the argument is clamped
  // there, so that g -> -inf gives g / inf = -0 as the scalar loop does.
  const auto cap = hn::Set(d, 100.f);
  int64_t i = 0;
  for (; i + N <= n; i += N) {
    const auto g = hn::LoadU(d, gate + i);
    const auto e = hn::Exp(d, hn::Min(hn::Neg(g), cap));
    hn::StoreU(hn::Mul(hn::Div(g, hn::Add(one, e)), hn::LoadU(d, up + i)), d, gate + i);
  }
  if (i < n) silu_mul(gate + i, up + i, n - i);
}

void RmsNormFast(const float* x, const float* weight, int64_t n, float eps, float* out) {
  const hn::ScalableTag<float> d;
  const int64_t N = int64_t(hn::Lanes(d));
  auto s0 = hn::Zero(d), s1 = hn::Zero(d);
  int64_t i = 0;
  for (; i + 2 * N <= n; i += 2 * N) {
    const auto a = hn::LoadU(d, x + i), b = hn::LoadU(d, x + i + N);
    s0 = hn::MulAdd(a, a, s0);
    s1 = hn::MulAdd(b, b, s1);
  }
  float ss = hn::GetLane(hn::SumOfLanes(d, hn::Add(s0, s1)));
  for (; i < n; ++i) ss += x[i] * x[i];
  // The scaling as rmsnorm computes it, element by element.
  const float inv = 1.0f / std::sqrt(ss / float(n) + eps);
  const auto vinv = hn::Set(d, inv);
  i = 0;
  for (; i + N <= n; i += N)
    hn::StoreU(hn::Mul(hn::LoadU(d, weight + i), hn::Mul(hn::LoadU(d, x + i), vinv)), d, out + i);
  for (; i < n; ++i) out[i] = weight[i] * (x[i] * inv);
}

}  // namespace HWY_NAMESPACE
}  // namespace qf
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace qf {
HWY_EXPORT(SiluMulFast);
void silu_mul_fast(float* gate, const float* up, int64_t n) {
  HWY_DYNAMIC_DISPATCH(SiluMulFast)(gate, up, n);
}
HWY_EXPORT(RmsNormFast);
void rmsnorm_fast(const float* x, const float* weight, int64_t n, float eps, float* out) {
  HWY_DYNAMIC_DISPATCH(RmsNormFast)(x, weight, n, eps, out);
}
}  // namespace qf
#endif

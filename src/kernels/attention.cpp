// Grouped-query attention over a typed KV cache, up to four query heads per pass so each key
// tile and value row is read from memory once for the heads that share it, with the outputs in
// registers: scores are vectors over the 16 positions of a key tile (keys are stored transposed
// per tile, so no horizontal sums), the weighted sum vectors over value channels. Only tails
// are scalar.
#include "kernels/attention.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/attention.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep

#include <hwy/highway.h>
#include <hwy/contrib/math/math-inl.h>

#include "core/numeric.h"
#include "kernels/simd-inl.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#ifndef QFORGE_KERNELS_ATTENTION_ONCE
#define QFORGE_KERNELS_ATTENTION_ONCE
namespace qf::kernels {
namespace {

template <KvCacheType kT>
struct KvElem;
template <>
struct KvElem<KvCacheType::f32> { using type = float; };
template <>
struct KvElem<KvCacheType::bf16> { using type = uint16_t; };
template <>
struct KvElem<KvCacheType::f16> { using type = uint16_t; };
template <>
struct KvElem<KvCacheType::fp8> { using type = uint8_t; };

// How far ahead of the reads the key tiles and value rows are prefetched (the hardware
// prefetcher alone falls behind on these streams); prefetches past the end are harmless.
constexpr int64_t kPrefetchBytes = 8192;

// What the vector loads give for an fp8 code: its E4M3 value times kFp8Unit (exact).
constexpr float kFp8Unit = 1.f / 256.f;

// The stored value as the vector loads widen it: fp8 without its scale and times kFp8Unit (the
// scale / kFp8Unit is applied once per score or output instead).
template <KvCacheType kT>
inline float kv_scalar(const typename KvElem<kT>::type* p) {
  if constexpr (kT == KvCacheType::f32) return *p;
  else if constexpr (kT == KvCacheType::bf16) return bf16_to_f32(*p);
  else if constexpr (kT == KvCacheType::f16) return f16_to_f32(*p);
  else return e4m3_to_f32(*p) * kFp8Unit;
}

}  // namespace
}  // namespace qf::kernels
#endif

HWY_BEFORE_NAMESPACE();
namespace qf::kernels {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Lanes of stored values widened to float32, fp8 without its scale and times 2^-8: E4M3 becomes
// the F16 with the same sign, exponent and mantissa bits (exact, subnormals included: both
// formats place the mantissa the same way), which is the E4M3 value / 2^8 (exponent biases 7
// and 15); kFp8Unit folds the 2^8 into the scales.
template <KvCacheType kT, class D>
HWY_INLINE hn::Vec<D> LoadKv(D d, const typename KvElem<kT>::type* HWY_RESTRICT p) {
  if constexpr (kT == KvCacheType::f32) {
    return hn::LoadU(d, p);
  } else if constexpr (kT == KvCacheType::bf16) {
    return LoadBF16AsF32(d, p);
  } else if constexpr (kT == KvCacheType::f16) {
    return LoadF16AsF32(d, p);
  } else {
    const hn::Rebind<uint8_t, D> d8;
    const hn::Rebind<uint16_t, D> d16;
    const hn::Rebind<hwy::float16_t, D> dh;
    const auto b = hn::PromoteTo(d16, hn::LoadU(d8, p));
    const auto bits = hn::Or(hn::ShiftLeft<8>(hn::And(b, hn::Set(d16, uint16_t(0x80)))),
                             hn::ShiftLeft<7>(hn::And(b, hn::Set(d16, uint16_t(0x7F)))));
    return hn::PromoteTo(d, hn::BitCast(dh, bits));
  }
}

// Scores of R query heads against whole key tiles [t0, t1): out[r * span + position - t0 * tile].
template <KvCacheType kT, int R>
void ScoreTiles(const float* HWY_RESTRICT q, int64_t hd, const typename KvElem<kT>::type* K,
                int64_t k_stride, int64_t t0, int64_t t1, float* HWY_RESTRICT out, int64_t span) {
  const hn::ScalableTag<float> d;
  constexpr int64_t N = HWY_LANES(float);
  static_assert(kKeyTile % N == 0, "a key tile is whole vectors");
  // Bytes of one channel's row of a tile: the pair loop below prefetches the two rows it reads,
  // kPrefetchBytes ahead, spread over the loop (a tile's 32 prefetches issued at once stalled
  // the loop on the line fill buffers: 58% of its samples on the instruction after them).
  constexpr int64_t kRowBytes = kKeyTile * int64_t(sizeof(*K));
  for (int64_t tile = t0; tile < t1; ++tile) {
    const auto* kt = K + tile * k_stride;
    const auto* ahead = reinterpret_cast<const char*>(kt) + kPrefetchBytes;
    float* o = out + (tile - t0) * kKeyTile;
    for (int64_t j = 0; j < kKeyTile; j += N) {
      // Two accumulators per head: FMA latency, not throughput, bounds one chain.
      hn::Vec<decltype(d)> acc[R], acc2[R];
      for (int r = 0; r < R; ++r) acc[r] = acc2[r] = hn::Zero(d);
      int64_t i = 0;
      for (; i + 2 <= hd; i += 2) {
        if (j == 0)
          for (int64_t b = (i * kRowBytes + 63) / 64 * 64; b < (i + 2) * kRowBytes; b += 64)
            __builtin_prefetch(ahead + b);
        const auto k = LoadKv<kT>(d, kt + i * kKeyTile + j);
        const auto k2 = LoadKv<kT>(d, kt + (i + 1) * kKeyTile + j);
        for (int r = 0; r < R; ++r) {
          acc[r] = hn::MulAdd(hn::Set(d, q[r * hd + i]), k, acc[r]);
          acc2[r] = hn::MulAdd(hn::Set(d, q[r * hd + i + 1]), k2, acc2[r]);
        }
      }
      if (i < hd) {
        if (j == 0)
          for (int64_t b = (i * kRowBytes + 63) / 64 * 64; b < (i + 1) * kRowBytes; b += 64)
            __builtin_prefetch(ahead + b);
        const auto k = LoadKv<kT>(d, kt + i * kKeyTile + j);
        for (int r = 0; r < R; ++r) acc[r] = hn::MulAdd(hn::Set(d, q[r * hd + i]), k, acc[r]);
      }
      for (int r = 0; r < R; ++r) hn::StoreU(hn::Add(acc[r], acc2[r]), d, o + r * span + j);
    }
  }
}

// out[r, c0 + c] = sum_p probs[r * stride + p] * v_p[c0 + c] for R heads and C vectors of
// channels (c < C * N), over positions [0, len) of V (rows of v_stride elements).
template <KvCacheType kT, int R, int C>
void WeighValues(const float* HWY_RESTRICT probs, int64_t stride, const typename KvElem<kT>::type* V,
                 int64_t v_stride, int64_t len, int64_t c0, float* HWY_RESTRICT out, int64_t vd) {
  const hn::ScalableTag<float> d;
  constexpr int64_t N = HWY_LANES(float);
  hn::Vec<decltype(d)> acc[R][C];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) acc[r][c] = hn::Zero(d);
  for (int64_t p = 0; p < len; ++p) {
    const auto* vp = V + p * v_stride + c0;
    // kPrefetchBytes ahead in the stream of rows (the hardware prefetcher alone falls behind).
    {
      const auto* ahead = reinterpret_cast<const char*>(vp) + kPrefetchBytes;
      for (int64_t b = 0; b < C * N * int64_t(sizeof(*V)); b += 64) __builtin_prefetch(ahead + b);
    }
    hn::Vec<decltype(d)> v[C];
    for (int c = 0; c < C; ++c) v[c] = LoadKv<kT>(d, vp + c * N);
    for (int r = 0; r < R; ++r) {
      const auto pr = hn::Set(d, probs[r * stride + p]);
      for (int c = 0; c < C; ++c) acc[r][c] = hn::MulAdd(pr, v[c], acc[r][c]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) hn::StoreU(acc[r][c], d, out + r * vd + c0 + c * N);
}

template <KvCacheType kT, int R>
void WeighAllValues(const float* probs, int64_t stride, const typename KvElem<kT>::type* V,
                    int64_t v_stride, int64_t len, float* out, int64_t vd) {
  constexpr int64_t N = HWY_LANES(float);
  int64_t c0 = 0;
  for (; c0 + 4 * N <= vd; c0 += 4 * N)
    WeighValues<kT, R, 4>(probs, stride, V, v_stride, len, c0, out, vd);
  for (; c0 + N <= vd; c0 += N) WeighValues<kT, R, 1>(probs, stride, V, v_stride, len, c0, out, vd);
  for (; c0 < vd; ++c0)
    for (int r = 0; r < R; ++r) {
      float o = 0.f;
      for (int64_t p = 0; p < len; ++p) o += probs[r * stride + p] * kv_scalar<kT>(V + p * v_stride + c0);
      out[r * vd + c0] = o;
    }
}

template <KvCacheType kT>
void AttendT(const AttentionGroup& g) {
  using T = typename KvElem<kT>::type;
  const hn::ScalableTag<float> d;
  const int64_t N = int64_t(hn::Lanes(d));
  const int64_t H = g.heads, hd = g.head_dim, vd = g.v_head_dim, len = g.end - g.begin;
  // Scores of the whole tiles that hold [begin, end); the softmax reads the part in range.
  const int64_t t0 = g.begin / kKeyTile, t1 = (g.end + kKeyTile - 1) / kKeyTile;
  const int64_t span = (t1 - t0) * kKeyTile, off = g.begin - t0 * kKeyTile;
  // Reused by this thread across calls: scores / probabilities [H, span], then the F16-rounded
  // queries.
  thread_local std::vector<float> scratch;
  scratch.resize(size_t(H * span + (g.f16_queries_and_probs ? H * hd : 0)));
  float* scores = scratch.data();
  const float* q = g.q;
  if (g.f16_queries_and_probs) {
    float* q16 = scores + H * span;
    for (int64_t i = 0; i < H * hd; ++i) q16[i] = f16_to_f32(f32_to_f16(g.q[i]));
    q = q16;
  }

  const T* K = static_cast<const T*>(g.k);
  for (int64_t h = 0; h < H; h += 4) {
    const float* qh = q + h * hd;
    float* o = scores + h * span;
    switch (std::min<int64_t>(4, H - h)) {
      case 4: ScoreTiles<kT, 4>(qh, hd, K, g.k_stride, t0, t1, o, span); break;
      case 3: ScoreTiles<kT, 3>(qh, hd, K, g.k_stride, t0, t1, o, span); break;
      case 2: ScoreTiles<kT, 2>(qh, hd, K, g.k_stride, t0, t1, o, span); break;
      default: ScoreTiles<kT, 1>(qh, hd, K, g.k_stride, t0, t1, o, span); break;
    }
  }

  // Softmax per head over [begin, end) (the sink, when given, joins the max and the sum).
  const float score_mul = g.scale * (kT == KvCacheType::fp8 ? g.k_scale / kFp8Unit : 1.f);
  const auto vmul = hn::Set(d, score_mul);
  const int64_t len_main = len / N * N;
  for (int64_t h = 0; h < H; ++h) {
    float* x = scores + h * span + off;
    auto vm = hn::Set(d, -INFINITY);
    int64_t i = 0;
    if (g.softcap > 0) {
      for (; i < len; ++i) x[i] = std::tanh(x[i] * score_mul / g.softcap) * g.softcap;
      for (i = 0; i < len_main; i += N) vm = hn::Max(vm, hn::LoadU(d, x + i));
    } else {
      for (; i < len_main; i += N) {
        const auto s = hn::Mul(hn::LoadU(d, x + i), vmul);
        hn::StoreU(s, d, x + i);
        vm = hn::Max(vm, s);
      }
      for (; i < len; ++i) x[i] *= score_mul;
    }
    float m = hn::GetLane(hn::MaxOfLanes(d, vm));
    for (i = len_main; i < len; ++i) m = std::max(m, x[i]);
    const bool part = g.part_max != nullptr;
    if (g.sinks && !part) m = std::max(m, g.sinks[h]);
    const auto vmax = hn::Set(d, m);
    auto vs = hn::Zero(d);
    for (i = 0; i < len_main; i += N) {
      const auto e = hn::Exp(d, hn::Sub(hn::LoadU(d, x + i), vmax));
      hn::StoreU(e, d, x + i);
      vs = hn::Add(vs, e);
    }
    float sum = hn::GetLane(hn::SumOfLanes(d, vs));
    for (; i < len; ++i) {
      x[i] = std::exp(x[i] - m);
      sum += x[i];
    }
    if (g.sinks && !part) sum += std::exp(g.sinks[h] - m);
    if (part) {
      g.part_max[h] = m;
      g.part_sum[h] = sum;
      continue;  // left unnormalised
    }
    const float inv = 1.0f / sum;
    const auto vinv = hn::Set(d, inv);
    for (i = 0; i < len_main; i += N) hn::StoreU(hn::Mul(hn::LoadU(d, x + i), vinv), d, x + i);
    for (; i < len; ++i) x[i] *= inv;
    if (g.f16_queries_and_probs)
      for (i = 0; i < len; ++i) x[i] = f16_to_f32(f32_to_f16(x[i]));
  }

  const T* V = static_cast<const T*>(g.v) + g.begin * g.v_stride;
  for (int64_t h = 0; h < H; h += 4) {
    const float* ph = scores + h * span + off;
    float* o = g.out + h * vd;
    switch (std::min<int64_t>(4, H - h)) {
      case 4: WeighAllValues<kT, 4>(ph, span, V, g.v_stride, len, o, vd); break;
      case 3: WeighAllValues<kT, 3>(ph, span, V, g.v_stride, len, o, vd); break;
      case 2: WeighAllValues<kT, 2>(ph, span, V, g.v_stride, len, o, vd); break;
      default: WeighAllValues<kT, 1>(ph, span, V, g.v_stride, len, o, vd); break;
    }
  }
  if (kT == KvCacheType::fp8)
    for (int64_t i = 0; i < H * vd; ++i) g.out[i] *= g.v_scale / kFp8Unit;
}

void Attend(const AttentionGroup& g) {
  switch (g.type) {
    case KvCacheType::f32: return AttendT<KvCacheType::f32>(g);
    case KvCacheType::bf16: return AttendT<KvCacheType::bf16>(g);
    case KvCacheType::f16: return AttendT<KvCacheType::f16>(g);
    case KvCacheType::fp8: return AttendT<KvCacheType::fp8>(g);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace qf::kernels
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace qf {

std::string_view kv_cache_type_name(KvCacheType t) {
  switch (t) {
    case KvCacheType::f32: return "f32";
    case KvCacheType::bf16: return "bf16";
    case KvCacheType::f16: return "f16";
    case KvCacheType::fp8: return "fp8";
  }
  return "?";
}

std::optional<KvCacheType> parse_kv_cache_type(std::string_view name) {
  for (KvCacheType t : {KvCacheType::f32, KvCacheType::bf16, KvCacheType::f16, KvCacheType::fp8})
    if (name == kv_cache_type_name(t)) return t;
  return std::nullopt;
}

int kv_cache_type_bytes(KvCacheType t) {
  switch (t) {
    case KvCacheType::f32: return 4;
    case KvCacheType::bf16:
    case KvCacheType::f16: return 2;
    case KvCacheType::fp8: return 1;
  }
  return 4;
}

namespace kernels {
HWY_EXPORT(Attend);

void attend(const AttentionGroup& g) { HWY_DYNAMIC_DISPATCH(Attend)(g); }

void combine_attention_parts(int64_t parts, int64_t heads, int64_t vd, const float* outs,
                             const float* maxes, const float* sums, const float* sinks,
                             float* out) {
  for (int64_t h = 0; h < heads; ++h) {
    float m = sinks ? sinks[h] : -INFINITY;
    for (int64_t c = 0; c < parts; ++c) m = std::max(m, maxes[c * heads + h]);
    float sum = sinks ? std::exp(sinks[h] - m) : 0.f;
    float* o = out + h * vd;
    std::fill_n(o, vd, 0.f);
    for (int64_t c = 0; c < parts; ++c) {
      const float w = std::exp(maxes[c * heads + h] - m);
      sum += w * sums[c * heads + h];
      const float* oc = outs + c * heads * vd + h * vd;
      for (int64_t i = 0; i < vd; ++i) o[i] += w * oc[i];
    }
    const float inv = 1.0f / sum;
    for (int64_t i = 0; i < vd; ++i) o[i] *= inv;
  }
}

void kv_store(KvCacheType type, const float* x, int64_t n, float scale, void* dst) {
  switch (type) {
    case KvCacheType::f32: std::memcpy(dst, x, size_t(n) * sizeof(float)); return;
    case KvCacheType::bf16: {
      auto* o = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) o[i] = f32_to_bf16(x[i]);
      return;
    }
    case KvCacheType::f16: {
      auto* o = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) o[i] = f32_to_f16(x[i]);
      return;
    }
    case KvCacheType::fp8: {
      auto* o = static_cast<uint8_t*>(dst);
      for (int64_t i = 0; i < n; ++i) o[i] = f32_to_e4m3_satfinite(x[i] / scale);
      return;
    }
  }
}

void kv_load(KvCacheType type, const void* src, int64_t n, float scale, float* y) {
  switch (type) {
    case KvCacheType::f32: std::memcpy(y, src, size_t(n) * sizeof(float)); return;
    case KvCacheType::bf16:
      for (int64_t i = 0; i < n; ++i) y[i] = kv_scalar<KvCacheType::bf16>(static_cast<const uint16_t*>(src) + i);
      return;
    case KvCacheType::f16:
      for (int64_t i = 0; i < n; ++i) y[i] = kv_scalar<KvCacheType::f16>(static_cast<const uint16_t*>(src) + i);
      return;
    case KvCacheType::fp8:
      for (int64_t i = 0; i < n; ++i) y[i] = e4m3_to_f32(static_cast<const uint8_t*>(src)[i]) * scale;
      return;
  }
}

}  // namespace kernels
}  // namespace qf
#endif

// NVFP4 quantizer fast path: Highway kernels (one per target, chosen at run time) over F32, BF16
// and F16 input, split into block ranges over the thread pool. Bytes identical to
// nvfp4_quantize_reference.
#include "formats/nvfp4.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "formats/nvfp4_quantize_simd.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep

#include <hwy/highway.h>

#include "formats/simd-inl.h"

HWY_BEFORE_NAMESPACE();
namespace qf {
namespace HWY_NAMESPACE {
namespace {

// Blocks whose scales are computed together in one vector pass (a multiple of every lane count).
constexpr int64_t kScaleChunk = 16;

template <class Src>
void Nvfp4Blocks(const typename Src::T* HWY_RESTRICT x, int64_t n_blocks, float g,
                 uint8_t* HWY_RESTRICT packed, uint8_t* HWY_RESTRICT scales) {
  const hn::CappedTag<float, kNvfp4Block> d;  // a block is a whole number of vectors
  const hn::RebindToUnsigned<decltype(d)> du;
  const size_t N = hn::Lanes(d);
  const auto six_g = hn::Set(d, 6.0f * g);
  const auto vg = hn::Set(d, g);

  HWY_ALIGN float bamax[kScaleChunk];
  HWY_ALIGN float divisor[kScaleChunk];
  HWY_ALIGN uint32_t code[kScaleChunk];
  for (int64_t b0 = 0; b0 < n_blocks; b0 += kScaleChunk) {
    const int64_t nb = std::min(kScaleChunk, n_blocks - b0);
    const typename Src::T* xc = x + b0 * kNvfp4Block;
    for (int64_t b = 0; b < nb; ++b) bamax[b] = BlockAmax<Src>(d, xc + b * kNvfp4Block, kNvfp4Block);
    for (int64_t b = nb; b < kScaleChunk; ++b) bamax[b] = 0.f;

    // Block scales of the chunk, vectorized: s = bamax / fl32(6g); 0 -> 1; clamp; E4M3; D = s8*g.
    for (int64_t b = 0; b < kScaleChunk; b += int64_t(N)) {
      auto s = hn::Div(hn::Load(d, bamax + b), six_g);
      s = hn::IfThenElse(hn::Eq(s, hn::Zero(d)), hn::Set(d, 1.0f), s);
      s = hn::Min(hn::Max(s, hn::Set(d, 0x1p-9f)), hn::Set(d, 448.0f));
      const auto s8 = E4M3Encode(d, s);
      hn::Store(s8, du, code + b);
      hn::Store(hn::Mul(E4M3DecodePositive(d, s8), vg), d, divisor + b);
    }

    for (int64_t b = 0; b < nb; ++b) {
      scales[b0 + b] = uint8_t(code[b]);
      const auto vd = hn::Set(d, divisor[b]);
      const typename Src::T* xb = xc + b * kNvfp4Block;
      uint8_t* out = packed + (b0 + b) * (kNvfp4Block / 2);
      for (size_t i = 0; i < size_t(kNvfp4Block); i += N) {
        // IEEE division, as the reference: a reciprocal multiply would round differently.
        const auto q = hn::Div(LoadAsF32<Src>(d, xb + i), vd);
        StoreNibbles(d, E2M1Codes(d, q), out, i);
      }
    }
  }
}

}  // namespace

// Quantizes blocks [first, first + count) of the flattened matrix (blocks never straddle rows).
void Nvfp4QuantizeRange(const WeightRows& w, float g, int64_t first, int64_t count,
                        uint8_t* packed, uint8_t* scales) {
  const int64_t e = first * kNvfp4Block;
  uint8_t* p = packed + first * (kNvfp4Block / 2);
  uint8_t* s = scales + first;
  switch (w.dtype) {
    case DType::BF16:
      Nvfp4Blocks<SrcBF16>(static_cast<const uint16_t*>(w.data) + e, count, g, p, s);
      break;
    case DType::F16:
      Nvfp4Blocks<SrcF16>(static_cast<const uint16_t*>(w.data) + e, count, g, p, s);
      break;
    default:
      Nvfp4Blocks<SrcF32>(static_cast<const float*>(w.data) + e, count, g, p, s);
      break;
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace qf
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include "core/error.h"
#include "core/thread_pool.h"
#include "formats/formats_internal.h"

#include <cmath>

namespace qf {

HWY_EXPORT(Nvfp4QuantizeRange);

void nvfp4_quantize(const WeightRows& w, float g, uint8_t* packed, uint8_t* scales,
                    ThreadPool& pool) {
  detail::check_weight_rows(w, kNvfp4Block, "nvfp4 quantize");
  if (!(g > 0.f) || std::isinf(g)) fail("nvfp4 quantize: global scale {} is not positive", g);
  const int64_t blocks = w.rows * (w.cols / kNvfp4Block);
  const detail::TaskSplit split = detail::split_tasks(blocks, kNvfp4Block);
  pool.parallel_for(split.tasks, [&](int64_t t) {
    const int64_t first = t * split.items_per_task;
    const int64_t count = std::min(split.items_per_task, blocks - first);
    HWY_DYNAMIC_DISPATCH(Nvfp4QuantizeRange)(w, g, first, count, packed, scales);
  });
}

}  // namespace qf
#endif  // HWY_ONCE

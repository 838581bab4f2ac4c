// MXFP4 quantizer fast path: Highway kernels (one per target, chosen at run time) over F32, BF16
// and F16 input, split into block ranges over the thread pool. Bytes identical to
// mxfp4_quantize_reference.
#include "formats/mxfp4.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "formats/mxfp4_quantize_simd.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep

#include <hwy/highway.h>

#include "formats/simd-inl.h"

#include <algorithm>

HWY_BEFORE_NAMESPACE();
namespace qf {
namespace HWY_NAMESPACE {
namespace {

// Blocks whose scales are computed together in one vector pass (a multiple of every lane count).
constexpr int64_t kScaleChunk = 16;

template <class Src>
void Mxfp4Blocks(const typename Src::T* HWY_RESTRICT x, int64_t n_blocks,
                 uint8_t* HWY_RESTRICT packed, uint8_t* HWY_RESTRICT scales) {
  const hn::CappedTag<float, 16> d;  // a block of 32 is a whole number of vectors
  const hn::RebindToUnsigned<decltype(d)> du;
  const hn::RebindToSigned<decltype(d)> di;
  const size_t N = hn::Lanes(d);

  HWY_ALIGN float amax[kScaleChunk];
  HWY_ALIGN float inv_scale[kScaleChunk];
  HWY_ALIGN uint32_t code[kScaleChunk];
  for (int64_t b0 = 0; b0 < n_blocks; b0 += kScaleChunk) {
    const int64_t nb = std::min(kScaleChunk, n_blocks - b0);
    const typename Src::T* xc = x + b0 * kMxfp4Block;
    for (int64_t b = 0; b < nb; ++b) amax[b] = BlockAmax<Src>(d, xc + b * kMxfp4Block, kMxfp4Block);
    for (int64_t b = nb; b < kScaleChunk; ++b) amax[b] = 0.f;

    for (int64_t b = 0; b < kScaleChunk; b += int64_t(N)) {
      // Biased exponent after rounding a mantissa fraction >= 0.75 up; code = clamp(E, 2, 254) - 2.
      const auto bits = hn::BitCast(du, hn::Load(d, amax + b));
      const auto e = hn::BitCast(di, hn::ShiftRight<23>(hn::Add(bits, hn::Set(du, 0x200000u))));
      const auto clamped = hn::Min(hn::Max(e, hn::Set(di, 2)), hn::Set(di, 254));
      const auto c = hn::BitCast(du, hn::Sub(clamped, hn::Set(di, 2)));
      hn::Store(c, du, code + b);
      // 1 / 2^(code - 127) = 2^(127 - code), a normal float for every code 0..252.
      hn::Store(hn::BitCast(d, hn::ShiftLeft<23>(hn::Sub(hn::Set(du, 254u), c))), d, inv_scale + b);
    }

    for (int64_t b = 0; b < nb; ++b) {
      scales[b0 + b] = uint8_t(code[b]);
      // x / 2^k and x * 2^-k are the same real number, so both round identically (even into
      // subnormals): the multiply is bit-identical to the reference's division.
      const auto vinv = hn::Set(d, inv_scale[b]);
      const typename Src::T* xb = xc + b * kMxfp4Block;
      uint8_t* out = packed + (b0 + b) * (kMxfp4Block / 2);
      for (size_t i = 0; i < size_t(kMxfp4Block); i += N) {
        const auto q = hn::Mul(LoadAsF32<Src>(d, xb + i), vinv);
        StoreNibbles(d, E2M1Codes(d, q), out, i);
      }
    }
  }
}

}  // namespace

// Quantizes blocks [first, first + count) of the flattened matrix (blocks never straddle rows).
void Mxfp4QuantizeRange(const WeightRows& w, int64_t first, int64_t count, uint8_t* packed,
                        uint8_t* scales) {
  const int64_t e = first * kMxfp4Block;
  uint8_t* p = packed + first * (kMxfp4Block / 2);
  uint8_t* s = scales + first;
  switch (w.dtype) {
    case DType::BF16:
      Mxfp4Blocks<SrcBF16>(static_cast<const uint16_t*>(w.data) + e, count, p, s);
      break;
    case DType::F16:
      Mxfp4Blocks<SrcF16>(static_cast<const uint16_t*>(w.data) + e, count, p, s);
      break;
    default:
      Mxfp4Blocks<SrcF32>(static_cast<const float*>(w.data) + e, count, p, s);
      break;
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace qf
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include "core/thread_pool.h"
#include "formats/formats_internal.h"

namespace qf {

HWY_EXPORT(Mxfp4QuantizeRange);

void mxfp4_quantize(const WeightRows& w, uint8_t* packed, uint8_t* scales, ThreadPool& pool) {
  detail::check_weight_rows(w, kMxfp4Block, "mxfp4 quantize");
  const int64_t blocks = w.rows * (w.cols / kMxfp4Block);
  const detail::TaskSplit split = detail::split_tasks(blocks, kMxfp4Block);
  pool.parallel_for(split.tasks, [&](int64_t t) {
    const int64_t first = t * split.items_per_task;
    const int64_t count = std::min(split.items_per_task, blocks - first);
    HWY_DYNAMIC_DISPATCH(Mxfp4QuantizeRange)(w, first, count, packed, scales);
  });
}

}  // namespace qf
#endif  // HWY_ONCE

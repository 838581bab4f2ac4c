// Per-target SIMD building blocks shared by the formats kernels: exact loads of F32/BF16/F16
// as float32, E2M1 and E4M3 encoders bit-identical to core/numeric.h, nibble packing.
// A Highway "-inl" header: include it after <hwy/foreach_target.h> so that it is compiled once
// per target (the include guard toggles with HWY_TARGET_TOGGLE).

#if defined(QFORGE_FORMATS_SIMD_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef QFORGE_FORMATS_SIMD_INL_H_
#undef QFORGE_FORMATS_SIMD_INL_H_
#else
#define QFORGE_FORMATS_SIMD_INL_H_
#endif

#include <hwy/highway.h>

#include <cstdint>
#include <type_traits>

HWY_BEFORE_NAMESPACE();
namespace qf {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Input element types, by tag: F32 as is, BF16 and F16 as raw 16-bit patterns.
struct SrcF32 {
  using T = float;
};
struct SrcBF16 {
  using T = uint16_t;
};
struct SrcF16 {
  using T = uint16_t;
};

// Loads Lanes(d) elements at p as float32. Exact for every finite input (BF16 is the top half of
// a float32; F16 -> F32 is exact, F16C on AVX2 and up, integer emulation below).
template <class Src, class D>
HWY_INLINE hn::Vec<D> LoadAsF32(D d, const typename Src::T* HWY_RESTRICT p) {
  if constexpr (std::is_same_v<Src, SrcF32>) {
    return hn::LoadU(d, p);
  } else if constexpr (std::is_same_v<Src, SrcBF16>) {
    const hn::Rebind<uint16_t, D> d16;
    const hn::RebindToUnsigned<D> du;
    return hn::BitCast(d, hn::ShiftLeft<16>(hn::PromoteTo(du, hn::LoadU(d16, p))));
  } else {
    const hn::Rebind<hwy::float16_t, D> dh;
    return hn::PromoteTo(d, hn::LoadU(dh, reinterpret_cast<const hwy::float16_t*>(p)));
  }
}

// E2M1 nibble of each lane, as e2m1_from_f32_modelopt: round to nearest with ties to the even
// mantissa, saturating at 6, sign bit iff q < 0. Counting thresholds passed ('>' at the bounds
// whose lower neighbour has the even mantissa, '>=' where the upper one has) is the RNE rule
// without a separate tie fix-up. NaN gives 0, as in the scalar version.
template <class D>
HWY_INLINE hn::Vec<hn::RebindToUnsigned<D>> E2M1Codes(D d, hn::Vec<D> q) {
  const hn::RebindToUnsigned<D> du;
  const auto a = hn::Abs(q);
  // Each passed threshold subtracts an all-ones lane, i.e. adds 1.
  auto idx = hn::Zero(du);
  idx = hn::Sub(idx, hn::BitCast(du, hn::VecFromMask(d, a > hn::Set(d, 0.25f))));
  idx = hn::Sub(idx, hn::BitCast(du, hn::VecFromMask(d, a >= hn::Set(d, 0.75f))));
  idx = hn::Sub(idx, hn::BitCast(du, hn::VecFromMask(d, a > hn::Set(d, 1.25f))));
  idx = hn::Sub(idx, hn::BitCast(du, hn::VecFromMask(d, a >= hn::Set(d, 1.75f))));
  idx = hn::Sub(idx, hn::BitCast(du, hn::VecFromMask(d, a > hn::Set(d, 2.5f))));
  idx = hn::Sub(idx, hn::BitCast(du, hn::VecFromMask(d, a >= hn::Set(d, 3.5f))));
  idx = hn::Sub(idx, hn::BitCast(du, hn::VecFromMask(d, a > hn::Set(d, 5.0f))));
  const auto negative = hn::BitCast(du, hn::VecFromMask(d, q < hn::Zero(d)));
  return hn::Or(idx, hn::And(negative, hn::Set(du, 8u)));
}

// Stores the Lanes(d) nibbles in `codes` (one per 32-bit lane, each < 16) of elements
// [i, i + Lanes(d)) of a packed row whose element 2j goes to the low nibble of out[j]; i is a
// multiple of Lanes(d). Viewing two 32-bit lanes as one little-endian 64-bit lane puts lane 2j+1
// at bit 32; shifting it down by 28 lands it on bits 4..7 next to lane 2j. HWY_SCALAR has one
// lane, so there the odd element is merged into the byte its even neighbour wrote.
template <class D>
HWY_INLINE void StoreNibbles(D /*d*/, hn::Vec<hn::RebindToUnsigned<D>> codes,
                             uint8_t* HWY_RESTRICT out, size_t i) {
#if HWY_TARGET == HWY_SCALAR
  const uint8_t c = uint8_t(hn::GetLane(codes));
  if (i % 2 == 0) {
    out[i / 2] = c;
  } else {
    out[i / 2] = uint8_t(out[i / 2] | (c << 4));
  }
#else
  const hn::RebindToUnsigned<D> du;
  const hn::Repartition<uint64_t, decltype(du)> d64;
  const hn::Rebind<uint8_t, decltype(d64)> d8;
  auto w = hn::BitCast(d64, codes);
  w = hn::Or(w, hn::ShiftRight<28>(w));
  hn::StoreU(hn::TruncateTo(d8, w), d8, out + i / 2);
#endif
}

// Round to nearest, ties to even, for |v| <= 2^22: adding 1.5 * 2^23 leaves no fraction bits, so
// the FPU rounds (RNE), and subtracting it back is exact. Highway's Round is emulated on the
// SCALAR/EMU128 targets with add-0.5-and-truncate, whose result at 0.5 - ulp hangs on how the
// compiler evaluates it; this is exact and branch-free on every target.
template <class D>
HWY_INLINE hn::Vec<D> RoundHalfEvenSmall(D d, hn::Vec<D> v) {
  const auto magic = hn::Set(d, 0x1.8p23f);
  return hn::Sub(hn::Add(v, magic), magic);
}

// E4M3FN code of each lane for |x| <= 448 (callers clamp first; NaN is not handled), bit-identical
// to core f32_to_e4m3 on that range: below 2^-6 the FPU rounds x + 2^14 to a multiple of 2^-9
// (RNE) and the difference of the bit patterns is the code; above, integer round-half-even of the
// 20 dropped mantissa bits with the exponent rebiased from 127 to 7.
template <class D>
HWY_INLINE hn::Vec<hn::RebindToUnsigned<D>> E4M3Encode(D d, hn::Vec<D> x) {
  const hn::RebindToUnsigned<D> du;
  const hn::RebindToSigned<D> di;
  const auto bits = hn::BitCast(du, x);
  const auto a = hn::And(bits, hn::Set(du, 0x7FFFFFFFu));
  const auto sign = hn::And(hn::ShiftRight<24>(bits), hn::Set(du, 0x80u));
  const auto magic = hn::Set(d, 16384.0f);
  const auto sub = hn::Sub(hn::BitCast(du, hn::Add(hn::BitCast(d, a), magic)), hn::BitCast(du, magic));
  const auto odd = hn::And(hn::ShiftRight<20>(a), hn::Set(du, 1u));
  // (7 - 127) << 23 wraps modulo 2^32, as in the scalar code.
  const auto rebias = hn::Set(du, (uint32_t(7 - 127) << 23) + 0x7FFFFu);
  const auto normal = hn::ShiftRight<20>(hn::Add(hn::Add(a, rebias), odd));
  // a <= 0x7FFFFFFF, so a signed compare orders it correctly on every target.
  const auto is_sub = hn::RebindMask(du, hn::BitCast(di, a) < hn::Set(di, int32_t(121) << 23));
  return hn::Or(hn::IfThenElse(is_sub, sub, normal), sign);
}

// Value of non-negative E4M3 codes 0..0x7E as float32 (exact; e4m3_to_f32 for those codes).
template <class D>
HWY_INLINE hn::Vec<D> E4M3DecodePositive(D d, hn::Vec<hn::RebindToUnsigned<D>> code) {
  const hn::RebindToUnsigned<D> du;
  const hn::RebindToSigned<D> di;
  const auto exp = hn::ShiftRight<3>(code);
  const auto man = hn::And(code, hn::Set(du, 7u));
  const auto normal =
      hn::BitCast(d, hn::Or(hn::ShiftLeft<23>(hn::Add(exp, hn::Set(du, 120u))), hn::ShiftLeft<20>(man)));
  const auto subnormal = hn::Mul(hn::ConvertTo(d, hn::BitCast(di, man)), hn::Set(d, 0x1p-9f));
  return hn::IfThenElse(hn::RebindMask(d, hn::Eq(exp, hn::Zero(du))), subnormal, normal);
}

// Largest |x| of a block of `n` elements at p (n a multiple of Lanes(d)). NaN handling is
// unspecified (callers require finite input).
template <class Src, class D>
HWY_INLINE float BlockAmax(D d, const typename Src::T* HWY_RESTRICT p, size_t n) {
  const size_t N = hn::Lanes(d);
  auto acc = hn::Zero(d);
  for (size_t i = 0; i < n; i += N) acc = hn::Max(acc, hn::Abs(LoadAsF32<Src>(d, p + i)));
  return hn::GetLane(hn::MaxOfLanes(d, acc));
}

}  // namespace HWY_NAMESPACE
}  // namespace qf
HWY_AFTER_NAMESPACE();

#endif  // include guard

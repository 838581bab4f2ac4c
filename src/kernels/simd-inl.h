// Per-target SIMD building blocks of the kernels: float loads from F32/BF16/F16, E2M1/INT4 nibble
// decoding through a 16-entry byte table held in a register, and the nibble-pair dot product that
// the NVFP4, MXFP4 and compressed-tensors INT4 matrix-vector kernels share.
// A Highway "-inl" header: include it after <hwy/foreach_target.h>.

#if defined(QFORGE_KERNELS_SIMD_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef QFORGE_KERNELS_SIMD_INL_H_
#undef QFORGE_KERNELS_SIMD_INL_H_
#else
#define QFORGE_KERNELS_SIMD_INL_H_
#endif

#include <hwy/highway.h>

#include <cstdint>
#include <cstring>

HWY_BEFORE_NAMESPACE();
namespace qf::kernels {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

template <class D>
HWY_INLINE hn::Vec<D> LoadBF16AsF32(D d, const uint16_t* HWY_RESTRICT p) {
  const hn::Rebind<uint16_t, D> d16;
  const hn::RebindToUnsigned<D> du;
  return hn::BitCast(d, hn::ShiftLeft<16>(hn::PromoteTo(du, hn::LoadU(d16, p))));
}

template <class D>
HWY_INLINE hn::Vec<D> LoadF16AsF32(D d, const uint16_t* HWY_RESTRICT p) {
  const hn::Rebind<hwy::float16_t, D> dh;
  return hn::PromoteTo(d, hn::LoadU(dh, reinterpret_cast<const hwy::float16_t*>(p)));
}

// Number of leading elements of a row that the nibble kernels handle with vectors: whole
// chunks of 2 * Lanes elements whose block scales are one per chunk, or one per half chunk.
// The rest of the row (and, on targets without byte tables, all of it) goes the scalar way.
inline int64_t NibbleMainLength(int64_t cols, int64_t block, size_t lanes) {
#if HWY_TARGET == HWY_SCALAR
  (void)cols, (void)block, (void)lanes;
  return 0;
#else
  const int64_t chunk = 2 * int64_t(lanes);
  const bool ok = (block % chunk == 0) || (block * 2 == chunk);
  return ok ? cols / chunk * chunk : 0;
#endif
}

// Reorders each chunk of 2 * Lanes(d) elements of x[0, n) so that the even elements come first,
// then the odd ones: the order in which low and high nibbles of packed pairs decode.
template <class D>
HWY_INLINE void DeinterleavePairs(D d, const float* HWY_RESTRICT x, int64_t n,
                                  float* HWY_RESTRICT out) {
  const int64_t N = int64_t(hn::Lanes(d));
  for (int64_t c = 0; c < n; c += 2 * N)
    for (int64_t i = 0; i < N; ++i) {
      out[c + i] = x[c + 2 * i];
      out[c + N + i] = x[c + 2 * i + 1];
    }
}

#if HWY_TARGET != HWY_SCALAR
// Sum over the first n elements of a row of packed nibble pairs (byte j: element 2j low, 2j+1
// high) of table[nibble] * xp * scale(block), with xp from DeinterleavePairs. `scale_at(b)` gives
// block b's scale; a chunk spans one block or (when block == Lanes) two.
template <class D, class ScaleAt>
HWY_INLINE float NibblePairsDot(D df, const int8_t* table16, const uint8_t* HWY_RESTRICT p,
                                const float* HWY_RESTRICT xp, int64_t n, int64_t block,
                                const ScaleAt& scale_at) {
  const size_t N = hn::Lanes(df);
  const hn::Rebind<uint8_t, D> d8;
  const hn::Rebind<int8_t, D> di8;
  const hn::Rebind<int32_t, D> di32;
  const hn::Full128<int8_t> dt;
  const auto table = hn::LoadU(dt, table16);
  const auto low_mask = hn::Set(d8, uint8_t(0x0F));
  const bool two_blocks = int64_t(N) == block;
  const auto first_half =
      hn::RebindMask(df, hn::Lt(hn::Iota(di32, 0), hn::Set(di32, int32_t(block / 2))));
  auto acc0 = hn::Zero(df);
  auto acc1 = hn::Zero(df);
  for (int64_t c = 0; c < n; c += int64_t(2 * N)) {
    const auto bytes = hn::LoadU(d8, p + c / 2);
    const auto lo = hn::BitCast(di8, hn::And(bytes, low_mask));
    const auto hi = hn::BitCast(di8, hn::ShiftRight<4>(bytes));
    const auto wlo = hn::ConvertTo(df, hn::PromoteTo(di32, hn::TableLookupBytes(table, lo)));
    const auto whi = hn::ConvertTo(df, hn::PromoteTo(di32, hn::TableLookupBytes(table, hi)));
    const auto partial = hn::MulAdd(whi, hn::LoadU(df, xp + c + N), hn::Mul(wlo, hn::LoadU(df, xp + c)));
    const int64_t b = c / block;
    if (two_blocks) {
      const auto sv = hn::IfThenElse(first_half, hn::Set(df, scale_at(b)), hn::Set(df, scale_at(b + 1)));
      acc0 = hn::MulAdd(partial, sv, acc0);
    } else {
      acc1 = hn::MulAdd(partial, hn::Set(df, scale_at(b)), acc1);
    }
  }
  return hn::GetLane(hn::SumOfLanes(df, hn::Add(acc0, acc1)));
}
#endif

}  // namespace HWY_NAMESPACE
}  // namespace qf::kernels
HWY_AFTER_NAMESPACE();

#endif  // QFORGE_KERNELS_SIMD_INL_H_

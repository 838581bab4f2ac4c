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
// high) of value[nibble] * xp * scale[block], with xp from DeinterleavePairs. `values` holds the
// 16 nibble values as float32 (and as int8 in `values8`: the byte-table path of narrower
// targets needs integers, so callers pass values that are); `scales` holds one float32 per block
// and must be readable 16 floats past the last block. A chunk spans one block or (block ==
// Lanes) two.
template <class D>
HWY_INLINE float NibblePairsDot(D df, const float* values, const int8_t* values8,
                                const uint8_t* HWY_RESTRICT p, const float* HWY_RESTRICT xp,
                                int64_t n, int64_t block, const float* HWY_RESTRICT scales) {
  const size_t N = hn::Lanes(df);
  const hn::Rebind<uint8_t, D> d8;
  const hn::Rebind<int32_t, D> di32;
  const bool two_blocks = int64_t(N) == block;
  auto acc0 = hn::Zero(df);
  auto acc1 = hn::Zero(df);
#if HWY_TARGET <= HWY_AVX3
  // 16 float lanes: the whole value table fits one register, so a lane permute (vpermps) turns
  // zero-extended nibbles straight into floats, with no integer-to-float conversion. Two chunks
  // per iteration keep two independent accumulator chains in flight.
  (void)values8;
  const hn::RebindToUnsigned<D> du;
  const auto table = hn::LoadU(df, values);
  const auto low = hn::Set(du, 0x0Fu);
  alignas(64) static constexpr int32_t kPair[16] = {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1};
  const auto pair = hn::SetTableIndices(df, kPair);
  const auto chunk = [&](int64_t c, hn::Vec<D>& acc) {
    const auto b32 = hn::PromoteTo(du, hn::LoadU(d8, p + c / 2));
    const auto wlo = hn::TableLookupLanes(table, hn::IndicesFromVec(df, hn::BitCast(di32, hn::And(b32, low))));
    const auto whi = hn::TableLookupLanes(table, hn::IndicesFromVec(df, hn::BitCast(di32, hn::ShiftRight<4>(b32))));
    const auto partial = hn::MulAdd(whi, hn::LoadU(df, xp + c + 16), hn::Mul(wlo, hn::LoadU(df, xp + c)));
    const auto sv = two_blocks ? hn::TableLookupLanes(hn::LoadU(df, scales + c / block), pair)
                               : hn::Set(df, scales[c / block]);
    acc = hn::MulAdd(partial, sv, acc);
  };
  int64_t c = 0;
  for (; c + 64 <= n; c += 64) {
    chunk(c, acc0);
    chunk(c + 32, acc1);
  }
  for (; c < n; c += 32) chunk(c, acc0);
#else
  (void)values;
  const hn::Rebind<int8_t, D> di8;
  const hn::Full128<int8_t> dt;
  const auto table = hn::LoadU(dt, values8);
  const auto low_mask = hn::Set(d8, uint8_t(0x0F));
  const auto first_half =
      hn::RebindMask(df, hn::Lt(hn::Iota(di32, 0), hn::Set(di32, int32_t(block / 2))));
  for (int64_t c = 0; c < n; c += int64_t(2 * N)) {
    const auto bytes = hn::LoadU(d8, p + c / 2);
    const auto lo = hn::BitCast(di8, hn::And(bytes, low_mask));
    const auto hi = hn::BitCast(di8, hn::ShiftRight<4>(bytes));
    const auto wlo = hn::ConvertTo(df, hn::PromoteTo(di32, hn::TableLookupBytes(table, lo)));
    const auto whi = hn::ConvertTo(df, hn::PromoteTo(di32, hn::TableLookupBytes(table, hi)));
    const auto partial = hn::MulAdd(whi, hn::LoadU(df, xp + c + N), hn::Mul(wlo, hn::LoadU(df, xp + c)));
    const int64_t b = c / block;
    if (two_blocks) {
      const auto sv = hn::IfThenElse(first_half, hn::Set(df, scales[b]), hn::Set(df, scales[b + 1]));
      acc0 = hn::MulAdd(partial, sv, acc0);
    } else {
      acc1 = hn::MulAdd(partial, hn::Set(df, scales[b]), acc1);
    }
  }
#endif
  return hn::GetLane(hn::SumOfLanes(df, hn::Add(acc0, acc1)));
}
#endif

}  // namespace HWY_NAMESPACE
}  // namespace qf::kernels
HWY_AFTER_NAMESPACE();

#endif  // QFORGE_KERNELS_SIMD_INL_H_

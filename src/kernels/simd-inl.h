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
#elif HWY_TARGET <= HWY_AVX3
  // Chunks of 128 elements; each lane's 8 elements must lie in one block.
  (void)lanes;
  const bool ok = block >= 8 && (block % 128 == 0 || 128 % block == 0);
  return ok ? cols / 128 * 128 : 0;
#else
  const int64_t chunk = 2 * int64_t(lanes);
  const bool ok = (block % chunk == 0) || (block * 2 == chunk);
  return ok ? cols / chunk * chunk : 0;
#endif
}

// Reorders x[0, n) into the order in which NibblePairsDot decodes packed nibbles. AVX-512: per
// chunk of 128 elements, lane j of step k holds element 8j + k (a 32-bit word holds 8 nibbles:
// shift by 4k, permute). Narrower targets: per chunk of 2 * Lanes, the even elements, then the
// odd ones (low and high nibbles of consecutive bytes).
template <class D>
HWY_INLINE void DeinterleavePairs(D d, const float* HWY_RESTRICT x, int64_t n,
                                  float* HWY_RESTRICT out) {
#if HWY_TARGET <= HWY_AVX3
  (void)d;
  for (int64_t c = 0; c < n; c += 128)
    for (int64_t k = 0; k < 8; ++k)
      for (int64_t j = 0; j < 16; ++j) out[c + k * 16 + j] = x[c + 8 * j + k];
#else
  const int64_t N = int64_t(hn::Lanes(d));
  for (int64_t c = 0; c < n; c += 2 * N)
    for (int64_t i = 0; i < N; ++i) {
      out[c + i] = x[c + 2 * i];
      out[c + N + i] = x[c + 2 * i + 1];
    }
#endif
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
  // 16 float lanes: the whole value table fits one register. A 64-byte load gives 16 words of 8
  // nibbles; shifting by 4k and a lane permute (vpermps reads only the low 4 index bits) turns
  // nibble k of every word into floats, with no widening and no int-to-float conversion. Lane j
  // always covers elements 8j..8j+7 of the chunk, so its block, and scale, is the same for all
  // eight steps and is applied once per chunk.
  (void)values8, (void)d8, (void)two_blocks;
  const hn::RebindToUnsigned<D> du;
  const auto table = hn::LoadU(df, values);
  // Lane j's block within the chunk: 8j / block (0 when block >= 128).
  HWY_ALIGN int32_t lane_block[16];
  for (int j = 0; j < 16; ++j) lane_block[j] = block >= 128 ? 0 : int32_t(8 * j / block);
  const auto scale_idx = hn::SetTableIndices(df, lane_block);
  const auto nib = [&](hn::Vec<decltype(du)> v) {
    return hn::TableLookupLanes(table, hn::IndicesFromVec(df, hn::BitCast(di32, v)));
  };
  for (int64_t c = 0; c < n; c += 128) {
    const auto v = hn::LoadU(du, reinterpret_cast<const uint32_t*>(p + c / 2));
    const float* xc = xp + c;
    auto p0 = hn::Mul(nib(v), hn::LoadU(df, xc));
    auto p1 = hn::Mul(nib(hn::ShiftRight<4>(v)), hn::LoadU(df, xc + 16));
    p0 = hn::MulAdd(nib(hn::ShiftRight<8>(v)), hn::LoadU(df, xc + 32), p0);
    p1 = hn::MulAdd(nib(hn::ShiftRight<12>(v)), hn::LoadU(df, xc + 48), p1);
    p0 = hn::MulAdd(nib(hn::ShiftRight<16>(v)), hn::LoadU(df, xc + 64), p0);
    p1 = hn::MulAdd(nib(hn::ShiftRight<20>(v)), hn::LoadU(df, xc + 80), p1);
    p0 = hn::MulAdd(nib(hn::ShiftRight<24>(v)), hn::LoadU(df, xc + 96), p0);
    p1 = hn::MulAdd(nib(hn::ShiftRight<28>(v)), hn::LoadU(df, xc + 112), p1);
    const auto sv = hn::TableLookupLanes(hn::LoadU(df, scales + c / block), scale_idx);
    if ((c / 128) % 2 == 0) {
      acc0 = hn::MulAdd(hn::Add(p0, p1), sv, acc0);
    } else {
      acc1 = hn::MulAdd(hn::Add(p0, p1), sv, acc1);
    }
  }
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

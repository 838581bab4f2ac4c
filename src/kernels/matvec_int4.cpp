// INT4 matrix-vector products, both stored layouts decoded on the fly: ModelOpt's row pairs
// (one byte holds the same column of two adjacent rows, so two rows are computed together) and
// compressed-tensors' int32 words (nibble pairs along a row, offset by 8). One scale per group.
// Weights repacked 16 rows at a time (kernels/q4_rows16.h) are gathered back into their stored
// layout, row by row or pair by pair: the same arithmetic, so the same bits.
#include "kernels/kernels_internal.h"
#include "kernels/q4_rows16.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/matvec_int4.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep

#include <hwy/highway.h>

#include "kernels/simd-inl.h"

#include <algorithm>
#include <vector>

HWY_BEFORE_NAMESPACE();
namespace qf::kernels {
namespace HWY_NAMESPACE {

alignas(16) constexpr int8_t kSigned4[16] = {0, 1, 2, 3, 4, 5, 6, 7, -8, -7, -6, -5, -4, -3, -2, -1};
alignas(16) constexpr int8_t kOffset8[16] = {-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7};
alignas(64) constexpr float kOffset8F[16] = {-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7};

inline int signed_nibble(int v) { return v >= 8 ? v - 16 : v; }

// Rows 2i and 2i+1 of the row-pair layout.
template <class D>
HWY_INLINE void RowPairDot(D df, const uint8_t* HWY_RESTRICT p, const float* HWY_RESTRICT sa,
                           const float* HWY_RESTRICT sb, const float* HWY_RESTRICT x, int64_t cols,
                           int group, float* ya, float* yb) {
  int64_t main = 0;
  float a = 0.f, b = 0.f;
#if HWY_TARGET != HWY_SCALAR
  const int64_t N = int64_t(hn::Lanes(df));
  if (group % N == 0) {
    main = cols / N * N;
    const hn::Rebind<uint8_t, D> d8;
    const hn::Rebind<int8_t, D> di8;
    const hn::Rebind<int32_t, D> di32;
    const hn::Full128<int8_t> dt;
    const auto table = hn::LoadU(dt, kSigned4);
    const auto low_mask = hn::Set(d8, uint8_t(0x0F));
    auto acc_a = hn::Zero(df), acc_b = hn::Zero(df);
    for (int64_t c = 0; c < main; c += N) {
      const auto bytes = hn::LoadU(d8, p + c);
      const auto lo = hn::BitCast(di8, hn::And(bytes, low_mask));
      const auto hi = hn::BitCast(di8, hn::ShiftRight<4>(bytes));
      const auto wa = hn::ConvertTo(df, hn::PromoteTo(di32, hn::TableLookupBytes(table, lo)));
      const auto wb = hn::ConvertTo(df, hn::PromoteTo(di32, hn::TableLookupBytes(table, hi)));
      const auto xv = hn::LoadU(df, x + c);
      const int64_t g = c / group;
      acc_a = hn::MulAdd(hn::Mul(wa, xv), hn::Set(df, sa[g]), acc_a);
      acc_b = hn::MulAdd(hn::Mul(wb, xv), hn::Set(df, sb[g]), acc_b);
    }
    a = hn::GetLane(hn::SumOfLanes(df, acc_a));
    b = hn::GetLane(hn::SumOfLanes(df, acc_b));
  }
#else
  (void)df;
#endif
  for (int64_t c = main; c < cols; ++c) {
    a += float(signed_nibble(p[c] & 0xF)) * sa[c / group] * x[c];
    b += float(signed_nibble(p[c] >> 4)) * sb[c / group] * x[c];
  }
  *ya = a;
  *yb = b;
}

void MatVecInt4RowPairs(const LinearWeight& w, const float* x, float* y, ThreadPool* pool) {
  const hn::ScalableTag<float> df;
  const int64_t cols = w.cols;
  const int64_t groups = cols / w.group;
  const auto* data = static_cast<const uint8_t*>(w.data);
  const bool repacked = is_q4_rows16(w.format);
  for_row_tasks(pool, w.rows, matvec_rows_per_task(w, 2), [&](int64_t r0, int64_t r1) {
    std::vector<uint8_t> scratch, pair(repacked ? size_t(cols) : 0);
    for (int64_t r = r0; r < r1; r += 2) {
      if (!repacked) {
        RowPairDot(df, data + (r / 2) * cols, w.scales + r * groups, w.scales + (r + 1) * groups,
                   x, cols, w.group, &y[r], &y[r + 1]);
        continue;
      }
      // The view holds the two rows as q + 8 nibble pairs along each row; a row-pair byte is
      // column c of both as two's complement nibbles (q + 8 with bit 3 flipped).
      const LinearWeight v = q4_rows16_view(w, r, 2, scratch);
      const auto* q = static_cast<const uint8_t*>(v.data);
      for (int64_t c = 0; c < cols; ++c) {
        const int shift = 4 * int(c % 2);
        const int a = (q[c / 2] >> shift) & 0xF, b = (q[cols / 2 + c / 2] >> shift) & 0xF;
        pair[size_t(c)] = uint8_t((a ^ 8) | ((b ^ 8) << 4));
      }
      RowPairDot(df, pair.data(), v.scales, v.scales + groups, x, cols, w.group, &y[r], &y[r + 1]);
    }
  });
}

void MatVecInt4Packed32(const LinearWeight& w, const float* x, float* y, ThreadPool* pool) {
  const hn::ScalableTag<float> df;
  const int64_t cols = w.cols;
  const int64_t groups = cols / w.group;
  const auto* data = static_cast<const uint8_t*>(w.data);
  const int64_t main = NibbleMainLength(cols, w.group, hn::Lanes(df));
  std::vector<float> xp(static_cast<size_t>(cols));
  DeinterleavePairs(df, x, main, xp.data());
  for_row_tasks(pool, w.rows, matvec_rows_per_task(w, 1), [&](int64_t r0, int64_t r1) {
    std::vector<float> bs(static_cast<size_t>(groups + 16), 0.f);  // padded copy of the scales
    std::vector<uint8_t> scratch;
    for (int64_t r = r0; r < r1; ++r) {
      const uint8_t* p;  // little-endian words: nibble pairs in order
      const float* s;
      if (is_q4_rows16(w.format)) {
        const LinearWeight v = q4_rows16_view(w, r, 1, scratch);
        p = static_cast<const uint8_t*>(v.data);
        s = v.scales;
      } else {
        p = data + r * (cols / 2);
        s = w.scales + r * groups;
      }
      float dot = 0.f;
#if HWY_TARGET != HWY_SCALAR
      std::copy_n(s, groups, bs.begin());
      dot = NibblePairsDot(df, kOffset8F, kOffset8, p, xp.data(), main, w.group, bs.data());
#endif
      for (int64_t c = main; c < cols; ++c) {
        const int v = ((c % 2 == 0) ? (p[c / 2] & 0xF) : (p[c / 2] >> 4)) - 8;
        dot += float(v) * s[c / w.group] * x[c];
      }
      y[r] = dot;
    }
  });
}

}  // namespace HWY_NAMESPACE
}  // namespace qf::kernels
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace qf::kernels {
HWY_EXPORT(MatVecInt4RowPairs);
HWY_EXPORT(MatVecInt4Packed32);
void matvec_int4_row_pairs(const LinearWeight& w, const float* x, float* y, ThreadPool* pool) {
  HWY_DYNAMIC_DISPATCH(MatVecInt4RowPairs)(w, x, y, pool);
}
void matvec_int4_packed32(const LinearWeight& w, const float* x, float* y, ThreadPool* pool) {
  HWY_DYNAMIC_DISPATCH(MatVecInt4Packed32)(w, x, y, pool);
}
}  // namespace qf::kernels
#endif

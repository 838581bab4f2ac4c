// read_all: 64-bit lanes summed into four vector accumulators per step (four independent
// load streams keep enough reads in flight to saturate memory from one core).
#include "kernels/memory_read.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/memory_read.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep

#include <hwy/highway.h>

#include <cstring>

HWY_BEFORE_NAMESPACE();
namespace qf::kernels {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Every line is prefetched this far ahead of the loads (into L1): on the Xeon VMs measured it
// lifts the read by 8-14% in qforge_bench's split (17.4 vs 15.2 GB/s on one core, 26.5-29.1
// vs 24.5-25.5 on two) and by ~25% for one contiguous range per thread (33.8 vs 28.5): the
// hardware prefetchers alone keep too few lines in flight, so without it "STREAM" understated
// what the memory gives.
constexpr size_t kReadPrefetchBytes = 384;

uint64_t ReadAll(const void* p, size_t n) {
  const hn::ScalableTag<uint64_t> d;
  const size_t N = hn::Lanes(d);
  const auto* w = static_cast<const uint64_t*>(p);
  const size_t words = n / 8;
  auto a0 = hn::Zero(d), a1 = hn::Zero(d), a2 = hn::Zero(d), a3 = hn::Zero(d);
  size_t i = 0;
  for (; i + 4 * N <= words; i += 4 * N) {
    for (size_t b = 0; b < 4 * N * 8; b += 64)
      __builtin_prefetch(reinterpret_cast<const char*>(w + i) + kReadPrefetchBytes + b);
    a0 = hn::Add(a0, hn::LoadU(d, w + i));
    a1 = hn::Add(a1, hn::LoadU(d, w + i + N));
    a2 = hn::Add(a2, hn::LoadU(d, w + i + 2 * N));
    a3 = hn::Add(a3, hn::LoadU(d, w + i + 3 * N));
  }
  for (; i + N <= words; i += N) a0 = hn::Add(a0, hn::LoadU(d, w + i));
  uint64_t s = hn::GetLane(hn::SumOfLanes(d, hn::Add(hn::Add(a0, a1), hn::Add(a2, a3))));
  for (; i < words; ++i) {
    uint64_t v;
    std::memcpy(&v, w + i, 8);  // p may be unaligned
    s += v;
  }
  const auto* tail = static_cast<const uint8_t*>(p) + words * 8;
  for (size_t k = 0; k < n % 8; ++k) s += uint64_t(tail[k]) << (8 * k);
  return s;
}

}  // namespace HWY_NAMESPACE
}  // namespace qf::kernels
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace qf::kernels {
HWY_EXPORT(ReadAll);

uint64_t read_all(const void* p, size_t n) { return HWY_DYNAMIC_DISPATCH(ReadAll)(p, n); }

}  // namespace qf::kernels
#endif

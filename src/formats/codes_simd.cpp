// Array wrappers around the SIMD E4M3 and E2M1 encoders of simd-inl.h, so tests can hold them
// to the scalar definitions in core/numeric.h on many values at once, and report which target
// dynamic dispatch picks.
#include "formats/formats_internal.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "formats/codes_simd.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep

#include <hwy/highway.h>

#include "formats/simd-inl.h"

#include <algorithm>

HWY_BEFORE_NAMESPACE();
namespace qf {
namespace HWY_NAMESPACE {

// Runs `encode` (vector of floats -> vector of u32 codes) over in[0, n); the tail goes through a
// zero-padded vector so every element takes the SIMD path.
template <class Encode>
void EncodeArray(const float* in, uint8_t* out, size_t n, Encode encode) {
  const hn::ScalableTag<float> d;
  const hn::RebindToUnsigned<decltype(d)> du;
  const size_t N = hn::Lanes(d);
  HWY_ALIGN float pad_in[hn::MaxLanes(d)];
  HWY_ALIGN uint32_t pad_out[hn::MaxLanes(d)];
  for (size_t i = 0; i < n; i += N) {
    const size_t m = std::min(N, n - i);
    std::fill(pad_in, pad_in + N, 0.f);
    std::copy(in + i, in + i + m, pad_in);
    hn::Store(encode(d, hn::Load(d, pad_in)), du, pad_out);
    for (size_t k = 0; k < m; ++k) out[i + k] = uint8_t(pad_out[k]);
  }
}

void E4M3EncodeArray(const float* in, uint8_t* out, size_t n) {
  EncodeArray(in, out, n, [](auto d, auto v) { return E4M3Encode(d, v); });
}

void E2M1EncodeArray(const float* in, uint8_t* out, size_t n) {
  EncodeArray(in, out, n, [](auto d, auto v) { return E2M1Codes(d, v); });
}

int64_t DispatchedTarget() { return HWY_TARGET; }

}  // namespace HWY_NAMESPACE
}  // namespace qf
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace qf::detail {

HWY_EXPORT(E4M3EncodeArray);
HWY_EXPORT(E2M1EncodeArray);
HWY_EXPORT(DispatchedTarget);

void e4m3_encode_simd(const float* in, uint8_t* out, size_t n) {
  HWY_DYNAMIC_DISPATCH(E4M3EncodeArray)(in, out, n);
}

void e2m1_encode_simd(const float* in, uint8_t* out, size_t n) {
  HWY_DYNAMIC_DISPATCH(E2M1EncodeArray)(in, out, n);
}

int64_t simd_target_in_use() { return HWY_DYNAMIC_DISPATCH(DispatchedTarget)(); }

}  // namespace qf::detail
#endif  // HWY_ONCE

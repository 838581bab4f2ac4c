#include "kernels/ggml_rows8.h"

#include "formats/ggml_types.h"
#include "kernels/ggml_vec_dot.h"

#include <cstring>

namespace qf::kernels {
namespace {

constexpr int64_t kQ4_0Bytes = 18;  // f16 scale + 16 bytes of nibbles, 32 elements

uint64_t q4_0_row_bytes(const LinearWeight& w) { return uint64_t(w.cols / 32) * kQ4_0Bytes; }

}  // namespace

bool ggml_rows8_wanted(const LinearWeight& w) {
  return w.format == WeightFormat::ggml && GgmlType(w.ggml_type) == GgmlType::Q4_0 &&
         !w.ggml_rows8 && w.rows >= kGgmlRows8 && ggml_has_avx2_kernel(w);
}

void ggml_repack_rows8(const LinearWeight& w, uint8_t* dst) {
  const auto* src = static_cast<const uint8_t*>(w.data);
  const uint64_t stride = q4_0_row_bytes(w);
  const int64_t blocks = w.cols / 32, groups = w.rows / kGgmlRows8;
  for (int64_t g = 0; g < groups; ++g)
    for (int64_t i = 0; i < blocks; ++i) {
      uint8_t* o = dst + uint64_t(g) * kGgmlRows8 * stride + uint64_t(i) * kGgmlRows8BlockBytes;
      for (int64_t k = 0; k < kGgmlRows8; ++k) {
        const uint8_t* b = src + uint64_t(g * kGgmlRows8 + k) * stride + uint64_t(i) * kQ4_0Bytes;
        std::memcpy(o + 2 * k, b, 2);
        for (int v = 0; v < 4; ++v) std::memcpy(o + 16 + 32 * v + 4 * k, b + 2 + 4 * v, 4);
      }
    }
  const uint64_t done = uint64_t(groups) * kGgmlRows8 * stride;
  std::memcpy(dst + done, src + done, uint64_t(w.rows) * stride - done);
}

const uint8_t* ggml_stored_row(const LinearWeight& w, int64_t r, std::vector<uint8_t>& scratch) {
  const auto* data = static_cast<const uint8_t*>(w.data);
  if (!w.ggml_rows8) {
    const GgmlTypeInfo& info = ggml_type_info(GgmlType(w.ggml_type));
    return data + uint64_t(r) * uint64_t(w.cols / info.block_size) * uint64_t(info.block_bytes);
  }
  const uint64_t stride = q4_0_row_bytes(w);
  if (r >= w.rows / kGgmlRows8 * kGgmlRows8) return data + uint64_t(r) * stride;
  scratch.resize(stride);
  const int64_t g = r / kGgmlRows8, k = r % kGgmlRows8;
  for (int64_t i = 0; i < w.cols / 32; ++i) {
    const uint8_t* o = data + uint64_t(g) * kGgmlRows8 * stride + uint64_t(i) * kGgmlRows8BlockBytes;
    uint8_t* b = scratch.data() + uint64_t(i) * kQ4_0Bytes;
    std::memcpy(b, o + 2 * k, 2);
    for (int v = 0; v < 4; ++v) std::memcpy(b + 2 + 4 * v, o + 16 + 32 * v + 4 * k, 4);
  }
  return scratch.data();
}

}  // namespace qf::kernels

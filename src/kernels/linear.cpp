// Linear layers: dispatch to the per-format kernels, the scalar reference, tile decoding.
#include "kernels/linear.h"

#include "core/numeric.h"
#include "core/thread_pool.h"
#include "formats/fp8.h"
#include "formats/int4.h"
#include "formats/mxfp4.h"
#include "formats/nvfp4.h"
#include "kernels/kernels_internal.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace qf {

std::string_view weight_format_name(WeightFormat f) {
  switch (f) {
    case WeightFormat::f32: return "F32";
    case WeightFormat::f16: return "F16";
    case WeightFormat::bf16: return "BF16";
    case WeightFormat::nvfp4: return "NVFP4";
    case WeightFormat::mxfp4: return "MXFP4";
    case WeightFormat::fp8: return "FP8";
    case WeightFormat::int8: return "INT8";
    case WeightFormat::int4_row_pairs: return "INT4 (row pairs)";
    case WeightFormat::int4_packed32: return "INT4 (int32 packed)";
  }
  return "?";
}

int weight_block(const LinearWeight& w) {
  switch (w.format) {
    case WeightFormat::nvfp4: return kNvfp4Block;
    case WeightFormat::mxfp4: return kMxfp4Block;
    case WeightFormat::int4_row_pairs:
    case WeightFormat::int4_packed32: return w.group;
    default: return 0;
  }
}

uint64_t LinearWeight::stored_bytes() const {
  const uint64_t n = uint64_t(rows) * uint64_t(cols);
  switch (format) {
    case WeightFormat::f32: return n * 4;
    case WeightFormat::f16:
    case WeightFormat::bf16: return n * 2;
    case WeightFormat::nvfp4: return n / 2 + n / kNvfp4Block + 4;
    case WeightFormat::mxfp4: return n / 2 + n / kMxfp4Block;
    case WeightFormat::fp8:
    case WeightFormat::int8: return n + uint64_t(rows) * 4;
    case WeightFormat::int4_row_pairs:
    case WeightFormat::int4_packed32: return n / 2 + n / uint64_t(group) * 4;
  }
  return n;
}

namespace {
std::atomic<bool>& precise_flag() {
  static std::atomic<bool> flag = [] {
    const char* e = std::getenv("QFORGE_PRECISE_KERNELS");
    return e != nullptr && std::strcmp(e, "0") != 0;
  }();
  return flag;
}
}  // namespace

void set_precise_kernels(bool precise) { precise_flag().store(precise); }
bool precise_kernels() { return precise_flag().load(); }

bool matvec_uses_int8_activation(const LinearWeight& w) { return kernels::use_int8_matvec(w); }

void linear_forward(const LinearWeight& w, const float* x, int64_t tokens, float* y,
                    ThreadPool* pool) {
  if (tokens <= 0) return;
  if (tokens == 1 && kernels::use_int8_matvec(w)) {
    kernels::matvec_nibbles_avx512vnni(w, x, y, pool);
    return;
  }
  if (tokens > 1) {
    if (kernels::use_bf16_matmul(w)) {
      kernels::matmul_bf16_avx512bf16(w, x, tokens, y, pool);
      return;
    }
    kernels::matmul_decoded(w, x, tokens, y, pool);
    return;
  }
  switch (w.format) {
    case WeightFormat::f32:
    case WeightFormat::f16:
    case WeightFormat::bf16: kernels::matvec_float(w, x, y, pool); break;
    case WeightFormat::nvfp4: kernels::matvec_nvfp4(w, x, y, pool); break;
    case WeightFormat::mxfp4: kernels::matvec_mxfp4(w, x, y, pool); break;
    case WeightFormat::fp8: kernels::matvec_fp8(w, x, y, pool); break;
    case WeightFormat::int8: kernels::matvec_int8(w, x, y, pool); break;
    case WeightFormat::int4_row_pairs:
    case WeightFormat::int4_packed32: kernels::matvec_int4(w, x, y, pool); break;
  }
}

void dequantize_weight_rows(const LinearWeight& w, int64_t r0, int64_t n, float* out) {
  const int64_t cols = w.cols;
  const auto* bytes = static_cast<const uint8_t*>(w.data);
  switch (w.format) {
    case WeightFormat::f32:
      std::memcpy(out, static_cast<const float*>(w.data) + r0 * cols, size_t(n * cols) * 4);
      return;
    case WeightFormat::f16: {
      const auto* p = static_cast<const uint16_t*>(w.data) + r0 * cols;
      for (int64_t i = 0; i < n * cols; ++i) out[i] = f16_to_f32(p[i]);
      return;
    }
    case WeightFormat::bf16: {
      const auto* p = static_cast<const uint16_t*>(w.data) + r0 * cols;
      for (int64_t i = 0; i < n * cols; ++i) out[i] = bf16_to_f32(p[i]);
      return;
    }
    case WeightFormat::nvfp4:
      nvfp4_dequantize(bytes + r0 * cols / 2, w.block_scales + r0 * cols / kNvfp4Block,
                       w.global_scale, n, cols, out);
      return;
    case WeightFormat::mxfp4:
      mxfp4_dequantize(bytes + r0 * cols / 2, w.block_scales + r0 * cols / kMxfp4Block, n, cols,
                       out);
      return;
    case WeightFormat::fp8:
      fp8_channel_dequantize(bytes + r0 * cols, w.scales + r0, n, cols, out);
      return;
    case WeightFormat::int8: {
      const auto* q = static_cast<const int8_t*>(w.data) + r0 * cols;
      for (int64_t r = 0; r < n; ++r)
        for (int64_t c = 0; c < cols; ++c) out[r * cols + c] = float(q[r * cols + c]) * w.scales[r0 + r];
      return;
    }
    case WeightFormat::int4_row_pairs:
    case WeightFormat::int4_packed32: {
      // Unpack to one int8 per element, then the formats' dequantizer.
      std::vector<int8_t> q(static_cast<size_t>(n * cols));
      for (int64_t r = 0; r < n; ++r)
        for (int64_t c = 0; c < cols; ++c) {
          const int64_t row = r0 + r;
          int v;
          if (w.format == WeightFormat::int4_row_pairs) {
            const uint8_t b = bytes[(row / 2) * cols + c];
            v = (row % 2 == 0) ? (b & 0xF) : (b >> 4);
            v = v >= 8 ? v - 16 : v;
          } else {
            const auto* words = static_cast<const uint32_t*>(w.data);
            const uint32_t word = words[row * (cols / 8) + c / 8];
            v = int((word >> (4 * (c % 8))) & 0xF) - 8;
          }
          q[size_t(r * cols + c)] = int8_t(v);
        }
      int4_dequantize(q.data(), w.scales + r0 * (cols / w.group), w.group, n, cols, out);
      return;
    }
  }
}

void linear_reference(const LinearWeight& w, const float* x, int64_t tokens, float* y) {
  std::vector<float> row(static_cast<size_t>(w.cols));
  for (int64_t r = 0; r < w.rows; ++r) {
    dequantize_weight_rows(w, r, 1, row.data());
    for (int64_t t = 0; t < tokens; ++t) {
      double s = 0;
      for (int64_t c = 0; c < w.cols; ++c) s += double(row[size_t(c)]) * x[t * w.cols + c];
      y[t * w.rows + r] = float(s);
    }
  }
}

void linear_reference_int8_activation(const LinearWeight& w, const float* x, float* y) {
  const int64_t cols = w.cols;
  std::vector<int8_t> q(static_cast<size_t>(cols));
  std::vector<float> s(static_cast<size_t>(cols / kernels::kActBlock));
  kernels::quantize_activation_int8(x, cols, q.data(), s.data());
  std::vector<float> row(static_cast<size_t>(cols));
  for (int64_t r = 0; r < w.rows; ++r) {
    dequantize_weight_rows(w, r, 1, row.data());
    double sum = 0;
    for (int64_t c = 0; c < cols; ++c)
      sum += double(row[size_t(c)]) * double(q[size_t(c)]) * double(s[size_t(c / kernels::kActBlock)]);
    y[r] = float(sum);
  }
}

namespace kernels {

void quantize_activation_int8(const float* x, int64_t n, int8_t* q, float* scales) {
  for (int64_t b = 0; b < n / kActBlock; ++b) {
    const float* xb = x + b * kActBlock;
    float amax = 0.f;
    for (int64_t i = 0; i < kActBlock; ++i) amax = std::max(amax, std::fabs(xb[i]));
    const float inv = amax > 0.f ? 127.f / amax : 0.f;
    for (int64_t i = 0; i < kActBlock; ++i)
      q[b * kActBlock + i] = int8_t(std::nearbyint(xb[i] * inv));
    scales[b] = amax / 127.f;
  }
}

bool use_int8_matvec(const LinearWeight& w) {
  return !precise_kernels() && nibble_layout_fits_vnni(w) && cpu_has_avx512vnni();
}

bool use_bf16_matmul(const LinearWeight& w) {
  // F32 and F16 weights are not exact in BF16: they keep the float kernel.
  return !precise_kernels() && w.format != WeightFormat::f32 && w.format != WeightFormat::f16 &&
         cpu_has_avx512bf16();
}

void for_row_tasks(ThreadPool* pool, int64_t rows, int64_t rows_per_task,
                   const std::function<void(int64_t, int64_t)>& fn) {
  rows_per_task = std::max<int64_t>(1, rows_per_task);
  const int64_t tasks = (rows + rows_per_task - 1) / rows_per_task;
  auto task = [&](int64_t i) {
    const int64_t r0 = i * rows_per_task;
    fn(r0, std::min(rows, r0 + rows_per_task));
  };
  if (pool == nullptr || pool->size() == 1 || tasks == 1) {
    for (int64_t i = 0; i < tasks; ++i) task(i);
  } else {
    pool->parallel_for(tasks, task);
  }
}

int64_t matvec_rows_per_task(const LinearWeight& w, int64_t multiple) {
  const uint64_t row_bytes = std::max<uint64_t>(1, w.stored_bytes() / uint64_t(w.rows));
  int64_t r = std::max<int64_t>(1, int64_t((64u << 10) / row_bytes));
  // Keep at least ~16 tasks on big matrices so both cores stay busy to the end.
  r = std::min(r, std::max<int64_t>(1, w.rows / 16));
  r = (r + multiple - 1) / multiple * multiple;
  return r;
}

const float* e4m3_table() {
  static const std::array<float, 256> table = [] {
    std::array<float, 256> t{};
    for (int i = 0; i < 256; ++i) t[size_t(i)] = e4m3_to_f32(uint8_t(i));
    return t;
  }();
  return table.data();
}

const float* e8m0_table() {
  static const std::array<float, 256> table = [] {
    std::array<float, 256> t{};
    for (int i = 0; i < 256; ++i) t[size_t(i)] = e8m0_to_f32(uint8_t(i));
    return t;
  }();
  return table.data();
}

void decode_tile(const LinearWeight& w, int64_t r0, int64_t nr, int64_t c0, int64_t nc,
                 float* out, int64_t ld) {
  const int64_t cols = w.cols;
  const auto* bytes = static_cast<const uint8_t*>(w.data);
  for (int64_t r = 0; r < nr; ++r) {
    const int64_t row = r0 + r;
    float* o = out + r * ld;
    switch (w.format) {
      case WeightFormat::f32:
        std::memcpy(o, static_cast<const float*>(w.data) + row * cols + c0, size_t(nc) * 4);
        break;
      case WeightFormat::f16: {
        const auto* p = static_cast<const uint16_t*>(w.data) + row * cols + c0;
        for (int64_t c = 0; c < nc; ++c) o[c] = f16_to_f32(p[c]);
        break;
      }
      case WeightFormat::bf16: {
        const auto* p = static_cast<const uint16_t*>(w.data) + row * cols + c0;
        for (int64_t c = 0; c < nc; ++c) o[c] = bf16_to_f32(p[c]);
        break;
      }
      case WeightFormat::nvfp4:
      case WeightFormat::mxfp4: {
        const bool nv = w.format == WeightFormat::nvfp4;
        const int block = nv ? kNvfp4Block : kMxfp4Block;
        const float* stab = nv ? e4m3_table() : e8m0_table();
        const float g = nv ? w.global_scale : 1.f;
        const uint8_t* p = bytes + (row * cols + c0) / 2;
        const uint8_t* s = w.block_scales + (row * cols + c0) / block;
        for (int64_t b = 0; b < nc / block; ++b) {
          // The product order of the reference: e2m1 * scale, then * global.
          const float sc = stab[s[b]];
          for (int j = 0; j < block / 2; ++j) {
            const uint8_t v = p[b * block / 2 + j];
            o[b * block + 2 * j] = nv ? kE2M1Values[v & 0xF] * sc * g : kE2M1Values[v & 0xF] * sc;
            o[b * block + 2 * j + 1] = nv ? kE2M1Values[v >> 4] * sc * g : kE2M1Values[v >> 4] * sc;
          }
        }
        break;
      }
      case WeightFormat::fp8: {
        const float* t = e4m3_table();
        const uint8_t* p = bytes + row * cols + c0;
        const float sc = w.scales[row];
        for (int64_t c = 0; c < nc; ++c) o[c] = t[p[c]] * sc;
        break;
      }
      case WeightFormat::int8: {
        const auto* p = static_cast<const int8_t*>(w.data) + row * cols + c0;
        const float sc = w.scales[row];
        for (int64_t c = 0; c < nc; ++c) o[c] = float(p[c]) * sc;
        break;
      }
      case WeightFormat::int4_row_pairs: {
        const uint8_t* p = bytes + (row / 2) * cols + c0;
        const float* sc = w.scales + row * (cols / w.group) + c0 / w.group;
        const int shift = (row % 2) * 4;
        for (int64_t c = 0; c < nc; ++c) {
          const int v = (p[c] >> shift) & 0xF;
          o[c] = float(v >= 8 ? v - 16 : v) * sc[c / w.group];
        }
        break;
      }
      case WeightFormat::int4_packed32: {
        const auto* words = static_cast<const uint32_t*>(w.data) + row * (cols / 8) + c0 / 8;
        const float* sc = w.scales + row * (cols / w.group) + c0 / w.group;
        for (int64_t c = 0; c < nc; ++c) {
          const int v = int((words[c / 8] >> (4 * (c % 8))) & 0xF) - 8;
          o[c] = float(v) * sc[c / w.group];
        }
        break;
      }
    }
  }
}

}  // namespace kernels
}  // namespace qf

// The table of stored weight layouts and their per-layout decoders (tile decode for the
// matrix-matrix kernels, the reference dequantizer).
#include "kernels/weight_formats.h"

#include "core/error.h"
#include "core/numeric.h"
#include "formats/fp8.h"
#include "formats/ggml_quants.h"
#include "formats/ggml_types.h"
#include "formats/int4.h"
#include "formats/mxfp4.h"
#include "formats/nvfp4.h"
#include "kernels/ggml_rows8.h"
#include "kernels/q4_rows16.h"
#include "kernels/ggml_vec_dot.h"
#include "kernels/kernels_internal.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <vector>

namespace qf::kernels {
namespace {

uint64_t elements(const LinearWeight& w) { return uint64_t(w.rows) * uint64_t(w.cols); }

// ---- float layouts ------------------------------------------------------------------------
uint64_t f32_bytes(const LinearWeight& w) { return elements(w) * 4; }
uint64_t half_bytes(const LinearWeight& w) { return elements(w) * 2; }

// Element (r, c) of a float weight, whichever way it is stored (LinearWeight::transposed).
int64_t float_index(const LinearWeight& w, int64_t r, int64_t c) {
  return w.transposed ? c * w.rows + r : r * w.cols + c;
}
float f32_at(const void* p, int64_t i) {
  float f;
  std::memcpy(&f, static_cast<const float*>(p) + i, 4);
  return f;
}
template <float (*ToF32)(uint16_t)>
float half_at(const void* p, int64_t i) {
  return ToF32(static_cast<const uint16_t*>(p)[i]);
}
template <float (*At)(const void*, int64_t)>
void float_tile(const LinearWeight& w, int64_t r0, int64_t nr, int64_t c0, int64_t nc, float* out,
                int64_t ld) {
  if (w.transposed) {
    // Stored rows are the tile's columns: read each stored row segment once.
    for (int64_t c = 0; c < nc; ++c)
      for (int64_t r = 0; r < nr; ++r) out[r * ld + c] = At(w.data, (c0 + c) * w.rows + r0 + r);
    return;
  }
  for (int64_t r = 0; r < nr; ++r) {
    if constexpr (At == f32_at) {
      std::memcpy(out + r * ld, static_cast<const float*>(w.data) + (r0 + r) * w.cols + c0,
                  size_t(nc) * 4);
    } else {
      for (int64_t c = 0; c < nc; ++c) out[r * ld + c] = At(w.data, (r0 + r) * w.cols + c0 + c);
    }
  }
}
template <float (*At)(const void*, int64_t)>
void float_rows(const LinearWeight& w, int64_t r0, int64_t n, float* out) {
  if (!w.transposed) return float_tile<At>(w, r0, n, 0, w.cols, out, w.cols);
  for (int64_t r = 0; r < n; ++r)
    for (int64_t c = 0; c < w.cols; ++c) out[r * w.cols + c] = At(w.data, float_index(w, r0 + r, c));
}

// ---- E2M1 blocks (NVFP4, MXFP4) -----------------------------------------------------------
uint64_t nvfp4_bytes(const LinearWeight& w) {
  return elements(w) / 2 + elements(w) / kNvfp4Block + 4;
}
uint64_t mxfp4_bytes(const LinearWeight& w) {
  return elements(w) / 2 + elements(w) / kMxfp4Block;
}
template <bool kNv>
void fp4_tile(const LinearWeight& w, int64_t r0, int64_t nr, int64_t c0, int64_t nc, float* out,
              int64_t ld) {
  constexpr int block = kNv ? kNvfp4Block : kMxfp4Block;
  const float* stab = kNv ? e4m3_table() : e8m0_table();
  const float g = kNv ? w.global_scale : 1.f;
  const auto* bytes = static_cast<const uint8_t*>(w.data);
  for (int64_t r = 0; r < nr; ++r) {
    const int64_t row = r0 + r;
    float* o = out + r * ld;
    const uint8_t* p = bytes + (row * w.cols + c0) / 2;
    const uint8_t* s = w.block_scales + (row * w.cols + c0) / block;
    for (int64_t b = 0; b < nc / block; ++b) {
      // The product order of the reference: e2m1 * scale, then * global.
      const float sc = stab[s[b]];
      for (int j = 0; j < block / 2; ++j) {
        const uint8_t v = p[b * block / 2 + j];
        if constexpr (kNv) {
          o[b * block + 2 * j] = kE2M1Values[v & 0xF] * sc * g;
          o[b * block + 2 * j + 1] = kE2M1Values[v >> 4] * sc * g;
        } else {
          o[b * block + 2 * j] = kE2M1Values[v & 0xF] * sc;
          o[b * block + 2 * j + 1] = kE2M1Values[v >> 4] * sc;
        }
      }
    }
  }
}
void nvfp4_rows(const LinearWeight& w, int64_t r0, int64_t n, float* out) {
  nvfp4_dequantize(static_cast<const uint8_t*>(w.data) + r0 * w.cols / 2,
                   w.block_scales + r0 * w.cols / kNvfp4Block, w.global_scale, n, w.cols, out);
}
void mxfp4_rows(const LinearWeight& w, int64_t r0, int64_t n, float* out) {
  mxfp4_dequantize(static_cast<const uint8_t*>(w.data) + r0 * w.cols / 2,
                   w.block_scales + r0 * w.cols / kMxfp4Block, n, w.cols, out);
}
// ---- bytes with a scale per row (FP8, INT8) -----------------------------------------------
uint64_t byte_row_scaled_bytes(const LinearWeight& w) { return elements(w) + uint64_t(w.rows) * 4; }
void fp8_tile(const LinearWeight& w, int64_t r0, int64_t nr, int64_t c0, int64_t nc, float* out,
              int64_t ld) {
  const float* t = e4m3_table();
  for (int64_t r = 0; r < nr; ++r) {
    const int64_t row = r0 + r;
    const uint8_t* p = static_cast<const uint8_t*>(w.data) + row * w.cols + c0;
    const float sc = w.scales[row];
    float* o = out + r * ld;
    for (int64_t c = 0; c < nc; ++c) o[c] = t[p[c]] * sc;
  }
}
void fp8_rows(const LinearWeight& w, int64_t r0, int64_t n, float* out) {
  fp8_channel_dequantize(static_cast<const uint8_t*>(w.data) + r0 * w.cols, w.scales + r0, n,
                         w.cols, out);
}
void int8_tile(const LinearWeight& w, int64_t r0, int64_t nr, int64_t c0, int64_t nc, float* out,
               int64_t ld) {
  for (int64_t r = 0; r < nr; ++r) {
    const int64_t row = r0 + r;
    const auto* p = static_cast<const int8_t*>(w.data) + row * w.cols + c0;
    const float sc = w.scales[row];
    float* o = out + r * ld;
    for (int64_t c = 0; c < nc; ++c) o[c] = float(p[c]) * sc;
  }
}
void int8_rows(const LinearWeight& w, int64_t r0, int64_t n, float* out) {
  const int64_t cols = w.cols;
  const auto* q = static_cast<const int8_t*>(w.data) + r0 * cols;
  for (int64_t r = 0; r < n; ++r)
    for (int64_t c = 0; c < cols; ++c) out[r * cols + c] = float(q[r * cols + c]) * w.scales[r0 + r];
}

// ---- INT4 (two layouts) -------------------------------------------------------------------
uint64_t int4_bytes(const LinearWeight& w) {
  return elements(w) / 2 + elements(w) / uint64_t(w.group) * 4;
}
int int4_row_pairs_at(const LinearWeight& w, int64_t row, int64_t c) {
  const uint8_t b = static_cast<const uint8_t*>(w.data)[(row / 2) * w.cols + c];
  const int v = (row % 2 == 0) ? (b & 0xF) : (b >> 4);
  return v >= 8 ? v - 16 : v;
}
int int4_packed32_at(const LinearWeight& w, int64_t row, int64_t c) {
  const uint32_t word = static_cast<const uint32_t*>(w.data)[row * (w.cols / 8) + c / 8];
  return int((word >> (4 * (c % 8))) & 0xF) - 8;
}
// Unpacks to one int8 per element, then the formats' dequantizer.
template <int (*At)(const LinearWeight&, int64_t, int64_t)>
void int4_rows(const LinearWeight& w, int64_t r0, int64_t n, float* out) {
  const int64_t cols = w.cols;
  std::vector<int8_t> q(static_cast<size_t>(n * cols));
  for (int64_t r = 0; r < n; ++r)
    for (int64_t c = 0; c < cols; ++c) q[size_t(r * cols + c)] = int8_t(At(w, r0 + r, c));
  int4_dequantize(q.data(), w.scales + r0 * (cols / w.group), w.group, n, cols, out);
}
// The tiles start at a multiple of the group (weight_block), and each group's columns take one
// scale: an inner loop without a division per element, which the compiler vectorises.
template <class Code>
void int4_tile(const LinearWeight& w, int64_t row, int64_t c0, int64_t nc, float* o,
               const Code& code) {
  const float* sc = w.scales + row * (w.cols / w.group);
  for (int64_t c = 0; c < nc;) {
    const int64_t g = (c0 + c) / w.group;
    const int64_t end = std::min(nc, (g + 1) * w.group - c0);
    const float s = sc[g];
    for (; c < end; ++c) o[c] = float(code(c)) * s;
  }
}
void int4_row_pairs_tile(const LinearWeight& w, int64_t r0, int64_t nr, int64_t c0, int64_t nc,
                         float* out, int64_t ld) {
  for (int64_t r = 0; r < nr; ++r) {
    const int64_t row = r0 + r;
    const uint8_t* p = static_cast<const uint8_t*>(w.data) + (row / 2) * w.cols + c0;
    const int shift = (row % 2) * 4;
    // A nibble v as two's complement: (v ^ 8) - 8.
    int4_tile(w, row, c0, nc, out + r * ld,
              [&](int64_t c) { return (((p[c] >> shift) & 0xF) ^ 8) - 8; });
  }
}
void int4_packed32_tile(const LinearWeight& w, int64_t r0, int64_t nr, int64_t c0, int64_t nc,
                        float* out, int64_t ld) {
  const int64_t groups = w.cols / w.group;
  const bool whole_words = w.group % 8 == 0 && nc % 8 == 0;  // each word's 8 codes, one scale
  for (int64_t r = 0; r < nr; ++r) {
    const int64_t row = r0 + r;
    const auto* words = static_cast<const uint32_t*>(w.data) + row * (w.cols / 8) + c0 / 8;
    if (!whole_words) {
      int4_tile(w, row, c0, nc, out + r * ld,
                [&](int64_t c) { return int((words[c / 8] >> (4 * (c % 8))) & 0xF) - 8; });
      continue;
    }
    const float* sc = w.scales + row * groups;
    float* o = out + r * ld;
    for (int64_t k = 0; k < nc / 8; ++k) {
      const uint32_t word = words[k];
      const float s = sc[(c0 + 8 * k) / w.group];
      for (int j = 0; j < 8; ++j) o[8 * k + j] = float(int((word >> (4 * j)) & 0xF) - 8) * s;
    }
  }
}

// ---- 4-bit weights repacked 16 rows at a time (kernels/q4_rows16.h) ----------------------
// The stored layout's decoders over a view of the rows (INT4 as int32 words, either layout).
template <void (*Tile)(const LinearWeight&, int64_t, int64_t, int64_t, int64_t, float*, int64_t)>
void q4_rows16_tile(const LinearWeight& w, int64_t r0, int64_t nr, int64_t c0, int64_t nc,
                    float* out, int64_t ld) {
  std::vector<uint8_t> scratch;
  int64_t offset = 0;
  Tile(q4_rows16_view(w, r0, nr, c0, nc, scratch, offset), 0, nr, offset, nc, out, ld);
}
template <void (*Rows)(const LinearWeight&, int64_t, int64_t, float*)>
void q4_rows16_rows(const LinearWeight& w, int64_t r0, int64_t n, float* out) {
  std::vector<uint8_t> scratch;
  Rows(q4_rows16_view(w, r0, n, scratch), 0, n, out);
}

// ---- ggml blocks (GGUF tensors) ------------------------------------------------------------
// Decoded through the type's own dequantizer (formats/ggml_types.h), a row's blocks at a time:
// the precise path for every type ggml defines that qforge can decode, not a fast one.
const GgmlTypeInfo& ggml_info(const LinearWeight& w) {
  const GgmlTypeInfo* info = ggml_type_info(w.ggml_type);
  if (!info || !info->dequantize) fail("ggml type {} cannot be decoded", w.ggml_type);
  return *info;
}
uint64_t ggml_row_stride(const LinearWeight& w) {
  const GgmlTypeInfo& info = ggml_type_info(GgmlType(w.ggml_type));
  return uint64_t(w.cols / info.block_size) * uint64_t(info.block_bytes);
}
uint64_t ggml_bytes(const LinearWeight& w) { return uint64_t(w.rows) * ggml_row_stride(w); }
void ggml_tile(const LinearWeight& w, int64_t r0, int64_t nr, int64_t c0, int64_t nc, float* out,
               int64_t ld) {
  const GgmlTypeInfo& info = ggml_info(w);
  std::vector<uint8_t> scratch;
  for (int64_t r = 0; r < nr; ++r) {
    const uint8_t* row = ggml_stored_row(w, r0 + r, scratch) +
                         uint64_t(c0 / info.block_size) * uint64_t(info.block_bytes);
    float* o = out + r * ld;
    info.dequantize(row, o, nc);
    if (w.global_scale != 1.f)
      for (int64_t c = 0; c < nc; ++c) o[c] *= w.global_scale;
  }
}
void ggml_rows(const LinearWeight& w, int64_t r0, int64_t n, float* out) {
  ggml_tile(w, r0, n, 0, w.cols, out, w.cols);
}
void matvec_ggml(const LinearWeight& w, const float* x, float* y, ThreadPool* pool) {
  for_row_tasks(pool, w.rows, matvec_rows_per_task(w, 1), [&](int64_t r0, int64_t r1) {
    std::vector<float> row(static_cast<size_t>(w.cols));
    for (int64_t r = r0; r < r1; ++r) {
      ggml_rows(w, r, 1, row.data());
      float dot = 0.f;
      for (int64_t c = 0; c < w.cols; ++c) dot += row[size_t(c)] * x[c];
      y[r] = dot;
    }
  });
}

using F = WeightFormat;
using O = OutputFactor;
constexpr std::array<WeightFormatRow, 14> kRows = {{
    {F::f32, "F32", 0, f32_bytes, matvec_f32, nullptr, nullptr, false, O::none,
     float_tile<f32_at>, float_rows<f32_at>},
    {F::f16, "F16", 0, half_bytes, matvec_f16, nullptr, nullptr, false, O::none,
     float_tile<half_at<f16_to_f32>>, float_rows<half_at<f16_to_f32>>},
    {F::bf16, "BF16", 0, half_bytes, matvec_bf16, nullptr, nullptr, true, O::none,
     float_tile<half_at<bf16_to_f32>>, float_rows<half_at<bf16_to_f32>>},
    {F::nvfp4, "NVFP4", kNvfp4Block, nvfp4_bytes, matvec_nvfp4, fits_int8act_nvfp4,
     matvec_nvfp4_int8act, true, O::tensor, fp4_tile<true>, nvfp4_rows},
    {F::mxfp4, "MXFP4", kMxfp4Block, mxfp4_bytes, matvec_mxfp4, fits_int8act_mxfp4,
     matvec_mxfp4_int8act, true, O::none, fp4_tile<false>, mxfp4_rows},
    {F::fp8, "FP8", 0, byte_row_scaled_bytes, matvec_fp8, nullptr, nullptr, true, O::row,
     fp8_tile, fp8_rows},
    {F::int8, "INT8", 0, byte_row_scaled_bytes, matvec_int8, nullptr, nullptr, true, O::row,
     int8_tile, int8_rows},
    {F::int4_row_pairs, "INT4 (row pairs)", kGroupBlock, int4_bytes, matvec_int4_row_pairs,
     fits_int8act_int4_row_pairs, matvec_int4_row_pairs_int8act, true, O::none,
     int4_row_pairs_tile, int4_rows<int4_row_pairs_at>},
    {F::int4_packed32, "INT4 (int32 packed)", kGroupBlock, int4_bytes, matvec_int4_packed32,
     fits_int8act_int4_packed32, matvec_int4_packed32_int8act, true, O::none,
     int4_packed32_tile, int4_rows<int4_packed32_at>},
    {F::ggml, "ggml", kGroupBlock, ggml_bytes, matvec_ggml, nullptr, nullptr, false, O::none,
     ggml_tile, ggml_rows},
    {F::nvfp4_rows16, "NVFP4 (16-row blocks)", kNvfp4Block, nvfp4_bytes, matvec_nvfp4,
     fits_int8act_q4_rows16, matvec_q4_rows16_int8act, true, O::tensor,
     q4_rows16_tile<fp4_tile<true>>, q4_rows16_rows<nvfp4_rows>},
    {F::mxfp4_rows16, "MXFP4 (16-row blocks)", kMxfp4Block, mxfp4_bytes, matvec_mxfp4,
     fits_int8act_q4_rows16, matvec_q4_rows16_int8act, true, O::none,
     q4_rows16_tile<fp4_tile<false>>, q4_rows16_rows<mxfp4_rows>},
    {F::int4_row_pairs_rows16, "INT4 (row pairs, 16-row blocks)", kGroupBlock, int4_bytes,
     matvec_int4_row_pairs, fits_int8act_q4_rows16, matvec_q4_rows16_int8act, true, O::none,
     q4_rows16_tile<int4_packed32_tile>, q4_rows16_rows<int4_rows<int4_packed32_at>>},
    {F::int4_packed32_rows16, "INT4 (int32 packed, 16-row blocks)", kGroupBlock, int4_bytes,
     matvec_int4_packed32, fits_int8act_q4_rows16, matvec_q4_rows16_int8act, true, O::none,
     q4_rows16_tile<int4_packed32_tile>, q4_rows16_rows<int4_rows<int4_packed32_at>>},
}};

constexpr bool rows_in_enum_order() {
  for (size_t i = 0; i < kRows.size(); ++i)
    if (static_cast<size_t>(kRows[i].id) != i) return false;
  return true;
}
static_assert(rows_in_enum_order(), "weight_format_row indexes the table by the enum value");

}  // namespace

const WeightFormatRow& weight_format_row(WeightFormat format) {
  const auto i = static_cast<size_t>(format);
  if (i >= kRows.size()) fail("unknown weight format id {}", int(i));
  return kRows[i];
}

}  // namespace qf::kernels

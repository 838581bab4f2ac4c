// Linear layers: dispatch through the layout's row (kernels/weight_formats.h) to its kernels,
// the scalar reference, the int8-activation model.
#include "kernels/linear.h"

#include "core/numeric.h"
#include "core/thread_pool.h"
#include "kernels/q4_rows16.h"
#include "kernels/ggml_vec_dot.h"
#include "kernels/kernels_internal.h"
#include "kernels/ops.h"
#include "kernels/weight_formats.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace qf {

std::string_view weight_format_name(WeightFormat f) { return kernels::weight_format_row(f).name; }

int weight_block(const LinearWeight& w) {
  const int block = kernels::weight_format_row(w.format).block;
  return block == kernels::kGroupBlock ? w.group : block;
}

uint64_t LinearWeight::stored_bytes() const {
  return kernels::weight_format_row(format).stored_bytes(*this);
}

uint64_t LinearWeight::data_bytes() const {
  const uint64_t n = uint64_t(rows) * uint64_t(cols);
  switch (format) {
    case WeightFormat::f32: return n * 4;
    case WeightFormat::f16:
    case WeightFormat::bf16: return n * 2;
    case WeightFormat::fp8:
    case WeightFormat::int8: return n;
    case WeightFormat::nvfp4:
    case WeightFormat::mxfp4:
    case WeightFormat::int4_row_pairs:
    case WeightFormat::int4_packed32: return n / 2;
    case WeightFormat::ggml: return stored_bytes();
    case WeightFormat::nvfp4_rows16:
    case WeightFormat::mxfp4_rows16:
    case WeightFormat::int4_row_pairs_rows16:
    case WeightFormat::int4_packed32_rows16: return kernels::q4_rows16_bytes(*this);
  }
  return 0;
}

std::string_view kernel_mode_name(KernelMode m) { return m == KernelMode::exact ? "exact" : "fast"; }

std::optional<KernelMode> parse_kernel_mode(std::string_view name) {
  if (name == "exact") return KernelMode::exact;
  if (name == "fast") return KernelMode::fast;
  return std::nullopt;
}

bool matvec_uses_int8_activation(const LinearWeight& w) { return kernels::use_int8_matvec(w); }

namespace {

// The kernel linear_forward runs for a product of w over `tokens` tokens.
enum class Route {
  transposed_stream,  // a few tokens over a transposed float weight: its stored rows streamed
  ggml_int8,          // GGUF blocks in fast mode: llama.cpp's arithmetic
  int8_matvec,        // 4-bit, int8 activations (VNNI / AVX2): takes_int8_activations
  float_tokens,       // a few tokens over F32/F16/BF16 rows: streamed once
  amx,                // BF16 matrix-matrix on AMX tiles
  avx512bf16,         // BF16 matrix-matrix on vdpbf16ps
  decoded,            // float32 matrix-matrix on decoded tiles
  matvec,             // one token, float activations
};

Route route(const LinearWeight& w, int64_t tokens, KernelMode mode) {
  if (w.transposed && tokens <= kernels::kTransposedStreamTokens) {
    // Exact in either mode (float activations): a few tokens stream the stored rows once; more
    // take the decoded tiles below, which the token count amortises.
    return Route::transposed_stream;
  }
  const bool fast = mode == KernelMode::fast;
  if (fast && kernels::ggml_act_kind(w) != kernels::GgmlActKind::none) return Route::ggml_int8;
  if (kernels::takes_int8_activations(w, tokens, mode)) return Route::int8_matvec;
  const bool float_rows = (w.format == WeightFormat::f32 || w.format == WeightFormat::f16 ||
                           w.format == WeightFormat::bf16) && !w.transposed;
  // A few tokens (batched decode): the weights streamed once, as for one token; the BF16
  // matrix-matrix kernels' panel packing would cost more than their products. BF16 weights on
  // AVX512-BF16 without AMX: short prompts too (kBf16TokensPrefill).
  const int64_t few = w.format == WeightFormat::bf16 && kernels::cpu_has_avx512bf16() &&
                              !kernels::fits_bf16_tokens_amx(w)
                          ? kernels::kBf16TokensPrefill
                          : kernels::kSmallBatchTokens;
  if (tokens > 1 && tokens <= few && fast && float_rows) return Route::float_tokens;
  if (tokens > 1) {
    if (fast && kernels::use_bf16_matmul(w))
      return kernels::cpu_has_amx_bf16() && kernels::fits_amx_bf16(w) ? Route::amx
                                                                        : Route::avx512bf16;
    return Route::decoded;
  }
  return Route::matvec;
}

}  // namespace

void linear_forward(const LinearWeight& w, const float* x, int64_t tokens, float* y,
                    ThreadPool* pool, KernelMode mode) {
  if (tokens <= 0) return;
  const kernels::WeightFormatRow& row = kernels::weight_format_row(w.format);
  switch (route(w, tokens, mode)) {
    case Route::transposed_stream: kernels::matmul_float_transposed(w, x, tokens, y, pool); return;
    case Route::ggml_int8: kernels::matmul_ggml_int8(w, x, tokens, y, pool); return;
    case Route::int8_matvec: row.matvec_int8_activation(w, x, tokens, y, pool); return;
    case Route::float_tokens:
      if (kernels::fits_bf16_tokens_amx(w))
        kernels::matvec_bf16_tokens_amx(w, x, tokens, y, pool);
      else if (w.format == WeightFormat::bf16 && kernels::cpu_has_avx512bf16())
        kernels::matvec_bf16_tokens_avx512bf16(w, x, tokens, y, pool);
      else
        kernels::matvec_float_tokens(w, x, tokens, y, pool);
      return;
    case Route::amx: kernels::matmul_bf16_amx(w, x, tokens, y, pool); return;
    case Route::avx512bf16: kernels::matmul_bf16_avx512bf16(w, x, tokens, y, pool); return;
    case Route::decoded: kernels::matmul_decoded(w, x, tokens, y, pool); return;
    case Route::matvec: row.matvec(w, x, y, pool); return;
  }
}

void linear_forward_shared_input(std::span<const LinearWeight* const> ws, const float* x,
                                 int64_t tokens, std::span<float* const> ys, ThreadPool* pool,
                                 KernelMode mode) {
  if (ws.empty()) return;
  bool shared = tokens > 0 && kernels::amx_can_share_input(ws);
  for (const LinearWeight* w : ws) shared = shared && route(*w, tokens, mode) == Route::amx;
  if (shared) {
    kernels::matmul_bf16_amx_shared_input(ws, x, tokens, ys, pool);
    return;
  }
  // Decode's q/k/v and gate/up in the repacked 4-bit layouts: one activation quantization and
  // one pool loop instead of one per product (a Llama-1B NVFP4 layer at 2 threads, Emerald
  // Rapids: 0.89-0.90 -> 0.90-0.91 of a STREAM read).
  bool rows16 = tokens > 0 && kernels::q4_rows16_can_share_input(ws);
  for (const LinearWeight* w : ws) rows16 = rows16 && route(*w, tokens, mode) == Route::int8_matvec;
  if (rows16) {
    kernels::matvec_q4_rows16_int8act_shared(ws, x, tokens, ys, pool);
    return;
  }
  for (size_t i = 0; i < ws.size(); ++i) linear_forward(*ws[i], x, tokens, ys[i], pool, mode);
}

void linear_forward_gated_silu(const LinearWeight& gate, const LinearWeight& up, const float* x,
                               int64_t tokens, float* y, float* up_out, ThreadPool* pool,
                               KernelMode mode) {
  const LinearWeight* ws[] = {&gate, &up};
  if (tokens > 0 && gate.rows == up.rows && kernels::amx_can_share_input(ws) &&
      route(gate, tokens, mode) == Route::amx && route(up, tokens, mode) == Route::amx) {
    kernels::matmul_bf16_amx_gated_silu(gate, up, x, tokens, y, pool);
    return;
  }
  float* ys[] = {y, up_out};
  linear_forward_shared_input(ws, x, tokens, ys, pool, mode);
  const int64_t rows = gate.rows;
  kernels::for_row_tasks(pool, tokens, std::max<int64_t>(1, 16384 / rows), [&](int64_t t0, int64_t t1) {
    if (mode == KernelMode::fast) silu_mul_fast(y + t0 * rows, up_out + t0 * rows, (t1 - t0) * rows);
    else silu_mul(y + t0 * rows, up_out + t0 * rows, (t1 - t0) * rows);
  });
}

void dequantize_weight_rows(const LinearWeight& w, int64_t r0, int64_t n, float* out) {
  kernels::weight_format_row(w.format).dequantize_rows(w, r0, n, out);
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
  const WeightFormatRow& row = weight_format_row(w.format);
  return row.fits_int8_activation != nullptr && row.fits_int8_activation(w);
}

bool takes_int8_activations(const LinearWeight& w, int64_t tokens, KernelMode mode) {
  if (mode != KernelMode::fast || !use_int8_matvec(w)) return false;
  if (tokens <= kSmallBatchTokens) return true;
  if (use_bf16_matmul(w) && cpu_has_amx_bf16() && fits_amx_bf16(w)) return false;
  if (use_bf16_matmul(w) || cpu_has_avx512vnni()) return tokens <= kVnniInt8PrefillTokens;
  return w.format != WeightFormat::int4_row_pairs || tokens <= kRowPairInt8PrefillTokens;
}

bool use_bf16_matmul(const LinearWeight& w) {
  // Its panels are packed from stored rows; a transposed weight takes the decoded-tile path.
  return weight_format_row(w.format).bf16_exact && !w.transposed && cpu_has_avx512bf16();
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
  weight_format_row(w.format).decode_tile(w, r0, nr, c0, nc, out, ld);
}

}  // namespace kernels
}  // namespace qf

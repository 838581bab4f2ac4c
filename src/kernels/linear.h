// Linear layers y = x W^T over weights kept exactly as a checkpoint stores them (float or
// quantized, usually views into a memory-mapped file): the format tags, the weight view, and the
// matrix-vector / matrix-matrix products that decode quantized blocks on the fly.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

namespace qf {

class ThreadPool;

enum class WeightFormat : uint8_t {
  f32,             // float [rows, cols]
  f16,             // IEEE half [rows, cols]
  bf16,            // bfloat16 [rows, cols]
  nvfp4,           // E2M1 pairs [rows, cols/2] (element 2j low nibble), E4M3 [rows, cols/16],
                   // global_scale (ModelOpt weight_scale_2; compressed-tensors stores 1/it)
  mxfp4,           // E2M1 pairs [rows, cols/2], E8M0 [rows, cols/32]
  fp8,             // E4M3 [rows, cols], scales [rows] (per output channel)
  int8,            // I8 [rows, cols], scales [rows] (per output channel; SmoothQuant W8A8)
  int4_row_pairs,  // ModelOpt: U8 [rows/2, cols], byte = q[2i,k] | q[2i+1,k] << 4 (signed),
                   // scales [rows, cols/group]
  int4_packed32,   // compressed-tensors: I32 [rows, cols/8], element 8j+i = nibble i of word j,
                   // stored unsigned as q + 8; scales [rows, cols/group]
  ggml,            // a GGUF tensor in ggml blocks of type `ggml_type` (formats/ggml_types.h),
                   // rows of cols / group blocks; dequantized = the type's decode x global_scale
  nvfp4_rows16,    // NVFP4 / MXFP4 / INT4 (stored as row pairs or int32 words) repacked 16
  mxfp4_rows16,    // rows at a time, codes and scales together in `data` (kernels/q4_rows16.h;
  int4_row_pairs_rows16,  // block_scales and scales null): made at load by the engine for the
  int4_packed32_rows16,   // AVX-512 VNNI kernel, never read from or written to a file
};

std::string_view weight_format_name(WeightFormat f);

// A weight matrix as stored. Pointers are not owned (they view a mapped checkpoint) except
// `owned_scales`, which holds per-channel/group scales converted to float32 when the file stores
// them in BF16/F16 (they are 1/16..1/128 of the weight count, so the weights stay as stored).
struct LinearWeight {
  WeightFormat format = WeightFormat::f32;
  int64_t rows = 0;  // out_features
  int64_t cols = 0;  // in_features
  const void* data = nullptr;
  const uint8_t* block_scales = nullptr;  // nvfp4 E4M3 codes, mxfp4 E8M0 codes
  const float* scales = nullptr;          // fp8, int8 [rows], int4 [rows, cols/group]
  float global_scale = 1.f;               // nvfp4: dequantized = e2m1 * e4m3 * global_scale
  int group = 0;                          // int4 elements per scale
  // F32/F16/BF16 only: `data` holds the transpose, [cols, rows] (the x @ W layout gpt-oss
  // stores its experts in), read in place by every product.
  bool transposed = false;
  uint32_t ggml_type = 0;                 // ggml: the GGUF type id (group = its block size)
  // ggml Q4_0 only: `data` holds rows [0, rows / 8 * 8) repacked 8 at a time for the AVX2
  // kernel (kernels/ggml_rows8.h), the rest as stored; every reader goes through it.
  bool ggml_rows8 = false;
  std::shared_ptr<std::vector<float>> owned_scales;

  // Bytes a product reads from memory: the stored weights and their scales.
  uint64_t stored_bytes() const;
  // Bytes at `data` alone (codes or values; ggml blocks with their scales inside).
  uint64_t data_bytes() const;
};

// Elements per block scale along a row for the block formats (16, 32 or group); 0 otherwise.
int weight_block(const LinearWeight& w);

// Which products linear_forward may use.
//  exact: float32 activations and float32 accumulation of the dequantized weights everywhere;
//         the result is the float model of the checkpoint (what evaluation and calibration use).
//  fast:  on CPUs that have them, products of up to 8 tokens (decode, batched decode) of
//         NVFP4, MXFP4 and INT4 weights, and on CPUs with AVX2 but neither AVX-512 VNNI nor
//         BF16 their prefill too (ModelOpt's row-pair INT4 up to 24 tokens; see
//         kernels::takes_int8_activations), quantize each activation to int8 per 16 elements
//         (scale = amax / 127) and use integer dot products (AVX-512 VNNI, else AVX2; about
//         3-4x faster; relative activation error below 1/254 of each block's largest element;
//         a token's result does not depend on the others), F32/F16 weights of 2-8 tokens stream once with float
//         activations and BF16 ones with BF16 activations (AMX-BF16 tiles or vdpbf16ps), and
//         larger matrix-matrix products of BF16/F16 and 4-bit weights round the
//         activations to BF16 for AVX512-BF16 or AMX-BF16 dot products (float32 sums; what bench
//         and generate use). GGUF weights in ggml blocks (Q4_0, Q8_0, MXFP4, NVFP4, Q4_K, Q5_K,
//         Q6_K) take llama.cpp's CPU arithmetic in every product: activations quantized to the
//         type's vec_dot_type (Q8_0 or Q8_K) once per product, integer sums per block, scales
//         combined in float (kernels/ggml_vec_dot.h). The engine's SiLU gating takes a
//         vectorized exp and its RMSNorm sums squares in vector order in this mode
//         (silu_mul_fast, rmsnorm_fast in kernels/ops.h: within a few ulps).
enum class KernelMode : uint8_t { exact, fast };
std::string_view kernel_mode_name(KernelMode m);
std::optional<KernelMode> parse_kernel_mode(std::string_view name);

// y[t, r] = sum_c x[t, c] * W[r, c] for t < tokens; x is [tokens, cols], y is [tokens, rows],
// both float32 row-major, not aliasing. tokens == 1 uses the matrix-vector kernels, more the
// matrix-matrix ones. Work is split into tasks of output rows, so y does not depend on the
// pool's size. `pool` may be null (runs on the calling thread). Never throws for a valid weight.
void linear_forward(const LinearWeight& w, const float* x, int64_t tokens, float* y,
                    ThreadPool* pool, KernelMode mode);

// Several products over the same activations (q/k/v, gate/up): ys[i] = x ws[i]^T, x [tokens,
// cols] shared by every weight (same cols), ys[i] [tokens, ws[i]->rows]. The same results as
// one linear_forward per weight; where the fast AMX matrix-matrix kernel takes them all, x is
// rounded and laid out once and all the products' row tasks run in one parallel loop.
void linear_forward_shared_input(std::span<const LinearWeight* const> ws, const float* x,
                                 int64_t tokens, std::span<float* const> ys, ThreadPool* pool,
                                 KernelMode mode);

// A gated MLP's SiLU half: y = silu(x gate^T) * (x up^T), x [tokens, cols] shared, gate and up
// of the same shape, y [tokens, rows]. The values of linear_forward_shared_input({gate, up})
// followed by silu_mul (exact mode) or silu_mul_fast (fast mode; kernels/ops.h); where the fast
// AMX kernel takes both, fused into its output stage, so that the two products never travel
// through memory. `up_out` [tokens, rows] is scratch for the other paths.
void linear_forward_gated_silu(const LinearWeight& gate, const LinearWeight& up, const float* x,
                               int64_t tokens, float* y, float* up_out, ThreadPool* pool,
                               KernelMode mode);

// Whether linear_forward(w, x, 1, ..., KernelMode::fast) takes the int8-activation path on this
// CPU.
bool matvec_uses_int8_activation(const LinearWeight& w);

// Dequantizes rows [r0, r0 + n) to float32 [n, cols] through the formats' reference
// dequantizers (core/numeric.h, formats/*.h). For tests and the scalar reference.
void dequantize_weight_rows(const LinearWeight& w, int64_t r0, int64_t n, float* out);

// The scalar reference product: dequantize_weight_rows, then a double-precision dot product.
void linear_reference(const LinearWeight& w, const float* x, int64_t tokens, float* y);

// The scalar model of the int8-activation matrix-vector product (one token): x quantized per 16
// elements exactly as the kernel does, then a double-precision dot product with the
// dequantized weights. cols must be a multiple of 16.
void linear_reference_int8_activation(const LinearWeight& w, const float* x, float* y);

}  // namespace qf

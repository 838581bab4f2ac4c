// The fast products of GGUF weights in ggml blocks (kernels/ggml_vec_dot.h): activations
// quantized as ggml-cpu does (Q8_0 / Q8_K), integer sums per block, float combine. Held against
// a scalar model of ggml's arithmetic written here from the block layouts, at 1 and 2 threads,
// odd row counts, decode and prefill.
#include "core/error.h"
#include "core/numeric.h"
#include "core/thread_pool.h"
#include "formats/ggml_quants.h"
#include "formats/ggml_types.h"
#include "kernels/ggml_rows8.h"
#include "kernels/ggml_vec_dot.h"
#include "kernels/linear.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

namespace qf {
namespace {

std::vector<float> random_vector(size_t n, uint32_t seed, float scale) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.f, scale);
  std::vector<float> v(n);
  for (float& f : v) f = dist(rng);
  return v;
}

struct GgmlMatrix {
  std::vector<uint8_t> blocks;
  LinearWeight w;
};

GgmlMatrix make_matrix(GgmlType type, int64_t rows, int64_t cols, uint32_t seed) {
  const GgmlTypeInfo& info = ggml_type_info(type);
  GgmlMatrix m;
  auto f = random_vector(size_t(rows * cols), seed, 0.05f);
  // Some outliers and an all-zero block, so scales vary widely and zero scales are covered.
  for (size_t i = 0; i < f.size(); i += 97) f[i] *= 8.f;
  std::fill(f.begin(), f.begin() + info.block_size, 0.f);
  m.blocks.resize(size_t(rows * cols / info.block_size * info.block_bytes));
  info.quantize(f.data(), m.blocks.data(), rows * cols);
  m.w.format = WeightFormat::ggml;
  m.w.rows = rows;
  m.w.cols = cols;
  m.w.data = m.blocks.data();
  m.w.ggml_type = uint32_t(type);
  m.w.group = info.block_size;
  if (type == GgmlType::NVFP4) m.w.global_scale = 0.75f;
  return m;
}

// ggml's arithmetic, spelled out per element from the dequantizer's view: integer q of weights
// and activations, per block int sums, then scales.
const int kFp4[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

double model_dot(const GgmlMatrix& m, int64_t r, const kernels::GgmlActivations& a, int64_t t,
                 double* magnitude) {
  const LinearWeight& w = m.w;
  const GgmlTypeInfo& info = ggml_type_info(GgmlType(w.ggml_type));
  const uint8_t* row = m.blocks.data() + r * (w.cols / info.block_size) * info.block_bytes;
  const int8_t* q = a.q.data() + t * a.padded;
  const float* d = a.d.data() + t * a.d_stride();
  double sum = 0, mag = 0;
  auto add = [&](double scale, int64_t isum, int64_t iabs) {
    sum += scale * double(isum);
    mag += std::fabs(scale) * double(iabs);
  };
  auto f16 = [](const uint8_t* p) { return f16_to_f32(uint16_t(p[0] | (p[1] << 8))); };
  const int64_t nb = w.cols / info.block_size;
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* p = row + b * info.block_bytes;
    switch (GgmlType(w.ggml_type)) {
      case GgmlType::Q4_0:
      case GgmlType::Q8_0:
      case GgmlType::MXFP4: {
        int64_t s = 0, sa = 0;
        for (int j = 0; j < 32; ++j) {
          int v;
          if (w.ggml_type == uint32_t(GgmlType::Q4_0)) {
            v = (j < 16 ? (p[2 + j] & 0xF) : (p[2 + j - 16] >> 4)) - 8;
          } else if (w.ggml_type == uint32_t(GgmlType::Q8_0)) {
            v = int8_t(p[2 + j]);
          } else {
            v = kFp4[j < 16 ? (p[1 + j] & 0xF) : (p[1 + j - 16] >> 4)];
          }
          s += v * q[32 * b + j];
          sa += std::abs(v * q[32 * b + j]);
        }
        const double dw = w.ggml_type == uint32_t(GgmlType::MXFP4) ? ggml_e8m0_to_f32_half(p[0])
                                                                   : f16(p);
        add(dw * d[b], s, sa);
        break;
      }
      case GgmlType::NVFP4:
        for (int sb = 0; sb < 4; ++sb) {
          int64_t s = 0, sa = 0;
          for (int j = 0; j < 16; ++j) {
            const uint8_t byte = p[4 + 8 * sb + (j % 8)];
            const int v = kFp4[j < 8 ? (byte & 0xF) : (byte >> 4)];
            s += v * q[64 * b + 16 * sb + j];
            sa += std::abs(v * q[64 * b + 16 * sb + j]);
          }
          add(double(ggml_ue4m3_to_f32_half(p[sb])) * d[2 * b + sb / 2], s, sa);
        }
        break;
      default: {  // k-quants: through the float dequantization of each super-block, with the
                  // min terms: x = d * sc * q - dmin * m, so the dot is exact in double
        std::vector<float> deq(256);
        info.dequantize(p, deq.data(), 256);
        for (int j = 0; j < 256; ++j) {
          const double v = double(deq[size_t(j)]) * double(q[256 * b + j]) * d[b];
          sum += v;
          mag += std::fabs(v);
        }
      }
    }
  }
  *magnitude = mag * w.global_scale;
  return sum * w.global_scale;
}

const GgmlType kTypes[] = {GgmlType::Q4_0, GgmlType::Q8_0, GgmlType::MXFP4, GgmlType::NVFP4,
                           GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K};

TEST(GgmlMatVec, FastProductMatchesScalarModelOfGgml) {
  ThreadPool one(1), two(2);
  for (GgmlType type : kTypes) {
    const int block = ggml_type_info(type).block_size;
    // A row of an odd number of blocks (a half-vector tail for the 32-element types).
    // Rows of 1, 2, 3 and 5 blocks (every tail of the 128-element chunks) and a long one.
    for (int64_t cols : {int64_t(block), int64_t(block) * 2, int64_t(block) * 3,
                         int64_t(block) * 5, int64_t(2048 + (block == 32 ? 32 : 0))}) {
      const int64_t rows = 37, tokens = 6;
      const GgmlMatrix m = make_matrix(type, rows, cols, uint32_t(cols + int(type)));
      ASSERT_NE(kernels::ggml_act_kind(m.w), kernels::GgmlActKind::none);
      const auto x = random_vector(size_t(tokens * cols), 11, 1.f);
      kernels::GgmlActivations a;
      kernels::ggml_quantize_activations(kernels::ggml_act_kind(m.w), x.data(), tokens, cols, a);

      std::vector<float> y1(size_t(tokens * rows)), y2(y1.size());
      linear_forward(m.w, x.data(), tokens, y1.data(), &one, KernelMode::fast);
      linear_forward(m.w, x.data(), tokens, y2.data(), &two, KernelMode::fast);
      ASSERT_EQ(0, std::memcmp(y1.data(), y2.data(), y1.size() * 4))
          << ggml_type_info(type).name << ": thread count changed the output";
      for (int64_t t = 0; t < tokens; ++t) {
        // Prefill gives the bytes of token-by-token decode.
        std::vector<float> yt(static_cast<size_t>(rows));
        linear_forward(m.w, x.data() + t * cols, 1, yt.data(), &two, KernelMode::fast);
        ASSERT_EQ(0, std::memcmp(yt.data(), y1.data() + t * rows, size_t(rows) * 4))
            << ggml_type_info(type).name << " token " << t;
        for (int64_t r = 0; r < rows; ++r) {
          double mag = 0;
          const double want = model_dot(m, r, a, t, &mag);
          const float got = y1[size_t(t * rows + r)];
          ASSERT_NEAR(got, want, 1e-6 * mag + 1e-30)
              << ggml_type_info(type).name << " cols " << cols << " row " << r << " token " << t;
          // The scalar model in the kernels (the portable fallback) in ggml's float order.
          const float scalar = kernels::ggml_vec_dot_scalar(m.w, r, a, t) * m.w.global_scale;
          ASSERT_NEAR(scalar, want, 1e-6 * mag + 1e-30) << ggml_type_info(type).name;
          // Bit-exact where the float order is the same: the scalar fallback (no AVX-512 VNNI
          // and no AVX2 kernel), and the k-quant kernels of either (exact integer sums per
          // super-block, the model's float combine).
          if ((!kernels::ggml_has_simd(m.w) && !kernels::ggml_has_avx2_kernel(m.w)) ||
              kernels::ggml_act_kind(m.w) == kernels::GgmlActKind::q8_k) {
            ASSERT_EQ(got, scalar) << ggml_type_info(type).name << " row " << r;
          }
        }
      }
    }
  }
}

// The AVX2 kernels of CPUs without AVX-512 VNNI, called directly (the driver takes AVX-512 where
// the CPU has it): the scalar model to float rounding, the K-quants bit for bit.
TEST(GgmlMatVec, Avx2KernelsMatchScalarModel) {
  int tested = 0;
  for (GgmlType type : kTypes) {
    const int block = ggml_type_info(type).block_size;
    for (int64_t cols : {int64_t(block), int64_t(block) * 3, int64_t(2048)}) {
      const int64_t rows = 9, tokens = 3;
      const GgmlMatrix m = make_matrix(type, rows, cols, uint32_t(cols + 7 * int(type)));
      if (!kernels::ggml_has_avx2_kernel(m.w)) continue;
      ++tested;
      const auto x = random_vector(size_t(tokens * cols), 13, 1.f);
      kernels::GgmlActivations a;
      kernels::ggml_quantize_activations(kernels::ggml_act_kind(m.w), x.data(), tokens, cols, a);
      std::vector<float> y(size_t(tokens * rows));
      kernels::ggml_rows_avx2(m.w, a, 0, rows, 0, tokens, m.w.global_scale, y.data());
      for (int64_t t = 0; t < tokens; ++t)
        for (int64_t r = 0; r < rows; ++r) {
          double mag = 0;
          const double want = model_dot(m, r, a, t, &mag);
          const float got = y[size_t(t * rows + r)];
          const float scalar = kernels::ggml_vec_dot_scalar(m.w, r, a, t) * m.w.global_scale;
          ASSERT_NEAR(got, want, 1e-6 * mag + 1e-30)
              << ggml_type_info(type).name << " cols " << cols << " row " << r << " token " << t;
          if (kernels::ggml_act_kind(m.w) == kernels::GgmlActKind::q8_k) {
            ASSERT_EQ(got, scalar) << ggml_type_info(type).name << " row " << r;
          }
        }
    }
  }
  if (tested == 0) GTEST_SKIP() << "no AVX2";
  EXPECT_EQ(tested, 6 * 3);
}

// Q4_0 rows repacked 8 at a time (kernels/ggml_rows8.h, what the engine's weight copy holds on
// AVX2 CPUs): every row reads back as stored, and the fast product (groups of 8 rows, the 3 tail
// rows as stored; 4 tokens then 1) holds the scalar model at 1 and 2 threads, the same bits.
TEST(GgmlMatVec, RepackedQ4_0RowsMatchScalarModel) {
  for (int64_t cols : {int64_t(256), int64_t(2048)}) {
    const int64_t rows = 19, tokens = 5;
    const GgmlMatrix m = make_matrix(GgmlType::Q4_0, rows, cols, uint32_t(cols));
    if (!kernels::ggml_has_avx2_kernel(m.w)) GTEST_SKIP() << "no AVX2";
    std::vector<uint8_t> packed(size_t(m.w.stored_bytes()));
    kernels::ggml_repack_rows8(m.w, packed.data());
    LinearWeight r = m.w;
    r.data = packed.data();
    r.ggml_rows8 = true;
    const size_t row_bytes = size_t(cols / 32 * 18);
    std::vector<uint8_t> scratch;
    for (int64_t i = 0; i < rows; ++i)
      ASSERT_EQ(std::memcmp(kernels::ggml_stored_row(r, i, scratch), m.blocks.data() + i * row_bytes,
                            row_bytes), 0)
          << "row " << i;
    const auto x = random_vector(size_t(tokens * cols), 5, 1.f);
    kernels::GgmlActivations a;
    kernels::ggml_quantize_activations(kernels::GgmlActKind::q8_0, x.data(), tokens, cols, a);
    std::vector<float> y1(size_t(tokens * rows)), y2(y1.size());
    ThreadPool two(2);
    linear_forward(r, x.data(), tokens, y1.data(), nullptr, KernelMode::fast);
    linear_forward(r, x.data(), tokens, y2.data(), &two, KernelMode::fast);
    for (int64_t t = 0; t < tokens; ++t)
      for (int64_t i = 0; i < rows; ++i) {
        double mag = 0;
        const double want = model_dot(m, i, a, t, &mag);
        ASSERT_NEAR(y1[size_t(t * rows + i)], want, 1e-6 * mag + 1e-30)
            << "cols " << cols << " row " << i << " token " << t;
        ASSERT_EQ(y1[size_t(t * rows + i)], y2[size_t(t * rows + i)]);
      }
    // A group of 8 cut in two would lose rows: refused rather than skipped.
    EXPECT_THROW(kernels::ggml_rows_avx2(r, a, 3, rows, 0, tokens, 1.f, y1.data()), Error);
  }
}

// Q8_0 activations: ggml-cpu's x86 quantize_row_q8_0 (127 / amax, round half to even, fp16 d).
TEST(GgmlMatVec, Q8_0ActivationsAsGgmlCpu) {
  std::vector<float> x(32, 0.f);
  x[0] = 1.27f;
  x[1] = -0.005f;  // -0.5 exactly: rounds to even (0)
  x[2] = 0.015f;   // 1.5: rounds to 2
  std::vector<int8_t> q(32);
  float d = 0;
  kernels::ggml_quantize_act_q8_0(x.data(), 32, q.data(), &d);
  EXPECT_EQ(q[0], 127);
  EXPECT_EQ(q[1], 0);
  EXPECT_EQ(q[2], 2);
  EXPECT_EQ(d, f16_to_f32(f32_to_f16(1.27f / 127.f)));
  std::fill(x.begin(), x.end(), 0.f);
  kernels::ggml_quantize_act_q8_0(x.data(), 32, q.data(), &d);
  EXPECT_EQ(d, 0.f);
  EXPECT_EQ(q, std::vector<int8_t>(32, 0));
}

// The AVX-512 Q8_0 quantizer (where the CPU has it) gives the scalar one's bytes, ties included.
TEST(GgmlMatVec, Q8_0SimdQuantizerEqualsScalar) {
  auto x = random_vector(4096, 21, 1.f);
  for (size_t i = 0; i < 64; ++i) x[i] = float(int(i) - 32) * 0.5f;  // exact halves: ties
  std::fill(x.begin() + 64, x.begin() + 96, 0.f);                     // an all-zero block
  std::vector<int8_t> q1(x.size()), q2(x.size());
  std::vector<float> d1(x.size() / 32), d2(x.size() / 32);
  kernels::ggml_quantize_act_q8_0(x.data(), int64_t(x.size()), q1.data(), d1.data());
  if (!kernels::ggml_quantize_act_q8_0_simd(x.data(), int64_t(x.size()), q2.data(), d2.data()))
    GTEST_SKIP() << "no AVX-512 VNNI";
  EXPECT_EQ(q1, q2);
  EXPECT_EQ(d1, d2);
}

// Q8_K activations: ggml's quantize_row_q8_K: iscale = -127 / (the signed value of largest
// magnitude), so that value becomes -127 and d = 1 / iscale carries the sign back; q clamped at
// 127, bsums per 16.
TEST(GgmlMatVec, Q8_KActivationsAsGgml) {
  auto x = random_vector(512, 3, 1.f);
  x[5] = -4.f;  // the block's largest magnitude, negative
  std::vector<int8_t> q(512);
  std::vector<float> d(2);
  std::vector<int16_t> bsums(32);
  kernels::ggml_quantize_act_q8_k(x.data(), 512, q.data(), d.data(), bsums.data());
  EXPECT_EQ(q[5], -127);
  EXPECT_EQ(d[0], 1 / (-127.f / -4.f));
  for (int j = 0; j < 32; ++j) {
    int s = 0;
    for (int i = 0; i < 16; ++i) s += q[size_t(16 * j + i)];
    EXPECT_EQ(bsums[size_t(j)], s);
  }
  for (size_t i = 0; i < 512; ++i) EXPECT_NEAR(float(q[i]) * d[i / 256], x[i], d[i / 256] * 0.5f + 1e-6f);
  // A positive maximum: iscale and d are negative.
  std::vector<float> y(256, 0.f);
  y[0] = 2.f;
  y[1] = -1.f;
  kernels::ggml_quantize_act_q8_k(y.data(), 256, q.data(), d.data(), bsums.data());
  EXPECT_EQ(q[0], -127);
  EXPECT_EQ(q[1], 64);  // nearest_int(63.5) = 64 (half to even)
  EXPECT_LT(d[0], 0.f);
}

}  // namespace
}  // namespace qf

// Matrix-vector product for weights stored as F32, BF16 or F16, widened to float32 in
// registers. Highway, runtime dispatch, split by rows.
#include "kernels/kernels_internal.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/matvec_float.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep

#include <hwy/highway.h>

#include "core/error.h"
#include "core/numeric.h"
#include "core/thread_pool.h"
#include "kernels/simd-inl.h"

#include <algorithm>
#include <array>
#include <vector>

HWY_BEFORE_NAMESPACE();
namespace qf::kernels {
namespace HWY_NAMESPACE {

// A weight stored transposed (LinearWeight::transposed: S = W^T, [cols, rows]): y[t] = sum over
// c of x[t, c] * S[c, :], streamed row after row of S, each S vector loaded once for all tokens.
// Each task takes a fixed range of c into its own partial y [tokens, rows] (L1/L2 for a few
// tokens), and the partials are summed in task order, so the result does not depend on the
// pool's size.
template <class Load, class Scalar>
void FloatColumns(const LinearWeight& w, const float* x, int64_t tokens, float* y,
                  ThreadPool* pool, size_t elem, const Load& load, const Scalar& scalar) {
  const hn::ScalableTag<float> df;
  const int64_t N = int64_t(hn::Lanes(df));
  const int64_t rows = w.rows, cols = w.cols, out = tokens * rows;
  if (tokens > kTransposedStreamTokens)
    fail("transposed float product of {} tokens (at most {})", tokens, kTransposedStreamTokens);
  const auto* data = static_cast<const uint8_t*>(w.data);
  const int64_t per_task = std::max<int64_t>(16, (cols + 31) / 32);
  const int64_t tasks = (cols + per_task - 1) / per_task;
  // Reused across calls: a fresh allocation of this size would be page faults on every call.
  // (Tasks run on other threads, which must see this thread's buffer: hence the pointer.)
  thread_local std::vector<float> scratch;
  scratch.assign(size_t(tasks * out), 0.f);
  float* const partial = scratch.data();
  auto part = [&](int64_t task) {
    float* acc = partial + task * out;
    const int64_t c1 = std::min(cols, (task + 1) * per_task);
    std::array<float, 4 * kTransposedStreamTokens> xs;
    for (int64_t c = task * per_task; c < c1; c += 4) {
      const int64_t k = std::min<int64_t>(4, c1 - c);
      const uint8_t* s[4];
      for (int64_t i = 0; i < 4; ++i) {
        // Short groups repeat their last row with a zero weight.
        s[i] = data + size_t((c + std::min(i, k - 1)) * rows) * elem;
        for (int64_t t = 0; t < tokens; ++t)
          xs[size_t(4 * t + i)] = i < k ? x[t * cols + c + i] : 0.f;
      }
      int64_t r = 0;
      for (; r + N <= rows; r += N) {
        const auto w0 = load(df, s[0], r), w1 = load(df, s[1], r), w2 = load(df, s[2], r),
                   w3 = load(df, s[3], r);
        for (int64_t t = 0; t < tokens; ++t) {
          const float* xt = xs.data() + 4 * t;
          float* at = acc + t * rows + r;
          auto a = hn::LoadU(df, at);
          a = hn::MulAdd(w0, hn::Set(df, xt[0]), a);
          a = hn::MulAdd(w1, hn::Set(df, xt[1]), a);
          a = hn::MulAdd(w2, hn::Set(df, xt[2]), a);
          a = hn::MulAdd(w3, hn::Set(df, xt[3]), a);
          hn::StoreU(a, df, at);
        }
      }
      for (; r < rows; ++r)
        for (int64_t t = 0; t < tokens; ++t)
          for (int64_t i = 0; i < 4; ++i)
            acc[t * rows + r] += scalar(s[i], r) * xs[size_t(4 * t + i)];
    }
  };
  if (pool) pool->parallel_for(tasks, part);
  else for (int64_t t = 0; t < tasks; ++t) part(t);
  for_row_tasks(pool, out, std::max<int64_t>(N, out / 8), [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      float sum = 0.f;
      for (int64_t t = 0; t < tasks; ++t) sum += partial[t * out + i];
      y[i] = sum;
    }
  });
}

template <class Load, class Scalar>
void FloatRows(const LinearWeight& w, const float* x, float* y, ThreadPool* pool, size_t elem,
               const Load& load, const Scalar& scalar) {
  if (w.transposed) return FloatColumns(w, x, 1, y, pool, elem, load, scalar);
  const hn::ScalableTag<float> df;
  const int64_t N = int64_t(hn::Lanes(df));
  const int64_t cols = w.cols;
  const auto* data = static_cast<const uint8_t*>(w.data);
  // ~256 KB tasks (at least 16): each task restarts the hardware prefetcher's stream, which
  // 64 KB tasks paid often enough to show on a 151936 x 2048 BF16 head (+5% decode).
  const int64_t per_task =
      std::min(matvec_rows_per_task(w, 4) * 4, std::max<int64_t>(4, w.rows / 16 / 4 * 4));
  const int64_t row_bytes = cols * int64_t(elem);
  for_row_tasks(pool, w.rows, per_task, [&](int64_t r0, int64_t r1) {
    int64_t r = r0;
    // Four rows at a time share each activation load and keep four weight streams in flight
    // (one row at a time left BF16 decode at ~2/3 of the memory's read rate).
    for (; r + 4 <= r1; r += 4) {
      const uint8_t* p0 = data + size_t(r * cols) * elem;
      const uint8_t* p1 = p0 + size_t(cols) * elem;
      const uint8_t* p2 = p1 + size_t(cols) * elem;
      const uint8_t* p3 = p2 + size_t(cols) * elem;
      auto a0 = hn::Zero(df), a1 = hn::Zero(df), a2 = hn::Zero(df), a3 = hn::Zero(df);
      auto b0 = hn::Zero(df), b1 = hn::Zero(df), b2 = hn::Zero(df), b3 = hn::Zero(df);
      int64_t c = 0;
      for (; c + 2 * N <= cols; c += 2 * N) {
        // To L2 (row_prefetch_offset). An L1 prefetch of each row's next lines as well made
        // it slower on Zen 4 and no faster on Emerald Rapids.
        for (int64_t k = c * int64_t(elem); k < (c + 2 * N) * int64_t(elem); k += 64) {
          const int64_t ahead = row_prefetch_offset(k, row_bytes) + k;
          __builtin_prefetch(p0 + ahead, 0, 2);
          __builtin_prefetch(p1 + ahead, 0, 2);
          __builtin_prefetch(p2 + ahead, 0, 2);
          __builtin_prefetch(p3 + ahead, 0, 2);
        }
        const auto x0 = hn::LoadU(df, x + c), x1 = hn::LoadU(df, x + c + N);
        a0 = hn::MulAdd(load(df, p0, c), x0, a0);
        b0 = hn::MulAdd(load(df, p0, c + N), x1, b0);
        a1 = hn::MulAdd(load(df, p1, c), x0, a1);
        b1 = hn::MulAdd(load(df, p1, c + N), x1, b1);
        a2 = hn::MulAdd(load(df, p2, c), x0, a2);
        b2 = hn::MulAdd(load(df, p2, c + N), x1, b2);
        a3 = hn::MulAdd(load(df, p3, c), x0, a3);
        b3 = hn::MulAdd(load(df, p3, c + N), x1, b3);
      }
      for (; c + N <= cols; c += N) {
        const auto x0 = hn::LoadU(df, x + c);
        a0 = hn::MulAdd(load(df, p0, c), x0, a0);
        a1 = hn::MulAdd(load(df, p1, c), x0, a1);
        a2 = hn::MulAdd(load(df, p2, c), x0, a2);
        a3 = hn::MulAdd(load(df, p3, c), x0, a3);
      }
      float d0 = hn::GetLane(hn::SumOfLanes(df, hn::Add(a0, b0)));
      float d1 = hn::GetLane(hn::SumOfLanes(df, hn::Add(a1, b1)));
      float d2 = hn::GetLane(hn::SumOfLanes(df, hn::Add(a2, b2)));
      float d3 = hn::GetLane(hn::SumOfLanes(df, hn::Add(a3, b3)));
      for (; c < cols; ++c) {
        d0 += scalar(p0, c) * x[c];
        d1 += scalar(p1, c) * x[c];
        d2 += scalar(p2, c) * x[c];
        d3 += scalar(p3, c) * x[c];
      }
      y[r] = d0;
      y[r + 1] = d1;
      y[r + 2] = d2;
      y[r + 3] = d3;
    }
    for (; r < r1; ++r) {
      const uint8_t* row = data + size_t(r * cols) * elem;
      auto a0 = hn::Zero(df), a1 = hn::Zero(df), a2 = hn::Zero(df), a3 = hn::Zero(df);
      int64_t c = 0;
      for (; c + 4 * N <= cols; c += 4 * N) {
        a0 = hn::MulAdd(load(df, row, c), hn::LoadU(df, x + c), a0);
        a1 = hn::MulAdd(load(df, row, c + N), hn::LoadU(df, x + c + N), a1);
        a2 = hn::MulAdd(load(df, row, c + 2 * N), hn::LoadU(df, x + c + 2 * N), a2);
        a3 = hn::MulAdd(load(df, row, c + 3 * N), hn::LoadU(df, x + c + 3 * N), a3);
      }
      for (; c + N <= cols; c += N) a0 = hn::MulAdd(load(df, row, c), hn::LoadU(df, x + c), a0);
      float dot = hn::GetLane(hn::SumOfLanes(df, hn::Add(hn::Add(a0, a1), hn::Add(a2, a3))));
      for (; c < cols; ++c) dot += scalar(row, c) * x[c];
      y[r] = dot;
    }
  });
}

// y [tokens, rows] = x [tokens, cols] W^T for a few tokens (batched decode): R rows at a time
// against T tokens, each weight vector loaded once for the T tokens and each activation vector
// for the R rows, R * T accumulators in registers.
template <int R, int T, class Load, class Scalar>
void FloatRowsTokens(const uint8_t* data, size_t elem, int64_t r, int64_t cols, int64_t rows,
                     const float* x, float* y, const Load& load, const Scalar& scalar) {
  const hn::ScalableTag<float> df;
  const int64_t N = int64_t(hn::Lanes(df));
  const uint8_t* p[R];
  for (int i = 0; i < R; ++i) p[i] = data + size_t((r + i) * cols) * elem;
  hn::Vec<decltype(df)> acc[R * T];
  for (int i = 0; i < R * T; ++i) acc[i] = hn::Zero(df);
  int64_t c = 0;
  for (; c + N <= cols; c += N) {
    hn::Vec<decltype(df)> wv[R];
    for (int i = 0; i < R; ++i) wv[i] = load(df, p[i], c);
    for (int t = 0; t < T; ++t) {
      const auto xv = hn::LoadU(df, x + t * cols + c);
      for (int i = 0; i < R; ++i) acc[i * T + t] = hn::MulAdd(wv[i], xv, acc[i * T + t]);
    }
  }
  for (int i = 0; i < R; ++i)
    for (int t = 0; t < T; ++t) {
      float d = hn::GetLane(hn::SumOfLanes(df, acc[i * T + t]));
      for (int64_t k = c; k < cols; ++k) d += scalar(p[i], k) * x[t * cols + k];
      y[t * rows + r + i] = d;
    }
}

template <int T, class Load, class Scalar>
void FloatTokenGroup(const LinearWeight& w, const float* x, float* y, ThreadPool* pool,
                     size_t elem, const Load& load, const Scalar& scalar) {
  const auto* data = static_cast<const uint8_t*>(w.data);
  const int64_t per_task =
      std::min(matvec_rows_per_task(w, 2) * 4, std::max<int64_t>(2, w.rows / 16 / 2 * 2));
  for_row_tasks(pool, w.rows, per_task, [&](int64_t r0, int64_t r1) {
    int64_t r = r0;
    for (; r + 2 <= r1; r += 2)
      FloatRowsTokens<2, T>(data, elem, r, w.cols, w.rows, x, y, load, scalar);
    for (; r < r1; ++r) FloatRowsTokens<1, T>(data, elem, r, w.cols, w.rows, x, y, load, scalar);
  });
}

using DF = hn::ScalableTag<float>;

// Calls fn(element bytes, vector load, scalar load) with the accessors of w's float format.
template <class Fn>
void WithFloatAccess(const LinearWeight& w, const Fn& fn) {
  switch (w.format) {
    case WeightFormat::bf16:
      fn(
          size_t(2),
          [](DF d, const uint8_t* row, int64_t c) {
            return LoadBF16AsF32(d, reinterpret_cast<const uint16_t*>(row) + c);
          },
          [](const uint8_t* row, int64_t c) {
            return bf16_to_f32(reinterpret_cast<const uint16_t*>(row)[c]);
          });
      break;
    case WeightFormat::f16:
      fn(
          size_t(2),
          [](DF d, const uint8_t* row, int64_t c) {
            return LoadF16AsF32(d, reinterpret_cast<const uint16_t*>(row) + c);
          },
          [](const uint8_t* row, int64_t c) {
            return f16_to_f32(reinterpret_cast<const uint16_t*>(row)[c]);
          });
      break;
    default:  // f32
      fn(
          size_t(4),
          [](DF d, const uint8_t* row, int64_t c) {
            return hn::LoadU(d, reinterpret_cast<const float*>(row) + c);
          },
          [](const uint8_t* row, int64_t c) { return reinterpret_cast<const float*>(row)[c]; });
      break;
  }
}

void MatVecFloat(const LinearWeight& w, const float* x, float* y, ThreadPool* pool) {
  WithFloatAccess(w, [&](size_t elem, const auto& load, const auto& scalar) {
    FloatRows(w, x, y, pool, elem, load, scalar);
  });
}

void MatVecFloatTokens(const LinearWeight& w, const float* x, int64_t tokens, float* y,
                       ThreadPool* pool) {
  WithFloatAccess(w, [&](size_t elem, const auto& load, const auto& scalar) {
    // Groups of 8, 4, 2 and 1 tokens, each reading the weights once.
    for (int64_t t0 = 0; t0 < tokens;) {
      const int64_t left = tokens - t0;
      const float* xt = x + t0 * w.cols;
      float* yt = y + t0 * w.rows;
      if (left >= 8) {
        FloatTokenGroup<8>(w, xt, yt, pool, elem, load, scalar);
        t0 += 8;
      } else if (left >= 4) {
        FloatTokenGroup<4>(w, xt, yt, pool, elem, load, scalar);
        t0 += 4;
      } else if (left >= 2) {
        FloatTokenGroup<2>(w, xt, yt, pool, elem, load, scalar);
        t0 += 2;
      } else {
        FloatRows(w, xt, yt, pool, elem, load, scalar);
        t0 += 1;
      }
    }
  });
}

void MatMulTransposedFloat(const LinearWeight& w, const float* x, int64_t tokens, float* y,
                           ThreadPool* pool) {
  WithFloatAccess(w, [&](size_t elem, const auto& load, const auto& scalar) {
    FloatColumns(w, x, tokens, y, pool, elem, load, scalar);
  });
}

}  // namespace HWY_NAMESPACE
}  // namespace qf::kernels
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace qf::kernels {
HWY_EXPORT(MatVecFloat);
HWY_EXPORT(MatMulTransposedFloat);
HWY_EXPORT(MatVecFloatTokens);
void matvec_float_tokens(const LinearWeight& w, const float* x, int64_t tokens, float* y,
                         ThreadPool* pool) {
  HWY_DYNAMIC_DISPATCH(MatVecFloatTokens)(w, x, tokens, y, pool);
}
void matvec_f32(const LinearWeight& w, const float* x, float* y, ThreadPool* pool) {
  HWY_DYNAMIC_DISPATCH(MatVecFloat)(w, x, y, pool);
}
void matvec_f16(const LinearWeight& w, const float* x, float* y, ThreadPool* pool) {
  HWY_DYNAMIC_DISPATCH(MatVecFloat)(w, x, y, pool);
}
void matvec_bf16(const LinearWeight& w, const float* x, float* y, ThreadPool* pool) {
  HWY_DYNAMIC_DISPATCH(MatVecFloat)(w, x, y, pool);
}
void matmul_float_transposed(const LinearWeight& w, const float* x, int64_t tokens, float* y,
                             ThreadPool* pool) {
  HWY_DYNAMIC_DISPATCH(MatMulTransposedFloat)(w, x, tokens, y, pool);
}
}  // namespace qf::kernels
#endif

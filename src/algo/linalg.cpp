// Blocked Cholesky, triangular inverse and the float update kernel behind GPTQ.
#include "algo/linalg.h"

#include "core/thread_pool.h"

#include <algorithm>
#include <cmath>

namespace qf {

namespace {

constexpr int64_t kPanel = 64;    // rows per Cholesky / inverse panel
constexpr int64_t kChunk = 256;   // columns per task chunk (a cache-sized strip)
constexpr int64_t kRowTile = 16;  // rows per trailing-update task

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define QF_VECTOR_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define QF_VECTOR_CLONES
#endif

// y[0, len) -= s * x[0, len)
QF_VECTOR_CLONES void axpy_sub_d(double* __restrict y, const double* __restrict x, double s,
                                 int64_t len) {
  for (int64_t j = 0; j < len; ++j) y[j] -= s * x[j];
}

// Upper Cholesky in place (A = R^T R, R in the upper triangle; the lower triangle is neither
// read nor written). Right-looking, panels of kPanel rows.
bool cholesky_upper_in_place(double* a, int64_t n, ThreadPool& pool) {
  for (int64_t j0 = 0; j0 < n; j0 += kPanel) {
    const int64_t j1 = std::min(j0 + kPanel, n);
    // Diagonal block, unblocked (small).
    for (int64_t t = j0; t < j1; ++t) {
      const double d = a[t * n + t];
      if (!(d > 0.0) || !std::isfinite(d)) return false;
      const double r = std::sqrt(d);
      a[t * n + t] = r;
      for (int64_t k = t + 1; k < j1; ++k) a[t * n + k] /= r;
      for (int64_t i = t + 1; i < j1; ++i) axpy_sub_d(a + i * n + i, a + t * n + i, a[t * n + i], j1 - i);
    }
    if (j1 == n) break;
    // Panel to the right: rows j0..j1 of R over columns j1..n, forward substitution per chunk.
    const int64_t right = n - j1;
    pool.parallel_for((right + kChunk - 1) / kChunk, [&](int64_t task) {
      const int64_t k0 = j1 + task * kChunk, len = std::min(kChunk, n - k0);
      for (int64_t t = j0; t < j1; ++t) {
        double* row = a + t * n + k0;
        const double r = a[t * n + t];
        for (int64_t k = 0; k < len; ++k) row[k] /= r;
        for (int64_t i = t + 1; i < j1; ++i) axpy_sub_d(a + i * n + k0, row, a[t * n + i], len);
      }
    });
    // Trailing update A[i, k] -= sum_t R[t, i] R[t, k] for j1 <= i <= k, by row tiles.
    pool.parallel_for((right + kRowTile - 1) / kRowTile, [&](int64_t task) {
      const int64_t i0 = j1 + task * kRowTile, i1 = std::min(i0 + kRowTile, n);
      for (int64_t k0 = i0; k0 < n; k0 += kChunk) {
        const int64_t len = std::min(kChunk, n - k0);
        for (int64_t t = j0; t < j1; ++t) {
          const double* rt = a + t * n;
          for (int64_t i = i0; i < i1; ++i) {
            // Columns below the diagonal of row i are outside the upper triangle: skip them.
            const int64_t from = std::max(k0, i);
            if (from < k0 + len) axpy_sub_d(a + i * n + from, rt + from, rt[i], k0 + len - from);
          }
        }
      }
    });
  }
  return true;
}

// X = R^-1 in place for upper triangular R (upper triangle; writes zeros below the diagonal).
// Row panels bottom-up: X[i, k] = -(sum_{i < t <= k} R[i, t] X[t, k]) / R[i, i].
void triangular_inverse_upper_in_place(double* a, int64_t n, ThreadPool& pool) {
  std::vector<double> panel;
  for (int64_t i1 = n; i1 > 0; i1 -= kPanel) {
    const int64_t i0 = std::max<int64_t>(0, i1 - kPanel), rows = i1 - i0;
    // R rows of this panel, copied because the tasks overwrite them with X column by column.
    panel.assign(size_t(rows * n), 0.0);
    for (int64_t i = i0; i < i1; ++i)
      std::copy(a + i * n + i, a + (i + 1) * n, panel.begin() + (i - i0) * n + i);
    const int64_t first = i0;  // columns before i0 are below the diagonal of every panel row
    pool.parallel_for((n - first + kChunk - 1) / kChunk, [&](int64_t task) {
      const int64_t k0 = first + task * kChunk, len = std::min(kChunk, n - k0);
      std::vector<double> y(size_t(rows * len), 0.0);
      // Contributions of the rows already inverted (t >= i1); X[t, k] = 0 for k < t.
      for (int64_t t = i1; t < k0 + len; ++t) {
        const int64_t from = std::max(k0, t);
        const double* xt = a + t * n + from;
        for (int64_t i = 0; i < rows; ++i)
          axpy_sub_d(y.data() + i * len + (from - k0), xt, -panel[size_t(i * n + t)], k0 + len - from);
      }
      // Back substitution inside the panel, bottom row first.
      for (int64_t i = i1 - 1; i >= i0; --i) {
        const double* ri = panel.data() + (i - i0) * n;
        double* yi = y.data() + (i - i0) * len;
        for (int64_t t = i + 1; t < i1; ++t) {
          const int64_t from = std::max(k0, t);
          if (from < k0 + len) axpy_sub_d(yi + (from - k0), a + t * n + from, -ri[t], k0 + len - from);
        }
        double* xi = a + i * n;
        for (int64_t k = k0; k < k0 + len; ++k) {
          if (k < i) xi[k] = 0.0;
          else if (k == i) xi[k] = 1.0 / ri[i];
          else xi[k] = -yi[k - k0] / ri[i];
        }
      }
    });
  }
}

}  // namespace

bool inverse_cholesky_upper(std::vector<double>& h, int64_t n, std::vector<float>& u,
                            ThreadPool& pool) {
  // Reversing both indices of a row-major matrix reverses its storage.
  std::reverse(h.begin(), h.end());
  if (!cholesky_upper_in_place(h.data(), n, pool)) return false;
  triangular_inverse_upper_in_place(h.data(), n, pool);
  // With J the reversal, J H J = R^T R gives H = V V^T for the upper V = J R^T J, so
  // H^-1 = V^-T V^-1 and U = V^-1 = J X^T J: U[i, j] = X[n-1-j, n-1-i].
  u.assign(size_t(n * n), 0.f);
  pool.parallel_for(n, [&](int64_t i) {
    for (int64_t j = i; j < n; ++j) u[size_t(i * n + j)] = float(h[size_t((n - 1 - j) * n + (n - 1 - i))]);
  });
  return true;
}

QF_VECTOR_CLONES void sub_matmul(float* c, int64_t ldc, const float* a, int64_t lda,
                                 const float* b, int64_t ldb, int64_t m, int64_t n, int64_t k) {
  for (int64_t j0 = 0; j0 < n; j0 += kChunk) {
    const int64_t len = std::min(kChunk, n - j0);
    for (int64_t t = 0; t < k; ++t) {
      const float* __restrict bt = b + t * ldb + j0;
      for (int64_t i = 0; i < m; ++i) {
        float* __restrict ci = c + i * ldc + j0;
        const float s = a[i * lda + t];
        for (int64_t j = 0; j < len; ++j) ci[j] -= s * bt[j];
      }
    }
  }
}

}  // namespace qf

// Dense linear algebra the weight algorithms need and nothing more: the inverse-Hessian factor
// of GPTQ (double precision, blocked, multi-threaded) and a float matrix update kernel.
// Every result is independent of the thread count: work is split by rows or column chunks and
// each element accumulates its terms in a fixed order.
#pragma once

#include <cstdint>
#include <vector>

namespace qf {

class ThreadPool;

// Given a symmetric positive-definite H ([n, n] row-major, double), computes the upper
// triangular U with U^T U = H^-1 (PyTorch: cholesky(cholesky_inverse(cholesky(H)), upper=True)),
// via one Cholesky of the index-reversed H and one triangular inverse (2 n^3 / 3 flops).
// `h` is used as workspace and destroyed. u: [n, n] float32, zeros below the diagonal.
// Returns false (u untouched) if H is not numerically positive definite.
bool inverse_cholesky_upper(std::vector<double>& h, int64_t n, std::vector<float>& u,
                            ThreadPool& pool);

// c[i, j] -= sum_{t < k} a[i, t] * b[t, j] for i < m, j < n (row-major, leading dimensions
// lda/ldb/ldc), each element summing its terms in ascending t. Single-threaded; callers split
// rows over tasks. SIMD by compiler vectorization (AVX2 clone chosen at run time, no FMA, so
// every clone gives the same bits).
void sub_matmul(float* c, int64_t ldc, const float* a, int64_t lda, const float* b, int64_t ldb,
                int64_t m, int64_t n, int64_t k);

}  // namespace qf

// Central finite differences for the gradient tests of tests/train: the numeric gradient of a
// scalar loss with respect to each element of a parameter, compared with the analytic one.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <random>
#include <string>
#include <vector>

namespace qf::test {

inline std::vector<double> random_vector(std::mt19937& rng, size_t n, double scale = 1.0) {
  std::normal_distribution<double> d(0.0, scale);
  std::vector<double> v(n);
  for (double& x : v) x = d(rng);
  return v;
}

// Σ a_i b_i: the loss L = Σ dy ⊙ f(...) whose gradient wrt f's output is dy.
inline double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// The worst error of `analytic` against the central difference (L(p + h) − L(p − h)) / 2h
// of `loss` over every element of `param` (restored after each probe), relative to the largest
// numeric gradient element: max_i |a_i − n_i| / max_i |n_i| (an element-wise ratio would be
// dominated by elements that are zero up to rounding).
inline double fd_relative_error(std::vector<double>& param, const std::vector<double>& analytic,
                                const std::function<double()>& loss, double h = 1e-5) {
  double worst = 0, scale = 0;
  for (size_t i = 0; i < param.size(); ++i) {
    const double p = param[i];
    param[i] = p + h;
    const double up = loss();
    param[i] = p - h;
    const double down = loss();
    param[i] = p;
    const double numeric = (up - down) / (2 * h);
    worst = std::max(worst, std::fabs(analytic[i] - numeric));
    scale = std::max(scale, std::fabs(numeric));
  }
  return scale > 0 ? worst / scale : worst;
}

// Prints one result line ("[fd] op wrt x: worst relative error 1.2e-10") and returns err.
inline double report_fd(const std::string& op, const std::string& wrt, double err) {
  std::printf("[fd] %-22s wrt %-10s worst relative error %.2e\n", op.c_str(), wrt.c_str(), err);
  return err;
}

inline constexpr double kFdTolerance = 1e-6;

}  // namespace qf::test

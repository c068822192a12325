// Shared helpers of the backend tests: random inputs, typed copies, a normwise-relative comparison
// that reports the worst element, and central finite differences. The CPU backend's buffers are
// host memory, so tests hand it std::vector data directly.
#pragma once

#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/cpu_backend.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/rng.h"

namespace lmt::test {

// Every backend this build has, the CPU backend first: what the backend tests run each case on
// (PJRT on XLA's CPU plugin here; the same code drives a GPU or TPU). A new backend joins here.
inline std::vector<std::unique_ptr<Backend>> parity_backends() {
  std::vector<std::unique_ptr<Backend>> b;
  b.push_back(make_backend("cpu"));
#ifdef LMTRAIN_HAVE_PJRT
  b.push_back(make_backend("pjrt"));
#endif
  return b;
}

// n numbers from N(mean, std), a pure function of (seed, stream).
inline std::vector<double> randn(int64_t n, uint64_t seed, uint64_t stream = 0, double std = 1.0,
                                 double mean = 0.0) {
  std::vector<double> v(static_cast<size_t>(n));
  if (n > 0) fill_normal(v.data(), n, mean, std, seed, stream);
  return v;
}

template <class T>
std::vector<T> cast(const std::vector<double>& v) {
  return std::vector<T>(v.begin(), v.end());
}
template <class T>
std::vector<double> widen(const std::vector<T>& v) {
  return std::vector<double>(v.begin(), v.end());
}

template <class T>
DType dtype_for() {
  return dtype_of<T>();
}

// Tolerances that mean something for the dtype: float32 kernels against double references, and
// double kernels against double references.
template <class T>
constexpr double kTol = sizeof(T) == 4 ? 1e-5 : 1e-12;

// Expects |got_i - want_i| <= tol * (|want_i| + max(max_j |want_j|, 1)) for every i: errors are
// small relative to the element or, for elements near zero, to the largest element. Test inputs are
// O(1), so the floor of 1 keeps a quantity that is exactly zero in theory (a gradient through a
// softmax over one key) from demanding a relative error of zero. Also fails on NaN.
inline void expect_close(const std::vector<double>& got, const std::vector<double>& want,
                         double tol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double scale = 1;
  for (double w : want) scale = std::max(scale, std::fabs(w));
  size_t bad = 0, worst = 0;
  double worst_ratio = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::fabs(got[i] - want[i]);
    const double allowed = tol * (std::fabs(want[i]) + scale) + 1e-300;
    const double ratio = std::isnan(got[i]) || std::isnan(want[i]) ? INFINITY : err / allowed;
    if (ratio > 1) ++bad;
    if (ratio > worst_ratio || std::isnan(ratio)) worst_ratio = ratio, worst = i;
  }
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << got.size() << " elements out of tolerance "
                     << tol << "; worst at " << worst << ": got " << got[worst] << ", want "
                     << want[worst];
}

template <class T>
void expect_close(const std::vector<T>& got, const std::vector<double>& want, double tol,
                  const std::string& what) {
  expect_close(widen(got), want, tol, what);
}

// Central-difference derivative of f with respect to x[i] (x is perturbed and restored).
inline double central_diff(std::vector<double>& x, size_t i, const std::function<double()>& f,
                           double h = 1e-6) {
  const double x0 = x[i];
  x[i] = x0 + h;
  const double fp = f();
  x[i] = x0 - h;
  const double fm = f();
  x[i] = x0;
  return (fp - fm) / (2 * h);
}

// Checks grad (the kernel's gradient of f with respect to x, same indexing) against central
// differences at the elements `positions` (all of x when empty), at most `max_checks` of them (a
// random sample beyond that). Errors are relative to |fd| plus max(largest gradient element, 1).
inline void expect_grad_matches_fd(std::vector<double>& x, const std::vector<double>& grad,
                                   const std::function<double()>& f, const std::string& what,
                                   std::vector<int64_t> positions = {}, size_t max_checks = 400,
                                   double tol = 1e-6) {
  ASSERT_EQ(x.size(), grad.size()) << what;
  if (positions.empty())
    for (size_t i = 0; i < x.size(); ++i) positions.push_back(static_cast<int64_t>(i));
  double scale = 1;
  for (int64_t i : positions) scale = std::max(scale, std::fabs(grad[i]));
  if (positions.size() > max_checks) {
    std::mt19937 gen(static_cast<uint32_t>(positions.size()));
    std::shuffle(positions.begin(), positions.end(), gen);
    positions.resize(max_checks);
  }
  size_t bad = 0;
  int64_t worst = positions.empty() ? 0 : positions[0];
  double worst_err = 0, worst_fd = 0;
  for (int64_t i : positions) {
    const double fd = central_diff(x, static_cast<size_t>(i), f);
    const double err = std::fabs(grad[i] - fd) / (std::fabs(fd) + scale + 1e-300);
    if (!(err <= tol)) ++bad;
    if (!(err <= worst_err)) worst_err = err, worst = i, worst_fd = fd;
  }
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << positions.size()
                     << " gradient elements differ from finite differences; worst (element "
                     << worst << ") kernel " << grad[worst] << " vs fd " << worst_fd;
}

// Sets the OpenMP thread count for a scope. Finite-difference loops run single-threaded: they call
// a kernel hundreds of times on small inputs, and the kernels' results do not depend on the thread
// count (tests below check that), so this only removes team wake-ups from the test's run time.
class ScopedThreads {
 public:
  explicit ScopedThreads(int n) : saved_(omp_get_max_threads()) { omp_set_num_threads(n); }
  ~ScopedThreads() { omp_set_num_threads(saved_); }
  ScopedThreads(const ScopedThreads&) = delete;
  ScopedThreads& operator=(const ScopedThreads&) = delete;

 private:
  int saved_;
};

inline double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

}  // namespace lmt::test

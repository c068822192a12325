// RMSNorm and LayerNorm on the CPU backend: forward and saved statistics against double
// references, backward against central differences of L = sum(out * R) in f64 (every input:
// x, w, b), float backward against the checked double one, and += semantics: dx, dw, db start
// non-zero and must end as start + gradient.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "backend_test_util.h"

namespace lmt {
namespace {

using test::expect_close;

struct NormCase {
  int64_t N, C;
  double w_offset;  // RMSNorm only: Gemma scales by (1 + w)
};
const NormCase kNormCases[] = {{7, 13, 0.0}, {5, 64, 1.0}, {1, 3, 0.0}, {33, 300, 0.0}};
constexpr double kEps = 1e-5;

// ---- RMSNorm ----
template <class T>
struct RmsRun {
  std::vector<T> out, rstd, dx, dw;
};

// Forward, then backward with dout = R onto dx0/dw0 (when R is given).
template <class T>
RmsRun<T> rms_run(const NormCase& c, const std::vector<double>& x, const std::vector<double>& w,
                  const std::vector<double>* R, const std::vector<double>& dx0,
                  const std::vector<double>& dw0) {
  CpuBackend be;
  RmsRun<T> r;
  const std::vector<T> xt = test::cast<T>(x), wt = test::cast<T>(w);
  r.out.resize(x.size()), r.rstd.resize(static_cast<size_t>(c.N));
  be.rmsnorm_forward(dtype_of<T>(), r.out.data(), r.rstd.data(), xt.data(), wt.data(), c.N, c.C,
                     kEps, c.w_offset);
  if (R) {
    const std::vector<T> dy = test::cast<T>(*R);
    r.dx = test::cast<T>(dx0), r.dw = test::cast<T>(dw0);
    be.rmsnorm_backward(dtype_of<T>(), r.dx.data(), r.dw.data(), dy.data(), xt.data(), wt.data(),
                        r.rstd.data(), c.N, c.C, c.w_offset);
  }
  return r;
}

template <class T>
void rms_forward_matches(const NormCase& c) {
  const std::vector<double> x = test::randn(c.N * c.C, 1, 0, 2.0), w = test::randn(c.C, 2);
  std::vector<double> out(x.size()), rstd(static_cast<size_t>(c.N));
  for (int64_t n = 0; n < c.N; ++n) {
    double ss = 0;
    for (int64_t i = 0; i < c.C; ++i) ss += x[n * c.C + i] * x[n * c.C + i];
    rstd[n] = 1.0 / std::sqrt(ss / c.C + kEps);
    for (int64_t i = 0; i < c.C; ++i)
      out[n * c.C + i] = x[n * c.C + i] * rstd[n] * (c.w_offset + w[i]);
  }
  const RmsRun<T> r = rms_run<T>(c, x, w, nullptr, {}, {});
  expect_close(r.out, out, test::kTol<T>, "rmsnorm out");
  expect_close(r.rstd, rstd, test::kTol<T>, "rmsnorm rstd");
}

TEST(RmsNorm, ForwardMatchesReference) {
  for (const NormCase& c : kNormCases) {
    SCOPED_TRACE(::testing::Message() << "N=" << c.N << " C=" << c.C << " off=" << c.w_offset);
    rms_forward_matches<float>(c);
    rms_forward_matches<double>(c);
  }
}

TEST(RmsNorm, BackwardMatchesFiniteDifferencesAndAccumulates) {
  for (const NormCase& c : kNormCases) {
    SCOPED_TRACE(::testing::Message() << "N=" << c.N << " C=" << c.C << " off=" << c.w_offset);
    std::vector<double> x = test::randn(c.N * c.C, 3), w = test::randn(c.C, 4, 0, 0.5, 1.0);
    const std::vector<double> R = test::randn(c.N * c.C, 5);
    const std::vector<double> dx0 = test::randn(c.N * c.C, 6), dw0 = test::randn(c.C, 7);
    const RmsRun<double> r = rms_run<double>(c, x, w, &R, dx0, dw0);
    std::vector<double> gx(x.size()), gw(w.size());
    for (size_t i = 0; i < gx.size(); ++i) gx[i] = r.dx[i] - dx0[i];
    for (size_t i = 0; i < gw.size(); ++i) gw[i] = r.dw[i] - dw0[i];
    const auto loss = [&] { return test::dot(rms_run<double>(c, x, w, nullptr, {}, {}).out, R); };
    test::expect_grad_matches_fd(x, gx, loss, "dx");
    test::expect_grad_matches_fd(w, gw, loss, "dw");
    const RmsRun<float> f = rms_run<float>(c, x, w, &R, dx0, dw0);
    expect_close(f.dx, test::widen(r.dx), 1e-5, "f32 dx");
    expect_close(f.dw, test::widen(r.dw), 1e-5, "f32 dw");
  }
}

// ---- LayerNorm ----
template <class T>
struct LnRun {
  std::vector<T> out, mean, rstd, dx, dw, db;
};

template <class T>
LnRun<T> ln_run(const NormCase& c, const std::vector<double>& x, const std::vector<double>& w,
                const std::vector<double>& b, const std::vector<double>* R,
                const std::vector<double>& d0) {
  CpuBackend be;
  LnRun<T> r;
  const std::vector<T> xt = test::cast<T>(x), wt = test::cast<T>(w), bt = test::cast<T>(b);
  r.out.resize(x.size()), r.mean.resize(static_cast<size_t>(c.N));
  r.rstd.resize(static_cast<size_t>(c.N));
  be.layernorm_forward(dtype_of<T>(), r.out.data(), r.mean.data(), r.rstd.data(), xt.data(),
                       wt.data(), bt.data(), c.N, c.C, kEps);
  if (R) {
    const std::vector<T> dy = test::cast<T>(*R);
    r.dx = test::cast<T>(std::vector<double>(d0.begin(), d0.begin() + c.N * c.C));
    r.dw = test::cast<T>(std::vector<double>(d0.begin(), d0.begin() + c.C));
    r.db = test::cast<T>(std::vector<double>(d0.begin() + 1, d0.begin() + 1 + c.C));
    be.layernorm_backward(dtype_of<T>(), r.dx.data(), r.dw.data(), r.db.data(), dy.data(),
                          xt.data(), wt.data(), r.mean.data(), r.rstd.data(), c.N, c.C);
  }
  return r;
}

TEST(LayerNorm, ForwardMatchesReference) {
  for (const NormCase& c : kNormCases) {
    SCOPED_TRACE(::testing::Message() << "N=" << c.N << " C=" << c.C);
    const std::vector<double> x = test::randn(c.N * c.C, 1, 0, 2.0, 0.7);
    const std::vector<double> w = test::randn(c.C, 2), b = test::randn(c.C, 3);
    std::vector<double> out(x.size()), mean(c.N), rstd(c.N);
    for (int64_t n = 0; n < c.N; ++n) {
      double s = 0, v = 0;
      for (int64_t i = 0; i < c.C; ++i) s += x[n * c.C + i];
      mean[n] = s / c.C;
      for (int64_t i = 0; i < c.C; ++i) v += std::pow(x[n * c.C + i] - mean[n], 2);
      rstd[n] = 1.0 / std::sqrt(v / c.C + kEps);
      for (int64_t i = 0; i < c.C; ++i)
        out[n * c.C + i] = (x[n * c.C + i] - mean[n]) * rstd[n] * w[i] + b[i];
    }
    const LnRun<float> f = ln_run<float>(c, x, w, b, nullptr, {});
    const LnRun<double> d = ln_run<double>(c, x, w, b, nullptr, {});
    expect_close(f.out, out, 1e-5, "f32 out");
    expect_close(d.out, out, 1e-12, "f64 out");
    expect_close(f.mean, mean, 1e-5, "f32 mean");
    expect_close(d.rstd, rstd, 1e-12, "f64 rstd");
  }
}

TEST(LayerNorm, BackwardMatchesFiniteDifferencesAndAccumulates) {
  for (const NormCase& c : kNormCases) {
    SCOPED_TRACE(::testing::Message() << "N=" << c.N << " C=" << c.C);
    std::vector<double> x = test::randn(c.N * c.C, 3), w = test::randn(c.C, 4);
    std::vector<double> b = test::randn(c.C, 5);
    const std::vector<double> R = test::randn(c.N * c.C, 6);
    const std::vector<double> d0 = test::randn(c.N * c.C + 1, 7);  // non-zero start of dx, dw, db
    const LnRun<double> r = ln_run<double>(c, x, w, b, &R, d0);
    std::vector<double> gx(x.size()), gw(w.size()), gb(b.size());
    for (size_t i = 0; i < gx.size(); ++i) gx[i] = r.dx[i] - d0[i];
    for (size_t i = 0; i < gw.size(); ++i) gw[i] = r.dw[i] - d0[i], gb[i] = r.db[i] - d0[i + 1];
    const auto loss = [&] { return test::dot(ln_run<double>(c, x, w, b, nullptr, {}).out, R); };
    test::expect_grad_matches_fd(x, gx, loss, "dx");
    test::expect_grad_matches_fd(w, gw, loss, "dw");
    test::expect_grad_matches_fd(b, gb, loss, "db");
    const LnRun<float> f = ln_run<float>(c, x, w, b, &R, d0);
    expect_close(f.dx, test::widen(r.dx), 1e-5, "f32 dx");
    expect_close(f.dw, test::widen(r.dw), 1e-5, "f32 dw");
    expect_close(f.db, test::widen(r.db), 1e-5, "f32 db");
  }
}

TEST(Norms, WeightGradientsAreIndependentOfThreadCount) {
  const NormCase c{700, 96, 0.0};
  const std::vector<double> x = test::randn(c.N * c.C, 8), w = test::randn(c.C, 9);
  const std::vector<double> R = test::randn(c.N * c.C, 10), d0(c.N * c.C, 0.0);
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  const RmsRun<float> one = rms_run<float>(c, x, w, &R, d0, std::vector<double>(c.C, 0.0));
  omp_set_num_threads(std::max(2, threads));
  const RmsRun<float> two = rms_run<float>(c, x, w, &R, d0, std::vector<double>(c.C, 0.0));
  omp_set_num_threads(threads);
  EXPECT_EQ(std::memcmp(one.dw.data(), two.dw.data(), c.C * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(one.dx.data(), two.dx.data(), one.dx.size() * sizeof(float)), 0);
}

// ---- per-head RMSNorm (q/k norm) ----
// Heads sit inside wider token rows (row_stride > heads * D leaves a gap that must stay
// untouched); every head must equal the plain rmsnorm (checked above against finite differences)
// of its values gathered into a contiguous row, and backward may run in place on dout.
template <class T>
void head_norm_matches_rows(int64_t N, int heads, int D, int64_t stride, double w_offset,
                            uint64_t seed) {
  CpuBackend be;
  const int64_t rows = N * heads;
  const std::vector<double> x = test::randn(N * stride, seed), w = test::randn(D, seed + 1);
  const std::vector<double> dy = test::randn(N * stride, seed + 2);
  const std::vector<double> dw0 = test::randn(D, seed + 3);
  auto at = [&](int64_t r, int64_t c) { return (r / heads) * stride + (r % heads) * D + c; };
  std::vector<double> xr(static_cast<size_t>(rows * D)), dyr(xr.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < D; ++c) xr[r * D + c] = x[at(r, c)], dyr[r * D + c] = dy[at(r, c)];
  // Reference: the plain kernel on gathered rows (dx from zero).
  NormCase nc{rows, D, w_offset};
  const RmsRun<T> ref = rms_run<T>(nc, xr, w, &dyr, std::vector<double>(xr.size(), 0.0), dw0);

  const std::vector<T> xt = test::cast<T>(x), wt = test::cast<T>(w);
  std::vector<T> out = test::cast<T>(std::vector<double>(x.size(), 7.0));
  std::vector<T> rstd(static_cast<size_t>(rows));
  be.head_rmsnorm_forward(dtype_of<T>(), out.data(), rstd.data(), xt.data(), wt.data(), N, stride,
                          heads, D, kEps, w_offset);
  std::vector<T> g = test::cast<T>(dy), dw = test::cast<T>(dw0);
  be.head_rmsnorm_backward(dtype_of<T>(), g.data(), dw.data(), g.data(), xt.data(), wt.data(),
                           rstd.data(), N, stride, heads, D, w_offset);
  std::vector<double> got_out(xr.size()), got_dx(xr.size()), want_out(xr.size()),
      want_dx(xr.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < D; ++c) {
      got_out[r * D + c] = out[at(r, c)], got_dx[r * D + c] = g[at(r, c)];
      want_out[r * D + c] = ref.out[r * D + c], want_dx[r * D + c] = ref.dx[r * D + c];
    }
  expect_close(got_out, want_out, test::kTol<T>, "head rmsnorm out");
  expect_close(rstd, test::widen(ref.rstd), test::kTol<T>, "head rmsnorm rstd");
  expect_close(got_dx, want_dx, test::kTol<T>, "head rmsnorm dx (in place)");
  expect_close(dw, test::widen(ref.dw), test::kTol<T>, "head rmsnorm dw (+=)");
  for (int64_t n = 0; n < N; ++n)  // the gap after the heads is left alone
    for (int64_t c = heads * D; c < stride; ++c) {
      EXPECT_EQ(out[n * stride + c], T(7.0));
      EXPECT_EQ(g[n * stride + c], static_cast<T>(dy[n * stride + c]));
    }
}

TEST(HeadRmsNorm, EqualsPlainRmsNormPerHeadInPlace) {
  head_norm_matches_rows<double>(5, 3, 8, 40, 0.0, 11);
  head_norm_matches_rows<float>(5, 3, 8, 40, 1.0, 12);
  head_norm_matches_rows<float>(300, 4, 64, 4 * 64 + 128, 0.0, 13);  // parallel path
  head_norm_matches_rows<double>(1, 1, 2, 2, 1.0, 14);
}

}  // namespace
}  // namespace lmt

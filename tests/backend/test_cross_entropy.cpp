// Cross-entropy on the CPU backend: losses against a log-sum-exp in double, with ignored rows,
// softcap on and off; logits untouched when grad_scale == 0; the gradient written in place equals
// the central difference of grad_scale * sum(losses) in f64 (ignored rows zero); stability with
// huge logits; labels outside [0, V) rejected.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "backend_test_util.h"
#include "cli/test_seed.h"

namespace lmt {
namespace {

constexpr int32_t kIgnore = -100;

struct CeCase {
  int64_t N, V;
  double softcap;
};
const CeCase kCeCases[] = {{7, 37, 0.0}, {7, 37, 5.0}, {4, 1003, 0.0}, {3, 1, 0.0}, {5, 300, 30.0}};

std::vector<int32_t> make_labels(const CeCase& c) {
  std::vector<int32_t> l(static_cast<size_t>(c.N));
  for (int64_t n = 0; n < c.N; ++n) l[n] = static_cast<int32_t>((n * 11 + 2) % c.V);
  if (c.N > 2) l[1] = kIgnore;
  if (c.N > 4) l[4] = kIgnore;
  return l;
}

// Losses and d(grad_scale * sum losses)/dlogits in double.
void reference(const CeCase& c, const std::vector<double>& x, const std::vector<int32_t>& labels,
               double grad_scale, std::vector<double>& loss, std::vector<double>& grad) {
  loss.assign(static_cast<size_t>(c.N), 0), grad.assign(x.size(), 0);
  for (int64_t n = 0; n < c.N; ++n) {
    if (labels[n] == kIgnore) continue;
    std::vector<double> z(c.V), dz(c.V, 1.0);
    double mx = -INFINITY, sum = 0;
    for (int64_t j = 0; j < c.V; ++j) {
      z[j] = x[n * c.V + j];
      if (c.softcap > 0) {
        const double t = std::tanh(z[j] / c.softcap);
        z[j] = c.softcap * t, dz[j] = 1 - t * t;
      }
      mx = std::max(mx, z[j]);
    }
    for (int64_t j = 0; j < c.V; ++j) sum += std::exp(z[j] - mx);
    const double lse = mx + std::log(sum);
    loss[n] = lse - z[labels[n]];
    for (int64_t j = 0; j < c.V; ++j)
      grad[n * c.V + j] = grad_scale * (std::exp(z[j] - lse) - (j == labels[n])) * dz[j];
  }
}

template <class T>
void run_case(const CeCase& c) {
  SCOPED_TRACE(::testing::Message() << (sizeof(T) == 4 ? "f32" : "f64") << " N=" << c.N
                                    << " V=" << c.V << " softcap=" << c.softcap);
  CpuBackend be;
  const std::vector<double> x = test::randn(c.N * c.V, 1, 0, 3.0);
  const std::vector<int32_t> labels = make_labels(c);
  const double gs = 1.0 / 3.0;
  std::vector<double> want_loss, want_grad;
  reference(c, x, labels, gs, want_loss, want_grad);
  // grad_scale == 0: losses only, logits untouched.
  std::vector<T> logits = test::cast<T>(x), losses(static_cast<size_t>(c.N), T(-1));
  const std::vector<T> before = logits;
  be.cross_entropy(dtype_of<T>(), logits.data(), losses.data(), labels.data(), c.N, c.V, kIgnore,
                   0.0, c.softcap);
  test::expect_close(losses, want_loss, test::kTol<T>, "losses");
  EXPECT_EQ(std::memcmp(before.data(), logits.data(), before.size() * sizeof(T)), 0);
  // grad_scale != 0: the gradient overwrites the logits.
  be.cross_entropy(dtype_of<T>(), logits.data(), losses.data(), labels.data(), c.N, c.V, kIgnore,
                   gs, c.softcap);
  test::expect_close(losses, want_loss, test::kTol<T>, "losses with gradient");
  test::expect_close(logits, want_grad, test::kTol<T>, "gradient");
  for (int64_t n = 0; n < c.N; ++n)
    if (labels[n] == kIgnore) {
      EXPECT_EQ(losses[n], T(0));
      for (int64_t j = 0; j < c.V; ++j) ASSERT_EQ(logits[n * c.V + j], T(0));
    }
}

TEST(CrossEntropy, MatchesReference) {
  for (const CeCase& c : kCeCases) {
    run_case<float>(c);
    run_case<double>(c);
  }
}

TEST(CrossEntropy, GradientMatchesFiniteDifferences) {
  CpuBackend be;
  for (const CeCase& c : {CeCase{5, 23, 0.0}, CeCase{5, 23, 4.0}}) {
    SCOPED_TRACE(::testing::Message() << "softcap=" << c.softcap);
    std::vector<double> x = test::randn(c.N * c.V, 2, 0, 2.0);
    const std::vector<int32_t> labels = make_labels(c);
    const double gs = 0.7;
    std::vector<double> grad = x, losses(c.N);
    be.cross_entropy(DType::f64, grad.data(), losses.data(), labels.data(), c.N, c.V, kIgnore, gs,
                     c.softcap);
    const auto loss = [&] {
      std::vector<double> l = x, out(c.N);
      be.cross_entropy(DType::f64, l.data(), out.data(), labels.data(), c.N, c.V, kIgnore, 0.0,
                       c.softcap);
      double s = 0;
      for (double v : out) s += gs * v;
      return s;
    };
    test::expect_grad_matches_fd(x, grad, loss, "dlogits");
  }
}

TEST(CrossEntropy, StableForHugeLogits) {
  CpuBackend be;
  const CeCase c{2, 5, 0.0};
  std::vector<float> logits = {1e4f,  -1e4f, 3e4f,  0.0f,  2.9999e4f,
                               -3e4f, -3e4f, -3e4f, -3e4f, -3e4f};
  const std::vector<int32_t> labels = {4, 0};
  std::vector<double> want_loss, want_grad;
  reference(c, test::widen(logits), labels, 1.0, want_loss, want_grad);
  std::vector<float> losses(2);
  be.cross_entropy(DType::f32, logits.data(), losses.data(), labels.data(), 2, 5, kIgnore, 1.0,
                   0.0);
  test::expect_close(losses, want_loss, 1e-5, "losses");
  test::expect_close(logits, want_grad, 1e-5, "gradient");
}

TEST(CrossEntropy, RejectsLabelsOutsideVocabulary) {
  CpuBackend be;
  std::vector<float> logits(2 * 4), losses(2);
  for (int32_t bad : {4, -1}) {
    const std::vector<int32_t> labels = {0, bad};
    EXPECT_THROW(be.cross_entropy(DType::f32, logits.data(), losses.data(), labels.data(), 2, 4,
                                  kIgnore, 1.0, 0.0),
                 InternalError);
  }
}

// Each loss of backend/loss.h against its formula written out in double here, on fresh random
// logits with an ignored row and the soft-cap on and off: the objective, the plain cross-entropy
// beside it, and the kernel's gradient against central differences of that formula (not of the
// kernel), so the gradient's derivation is checked too.
TEST(CrossEntropy, EachLossMatchesItsFormulaInDouble) {
  CpuBackend be;
  const LossSpec specs[] = {{0.1, 0, 0}, {0, 0.05, 0},     {0, 0, 2.0},
                            {0, 0, 0.5}, {0.2, 0.01, 0.5}, {0.3, 0.02, 3.0}};
  const uint64_t seed = test::fresh_seed("CrossEntropy.EachLossMatchesItsFormulaInDouble");
  for (double cap : {0.0, 4.0})
    for (const LossSpec& spec : specs) {
      const CeCase c{6, 11, cap};
      SCOPED_TRACE(::testing::Message()
                   << "seed " << seed << " softcap " << cap << " smoothing " << spec.label_smoothing
                   << " z-loss " << spec.z_loss << " focal " << spec.focal_gamma);
      std::vector<double> x = test::randn(c.N * c.V, seed, 0, 2.0);
      const std::vector<int32_t> labels = make_labels(c);
      const double gs = 0.7;
      // The formula: (1 - p_y)^gamma * ((1 - eps) ce + eps (lse - mean z)) + lambda lse^2.
      auto formula = [&](const std::vector<double>& v, std::vector<double>* objective,
                         std::vector<double>* ce) {
        double total = 0;
        for (int64_t n = 0; n < c.N; ++n) {
          if (labels[n] == kIgnore) continue;
          std::vector<double> z(c.V);
          double mx = -INFINITY, mean = 0;
          for (int64_t j = 0; j < c.V; ++j) {
            z[j] = cap > 0 ? cap * std::tanh(v[n * c.V + j] / cap) : v[n * c.V + j];
            mx = std::max(mx, z[j]);
            mean += z[j] / static_cast<double>(c.V);
          }
          double sum = 0;
          for (double zj : z) sum += std::exp(zj - mx);
          const double lse = mx + std::log(sum), nll = lse - z[labels[n]];
          const double smoothed =
              (1 - spec.label_smoothing) * nll + spec.label_smoothing * (lse - mean);
          const double focal = std::pow(1 - std::exp(-nll), spec.focal_gamma);
          const double obj = focal * smoothed + spec.z_loss * lse * lse;
          if (objective) (*objective)[n] = obj;
          if (ce) (*ce)[n] = nll;
          total += gs * obj;
        }
        return total;
      };
      std::vector<double> want(c.N, 0.0), want_ce(c.N, 0.0);
      formula(x, &want, &want_ce);
      std::vector<double> grad = x, losses(c.N, -1), ce(c.N, -1);
      be.cross_entropy(DType::f64, grad.data(), losses.data(), labels.data(), c.N, c.V, kIgnore, gs,
                       cap, spec, ce.data());
      test::expect_close(losses, want, 1e-12, "objective");
      test::expect_close(ce, want_ce, 1e-12, "plain cross-entropy");
      test::expect_grad_matches_fd(
          x, grad, [&] { return formula(x, nullptr, nullptr); }, "d objective / d logits");
      // float32 to float32 rounding of the same.
      std::vector<float> xf = test::cast<float>(x), lf(c.N), cf(c.N);
      be.cross_entropy(DType::f32, xf.data(), lf.data(), labels.data(), c.N, c.V, kIgnore, gs, cap,
                       spec, cf.data());
      test::expect_close(lf, want, 1e-5, "objective f32");
      test::expect_close(xf, grad, 1e-5, "gradient f32");
    }
}

}  // namespace
}  // namespace lmt

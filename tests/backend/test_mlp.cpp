// Gated MLP unit (act(gate) * up) and the plain activation on the CPU backend, for SiLU, tanh-GELU,
// ReLU and ReLU^2: forward against std:: math in double (including large |x| where a fast exp
// could overflow), backward against central differences in f64, and backward outputs fully
// overwritten. ReLU's backward from a 1-bit mask and ReLU^2's from its output: the same bits as
// from the input.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "backend/cpu/cpu_dispatch.h"
#include "backend_test_util.h"

namespace lmt {
namespace {

double act_ref(Activation a, double g) {
  if (a == Activation::silu) return g / (1 + std::exp(-g));
  if (a == Activation::relu) return std::max(g, 0.0);
  if (a == Activation::relu2) return std::max(g, 0.0) * std::max(g, 0.0);
  return 0.5 * g * (1 + std::tanh(std::sqrt(2 / M_PI) * (g + 0.044715 * g * g * g)));
}

const char* name(Activation a) {
  switch (a) {
    case Activation::silu:
      return "silu";
    case Activation::gelu_tanh:
      return "gelu_tanh";
    case Activation::relu:
      return "relu";
    case Activation::relu2:
      return "relu2";
  }
  return "?";
}

constexpr Activation kAll[] = {Activation::silu, Activation::gelu_tanh, Activation::relu,
                               Activation::relu2};

// Inputs mostly N(0, 2), with a few extreme values.
std::vector<double> inputs(int64_t n, uint64_t seed) {
  std::vector<double> x = test::randn(n, seed, 0, 2.0);
  const double extremes[] = {-100, -30, -9, 9, 30, 100, 0, 1e-4};
  for (size_t i = 0; i < std::size(extremes) && static_cast<int64_t>(i) * 3 < n; ++i)
    x[i * 3] = extremes[i];
  return x;
}

template <class T>
void glu_forward_matches(Activation act, int64_t N, int64_t F) {
  CpuBackend be;
  const std::vector<double> gu = inputs(N * 2 * F, 1);
  std::vector<double> want(static_cast<size_t>(N * F));
  for (int64_t n = 0; n < N; ++n)
    for (int64_t f = 0; f < F; ++f)
      want[n * F + f] = act_ref(act, gu[n * 2 * F + f]) * gu[n * 2 * F + F + f];
  const std::vector<T> x = test::cast<T>(gu);
  std::vector<T> out(want.size());
  be.glu_forward(dtype_of<T>(), act, out.data(), x.data(), N, F);
  test::expect_close(out, want, test::kTol<T>, std::string("glu ") + name(act));
  std::vector<T> a(x.size());
  be.act_forward(dtype_of<T>(), act, a.data(), x.data(), static_cast<int64_t>(x.size()));
  std::vector<double> want_a(x.size());
  for (size_t i = 0; i < x.size(); ++i) want_a[i] = act_ref(act, gu[i]);
  test::expect_close(a, want_a, test::kTol<T>, std::string("act ") + name(act));
}

TEST(Mlp, ForwardMatchesReference) {
  for (Activation act : kAll) {
    glu_forward_matches<float>(act, 7, 13);
    glu_forward_matches<double>(act, 7, 13);
    glu_forward_matches<float>(act, 3, 1000);
  }
}

TEST(Mlp, GluBackwardMatchesFiniteDifferences) {
  CpuBackend be;
  const int64_t N = 5, F = 11;
  for (Activation act : kAll) {
    SCOPED_TRACE(name(act));
    std::vector<double> gu = test::randn(N * 2 * F, 2, 0, 1.5);
    const std::vector<double> R = test::randn(N * F, 3);
    std::vector<double> dgu(gu.size(), std::numeric_limits<double>::quiet_NaN());  // overwritten
    be.glu_backward(DType::f64, act, dgu.data(), R.data(), gu.data(), N, F);
    const auto loss = [&] {
      std::vector<double> out(static_cast<size_t>(N * F));
      be.glu_forward(DType::f64, act, out.data(), gu.data(), N, F);
      return test::dot(out, R);
    };
    test::expect_grad_matches_fd(gu, dgu, loss, "dgate_up");
    // float backward against the checked double one
    const std::vector<float> guf = test::cast<float>(gu), Rf = test::cast<float>(R);
    std::vector<float> dguf(gu.size(), std::numeric_limits<float>::quiet_NaN());
    be.glu_backward(DType::f32, act, dguf.data(), Rf.data(), guf.data(), N, F);
    test::expect_close(dguf, dgu, 1e-5, "f32 dgate_up");
  }
}

TEST(Mlp, ActBackwardMatchesFiniteDifferences) {
  CpuBackend be;
  const int64_t n = 41;
  for (Activation act : kAll) {
    SCOPED_TRACE(name(act));
    std::vector<double> x = test::randn(n, 4, 0, 2.0);
    const std::vector<double> R = test::randn(n, 5);
    std::vector<double> dx(n, std::numeric_limits<double>::quiet_NaN());
    be.act_backward(DType::f64, act, dx.data(), R.data(), x.data(), n);
    const auto loss = [&] {
      std::vector<double> out(n);
      be.act_forward(DType::f64, act, out.data(), x.data(), n);
      return test::dot(out, R);
    };
    test::expect_grad_matches_fd(x, dx, loss, "dx");
    const std::vector<float> xf = test::cast<float>(inputs(n, 6)), Rf = test::cast<float>(R);
    std::vector<float> dxf(n);
    be.act_backward(DType::f32, act, dxf.data(), Rf.data(), xf.data(), n);
    std::vector<double> dxd(n);
    be.act_backward(DType::f64, act, dxd.data(), test::widen(Rf).data(), test::widen(xf).data(), n);
    test::expect_close(dxf, dxd, 1e-5, "f32 dx (with extreme inputs)");
  }
}

// Inputs where a bit pattern could differ: both zeros, tiny and huge magnitudes (squares near
// f32's smallest normal and largest finite), and n not a multiple of the mask's 32-bit words.
template <class T>
std::vector<T> edge_inputs(int64_t n, uint64_t seed) {
  std::vector<T> x = test::cast<T>(test::randn(n, seed, 0, 2.0));
  const T tiny = std::sqrt(std::numeric_limits<T>::min());  // r * r the smallest normal
  const T edges[] = {T(0),  -T(0),   tiny,     T(1.5) * tiny,
                     -tiny, T(3e15), T(-7e15), std::sqrt(std::numeric_limits<T>::max()) / T(2),
                     T(1),  T(-1)};
  for (size_t i = 0; i < std::size(edges) && static_cast<int64_t>(i * 5) < n; ++i)
    x[i * 5] = edges[i];
  return x;
}

template <class T>
void masked_and_from_output_match(int64_t n) {
  SCOPED_TRACE(n);
  CpuBackend be;
  const DType dt = dtype_of<T>();
  const std::vector<T> x = edge_inputs<T>(n, 21);
  const std::vector<T> dout = test::cast<T>(test::randn(n, 22));  // negative ones make -0
  std::vector<uint32_t> mask(sign_mask_bytes(n) / 4, 0xdeadbeefu);
  be.relu_mask(dt, mask.data(), x.data(), n);
  for (int64_t i = 0; i < n; ++i)
    ASSERT_EQ((mask[i / 32] >> (i % 32)) & 1u, x[i] > T(0) ? 1u : 0u) << "bit " << i;
  if (n % 32) EXPECT_EQ(mask.back() >> (n % 32), 0u) << "unused bits of the last word";
  auto bits_equal = [](const std::vector<T>& a, const std::vector<T>& b) {
    return std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
  };
  std::vector<T> want(n), got(n, std::numeric_limits<T>::quiet_NaN());
  be.act_backward(dt, Activation::relu, want.data(), dout.data(), x.data(), n);
  be.relu_backward_masked(dt, got.data(), dout.data(), mask.data(), n);
  EXPECT_TRUE(bits_equal(got, want)) << "relu from the mask";
  std::vector<T> y(n);
  be.act_forward(dt, Activation::relu2, y.data(), x.data(), n);
  be.act_backward(dt, Activation::relu2, want.data(), dout.data(), x.data(), n);
  std::fill(got.begin(), got.end(), std::numeric_limits<T>::quiet_NaN());
  be.relu2_backward_from_output(dt, got.data(), dout.data(), y.data(), n);
  EXPECT_TRUE(bits_equal(got, want)) << "relu2 from the output";
}

TEST(Mlp, ReluFromMaskAndRelu2FromOutputGiveTheSameBits) {
  for (int64_t n : {1, 31, 32, 33, 1000, 100003}) {
    masked_and_from_output_match<float>(n);
    masked_and_from_output_match<double>(n);
  }
}

// The fact relu2_backward_from_output rests on: in binary floating point with round-to-nearest,
// sqrt(round(r * r)) == r when r * r is normal and finite. Every f32 from 2^-63 to 2^64.
TEST(Mlp, SquareRootOfARoundedSquareIsExactForEveryFloat) {
  const uint32_t lo = 0x20000000u, hi = 0x5f800000u;  // 2^-63 and 2^64
  int64_t bad = 0;
#pragma omp parallel for reduction(+ : bad) schedule(static)
  for (int64_t i = lo; i < int64_t{hi}; ++i) {
    const uint32_t u = static_cast<uint32_t>(i);
    float r;
    std::memcpy(&r, &u, 4);
    const float a = r * r;
    bad += std::sqrt(a) != r;
  }
  EXPECT_EQ(bad, 0);
}

// The vectorisable float exp/tanh behind softmax, SiLU and GELU: a few ulp over their range.
TEST(FastMath, ExpAndTanhAreAccurate) {
  double worst_exp = 0, worst_tanh = 0;
  for (int i = 0; i <= 200000; ++i) {
    const float x = -87.0f + 175.0f * static_cast<float>(i) / 200000.0f;
    const double e = std::exp(double{x});
    worst_exp = std::max(worst_exp, std::fabs(cpu::fast_exp(x) - e) / e);
    const float t = static_cast<float>(i) / 5000.0f - 20.0f;
    const double th = std::tanh(double{t});
    worst_tanh =
        std::max(worst_tanh, std::fabs(cpu::fast_tanh(t) - th) / std::max(std::fabs(th), 1e-30));
  }
  EXPECT_LT(worst_exp, 1.5e-7);  // about 1 ulp
  EXPECT_LT(worst_tanh, 3e-7);   // about 2 ulp
  EXPECT_EQ(cpu::fast_exp(-INFINITY), 0.0f);
  EXPECT_EQ(cpu::fast_exp(-1000.0f), 0.0f);
  EXPECT_TRUE(std::isfinite(cpu::fast_exp(1000.0f)));
  EXPECT_EQ(cpu::fast_tanh(0.0f), 0.0f);
  EXPECT_EQ(cpu::fast_tanh(100.0f), 1.0f);
  EXPECT_EQ(cpu::fast_tanh(-100.0f), -1.0f);
}

}  // namespace
}  // namespace lmt

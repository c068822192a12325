// Rotary embedding on the CPU backend against the Hugging Face formula (q * cos + rotate_half(q) *
// sin, angle = float32(pos) * float32 inv_freq in float32), with partial rotary dims, a packed row
// whose other columns must stay untouched, attn_factor, and the inverse as the exact transpose:
// d/dx sum(rope(x) * R) = rope_inverse(R), checked by finite differences in f64.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "backend_test_util.h"

namespace lmt {
namespace {

struct RopeCase {
  int64_t N;
  int heads, head_dim, rotary_dim;
  double attn_factor;
};
const RopeCase kRopeCases[] = {
    {7, 3, 24, 24, 1.0}, {5, 2, 24, 16, 1.0}, {9, 4, 8, 8, 1.3}, {1, 1, 2, 2, 1.0}};

struct RopeData {
  int64_t row_stride;
  std::vector<int32_t> pos;
  std::vector<float> inv_freq;
};

RopeData make_data(const RopeCase& c) {
  RopeData d;
  d.row_stride = int64_t{c.heads} * c.head_dim + 5;  // more columns follow the heads (packed qkv)
  for (int64_t n = 0; n < c.N; ++n) d.pos.push_back(static_cast<int32_t>((n * 977 + 13) % 4099));
  const int half = c.rotary_dim / 2;
  for (int i = 0; i < half; ++i)
    d.inv_freq.push_back(static_cast<float>(1.0 / std::pow(10000.0, 2.0 * i / c.rotary_dim)));
  return d;
}

std::vector<double> reference(const RopeCase& c, const RopeData& d, std::vector<double> x,
                              bool inverse) {
  const int half = c.rotary_dim / 2;
  for (int64_t n = 0; n < c.N; ++n)
    for (int h = 0; h < c.heads; ++h) {
      double* v = x.data() + n * d.row_stride + int64_t{h} * c.head_dim;
      for (int i = 0; i < half; ++i) {
        const float angle = static_cast<float>(d.pos[n]) * d.inv_freq[i];
        const double cs = std::cos(double{angle}) * c.attn_factor;
        const double sn = std::sin(double{angle}) * c.attn_factor * (inverse ? -1 : 1);
        const double a = v[i], b = v[i + half];
        v[i] = a * cs - b * sn, v[i + half] = b * cs + a * sn;
      }
    }
  return x;
}

template <class T>
std::vector<T> run(const RopeCase& c, const RopeData& d, const std::vector<double>& x,
                   bool inverse) {
  CpuBackend be;
  std::vector<T> v = test::cast<T>(x);
  be.rope(dtype_of<T>(), v.data(), d.pos.data(), d.inv_freq.data(), c.N, d.row_stride, c.heads,
          c.head_dim, c.rotary_dim, c.attn_factor, inverse);
  return v;
}

TEST(Rope, ForwardAndInverseMatchHuggingFaceFormula) {
  for (const RopeCase& c : kRopeCases) {
    SCOPED_TRACE(::testing::Message() << "N=" << c.N << " heads=" << c.heads << " D=" << c.head_dim
                                      << " rotary=" << c.rotary_dim);
    const RopeData d = make_data(c);
    const std::vector<double> x = test::randn(c.N * d.row_stride, 1);
    for (bool inverse : {false, true}) {
      // Columns outside the rotary dims (and outside the heads) come back unchanged.
      const std::vector<double> want = reference(c, d, x, inverse);
      test::expect_close(run<float>(c, d, x, inverse), want, 1e-6, "f32");
      test::expect_close(run<double>(c, d, x, inverse), want, 1e-12, "f64");
    }
    // inverse(forward(x)) = attn_factor^2 x
    const std::vector<double> fwd = test::widen(run<double>(c, d, x, false));
    std::vector<double> want = x;
    for (int64_t n = 0; n < c.N; ++n)
      for (int64_t i = 0; i < int64_t{c.heads} * c.head_dim; ++i)
        if (i % c.head_dim < c.rotary_dim)
          want[n * d.row_stride + i] *= c.attn_factor * c.attn_factor;
    test::expect_close(run<double>(c, d, fwd, true), want, 1e-12, "round trip");
  }
}

TEST(Rope, InverseIsTheBackward) {
  for (const RopeCase& c : kRopeCases) {
    SCOPED_TRACE(::testing::Message() << "N=" << c.N << " rotary=" << c.rotary_dim);
    const RopeData d = make_data(c);
    std::vector<double> x = test::randn(c.N * d.row_stride, 2);
    const std::vector<double> R = test::randn(c.N * d.row_stride, 3);
    const std::vector<double> grad = test::widen(run<double>(c, d, R, true));
    const auto loss = [&] { return test::dot(test::widen(run<double>(c, d, x, false)), R); };
    test::expect_grad_matches_fd(x, grad, loss, "dx");
  }
}

TEST(Rope, RejectsOddRotaryDim) {
  CpuBackend be;
  std::vector<float> x(8);
  const int32_t pos = 0;
  const float inv = 1.0f;
  EXPECT_THROW(be.rope(DType::f32, x.data(), &pos, &inv, 1, 8, 1, 8, 3, 1.0, false), InternalError);
}

}  // namespace
}  // namespace lmt

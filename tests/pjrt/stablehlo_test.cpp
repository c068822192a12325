// Programs built with StablehloBuilder, compiled and run on XLA's CPU plugin, each against a naive
// C++ computation in double on fresh normal inputs with odd shapes. One golden test fixes the text
// format; the others check that each op's text parses and that its computed type and meaning
// match what the plugin does.
#include "backend/pjrt/stablehlo.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "core/dtype.h"
#include "core/rng.h"
#include "pjrt_test_util.h"

namespace lmt {
namespace {

using test::expect_near_all;
using Dims = std::vector<int64_t>;

class StablehloTest : public test::PjrtTest {
 protected:
  // n numbers N(0, 1), stream by call, seeded by the fixture (its seed is in the trace).
  std::vector<float> normal(size_t n) {
    std::vector<float> v(n);
    fill_normal(v.data(), int64_t(n), 0.0, 1.0, seed_, stream_++);
    return v;
  }
  PjrtBuffer dev(const std::vector<float>& v, Dims dims) {
    return client_->to_device(v.data(), DType::f32, std::move(dims));
  }
  // Compiles b's program and runs it on `args` (none donated).
  std::vector<PjrtBuffer> run(const StablehloBuilder& b, std::vector<PjrtBuffer*> args) {
    PjrtExecutable exe = client_->compile(b.text());
    return exe.execute(args);
  }
  uint64_t stream_ = 0;
};

std::vector<double> abs_of(const std::vector<double>& v) {
  std::vector<double> a(v.size());
  for (size_t i = 0; i < v.size(); ++i) a[i] = std::fabs(v[i]);
  return a;
}

TEST(StablehloText, GoldenProgram) {
  StablehloBuilder b;
  auto x = b.param(DType::f32, {2, 3}, 0);
  auto s = b.param(DType::bf16, {});
  auto one = b.constant(1.0, DType::f32, {2, 3});
  auto y = b.add(x, one);
  auto m = b.reduce_max(y, {1});
  b.ret({y, b.convert(s, DType::f32), m});
  EXPECT_EQ(b.text(), R"(module {
  func.func @main(%arg0: tensor<2x3xf32> {tf.aliasing_output = 0 : i32}, %arg1: tensor<bf16>) -> (tensor<2x3xf32>, tensor<f32>, tensor<2xf32>) {
    %0 = stablehlo.constant dense<1.0> : tensor<2x3xf32>
    %1 = stablehlo.add %arg0, %0 : tensor<2x3xf32>
    %2 = stablehlo.constant dense<0xFF800000> : tensor<f32>
    %3 = stablehlo.reduce(%1 init: %2) applies stablehlo.maximum across dimensions = [1] : (tensor<2x3xf32>, tensor<f32>) -> tensor<2xf32>
    %4 = stablehlo.convert %arg1 : (tensor<bf16>) -> tensor<f32>
    return %1, %4, %3 : tensor<2x3xf32>, tensor<f32>, tensor<2xf32>
  }
}
)");
}

TEST(StablehloText, TypesAreComputed) {
  StablehloBuilder b;
  auto x = b.param(DType::f32, {2, 5, 4});
  auto w = b.param(DType::f32, {2, 4, 3});
  EXPECT_EQ(b.dot_general(x, w, {0}, {0}, {2}, {1}).dims, (Dims{2, 5, 3}));
  EXPECT_EQ(b.transpose(x, {2, 0, 1}).dims, (Dims{4, 2, 5}));
  EXPECT_EQ(b.slice(x, {0, 1, 0}, {2, 5, 4}, {1, 2, 3}).dims, (Dims{2, 2, 2}));
  EXPECT_EQ(b.reduce_sum(x, {0, 2}).dims, (Dims{5}));
  EXPECT_TRUE(b.compare(x, x, CompareDir::lt).pred);
  EXPECT_EQ(mlir_tensor_type(b.convert(x, DType::bf16)), "tensor<2x5x4xbf16>");
  StablehloBuilder other;
  EXPECT_THROW(other.negate(x), InternalError);        // a value of another program
  EXPECT_THROW(b.add(x, w), InternalError);            // shapes differ
  EXPECT_THROW(b.reshape(x, {3, 13}), InternalError);  // element counts differ
  EXPECT_THROW(b.transpose(x, {0, 0, 1}), InternalError);
  EXPECT_THROW(b.constant(0.5, DType::i32), InternalError);
  EXPECT_THROW(b.ret({b.compare(x, x, CompareDir::eq)}), InternalError);  // no pred outputs
}

TEST_F(StablehloTest, SoftmaxOverLastAxis) {
  SCOPED_TRACE(seed_note());
  const int64_t R = 3, C = 7;
  StablehloBuilder b;
  auto x = b.param(DType::f32, {R, C});
  auto mx = b.broadcast_in_dim(b.reduce_max(x, {1}), {R, C}, {0});
  auto e = b.exp(b.subtract(x, mx));
  auto sum = b.broadcast_in_dim(b.reduce_sum(e, {1}), {R, C}, {0});
  b.ret({b.divide(e, sum)});
  std::vector<float> xs = normal(R * C);
  PjrtBuffer dx = dev(xs, {R, C});
  std::vector<PjrtBuffer> out = run(b, {&dx});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].dims(), (Dims{R, C}));
  std::vector<double> want(R * C);
  for (int64_t r = 0; r < R; ++r) {
    double m = -INFINITY, s = 0;
    for (int64_t c = 0; c < C; ++c) m = std::max(m, double(xs[r * C + c]));
    for (int64_t c = 0; c < C; ++c) s += std::exp(xs[r * C + c] - m);
    for (int64_t c = 0; c < C; ++c) want[r * C + c] = std::exp(xs[r * C + c] - m) / s;
  }
  expect_near_all(out[0].to_host<float>(), want, want, 1e-5, "softmax");
}

TEST_F(StablehloTest, BatchedMatmul) {
  SCOPED_TRACE(seed_note());
  const int64_t B = 2, M = 5, K = 4, N = 3;
  StablehloBuilder b;
  auto x = b.param(DType::f32, {B, M, K});
  auto w = b.param(DType::f32, {B, K, N});
  b.ret({b.dot_general(x, w, {0}, {0}, {2}, {1})});
  std::vector<float> xs = normal(B * M * K), ws = normal(B * K * N);
  PjrtBuffer dx = dev(xs, {B, M, K}), dw = dev(ws, {B, K, N});
  std::vector<PjrtBuffer> out = run(b, {&dx, &dw});
  EXPECT_EQ(out[0].dims(), (Dims{B, M, N}));
  std::vector<double> want(B * M * N, 0.0), scale(B * M * N, 0.0);
  for (int64_t i = 0; i < B; ++i)
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n)
        for (int64_t k = 0; k < K; ++k) {
          double t = double(xs[(i * M + m) * K + k]) * ws[(i * K + k) * N + n];
          want[(i * M + m) * N + n] += t, scale[(i * M + m) * N + n] += std::fabs(t);
        }
  expect_near_all(out[0].to_host<float>(), want, scale, 1e-5, "batched matmul");
}

TEST_F(StablehloTest, TransposeReshapeRoundTrip) {
  SCOPED_TRACE(seed_note());
  StablehloBuilder b;
  auto x = b.param(DType::f32, {3, 4, 5});
  auto t = b.transpose(x, {2, 0, 1});  // [5, 3, 4]
  auto back = b.transpose(b.reshape(b.reshape(t, {15, 4}), {5, 3, 4}), {1, 2, 0});
  b.ret({t, back});
  std::vector<float> xs = normal(60);
  PjrtBuffer dx = dev(xs, {3, 4, 5});
  std::vector<PjrtBuffer> out = run(b, {&dx});
  ASSERT_EQ(out.size(), 2u);
  std::vector<float> got = out[0].to_host<float>();
  for (int64_t i = 0; i < 5; ++i)
    for (int64_t j = 0; j < 3; ++j)
      for (int64_t k = 0; k < 4; ++k) EXPECT_EQ(got[(i * 3 + j) * 4 + k], xs[(j * 4 + k) * 5 + i]);
  EXPECT_EQ(out[1].to_host<float>(), xs);
}

TEST_F(StablehloTest, SliceAndConcatenate) {
  SCOPED_TRACE(seed_note());
  StablehloBuilder b;
  auto x = b.param(DType::f32, {5, 8});
  auto a = b.slice(x, {1, 0}, {4, 8}, {1, 3});  // rows 1..3, columns 0, 3, 6
  auto c = b.slice(x, {2, 1}, {5, 3});          // rows 2..4, columns 1, 2
  b.ret({b.concatenate({a, c, a}, 1)});
  std::vector<float> xs = normal(40);
  PjrtBuffer dx = dev(xs, {5, 8});
  std::vector<PjrtBuffer> out = run(b, {&dx});
  EXPECT_EQ(out[0].dims(), (Dims{3, 8}));
  std::vector<float> got = out[0].to_host<float>();
  for (int64_t r = 0; r < 3; ++r) {
    const int64_t cols[] = {0, 3, 6};
    for (int j = 0; j < 3; ++j) {
      EXPECT_EQ(got[r * 8 + j], xs[(1 + r) * 8 + cols[j]]);
      EXPECT_EQ(got[r * 8 + 5 + j], xs[(1 + r) * 8 + cols[j]]);
    }
    for (int j = 0; j < 2; ++j) EXPECT_EQ(got[r * 8 + 3 + j], xs[(2 + r) * 8 + 1 + j]);
  }
}

// max(x, y) by select, and a causal mask built from two iotas (column <= row keeps x).
TEST_F(StablehloTest, SelectOnCompareAndIota) {
  SCOPED_TRACE(seed_note());
  const int64_t N = 6;
  StablehloBuilder b;
  auto x = b.param(DType::f32, {N, N});
  auto y = b.param(DType::f32, {N, N});
  auto bigger = b.select(b.compare(x, y, CompareDir::gt), x, y);
  auto keep =
      b.compare(b.iota(DType::i32, {N, N}, 1), b.iota(DType::i32, {N, N}, 0), CompareDir::le);
  auto masked = b.select(keep, x, b.constant(-INFINITY, DType::f32, {N, N}));
  b.ret({bigger, masked});
  std::vector<float> xs = normal(N * N), ys = normal(N * N);
  PjrtBuffer dx = dev(xs, {N, N}), dy = dev(ys, {N, N});
  std::vector<PjrtBuffer> out = run(b, {&dx, &dy});
  std::vector<float> got = out[0].to_host<float>(), mask = out[1].to_host<float>();
  for (int64_t i = 0; i < N * N; ++i) {
    EXPECT_EQ(got[i], std::max(xs[i], ys[i])) << i;
    EXPECT_EQ(mask[i], i % N <= i / N ? xs[i] : -INFINITY) << i;
  }
}

TEST_F(StablehloTest, Bf16Convert) {
  SCOPED_TRACE(seed_note());
  StablehloBuilder b;
  auto x = b.param(DType::f32, {5, 9});
  auto h = b.convert(x, DType::bf16);
  b.ret({h, b.convert(b.multiply(h, b.constant(0.5, DType::bf16, {5, 9})), DType::f32)});
  std::vector<float> xs = normal(45);
  PjrtBuffer dx = dev(xs, {5, 9});
  std::vector<PjrtBuffer> out = run(b, {&dx});
  EXPECT_EQ(out[0].dtype(), DType::bf16);
  std::vector<uint16_t> hs = out[0].to_host<uint16_t>();
  std::vector<float> halves = out[1].to_host<float>();
  for (size_t i = 0; i < xs.size(); ++i) {
    EXPECT_EQ(hs[i], f32_to_bf16(xs[i])) << i;                          // nearest even
    EXPECT_EQ(halves[i], 0.5f * bf16_to_f32(f32_to_bf16(xs[i]))) << i;  // exact in bf16
  }
}

TEST_F(StablehloTest, UnaryAndBinaryElementwise) {
  SCOPED_TRACE(seed_note());
  const int64_t N = 37;
  StablehloBuilder b;
  auto x = b.param(DType::f32, {N});
  auto y = b.param(DType::f32, {N});
  auto pos = b.add(b.multiply(x, x), b.constant(0.25, DType::f32, {N}));  // >= 0.25
  b.ret({b.exp(x), b.log(pos), b.tanh(x), b.rsqrt(pos), b.sqrt(pos), b.logistic(x), b.negate(x),
         b.maximum(x, y), b.divide(x, pos)});
  std::vector<float> xs = normal(N), ys = normal(N);
  PjrtBuffer dx = dev(xs, {N}), dy = dev(ys, {N});
  std::vector<PjrtBuffer> out = run(b, {&dx, &dy});
  ASSERT_EQ(out.size(), 9u);
  std::vector<std::vector<double>> want(9, std::vector<double>(N));
  for (int64_t i = 0; i < N; ++i) {
    double v = xs[i], p = float(v * v) + 0.25f;  // pos as computed in f32
    want[0][i] = std::exp(v), want[1][i] = std::log(p), want[2][i] = std::tanh(v);
    want[3][i] = 1 / std::sqrt(p), want[4][i] = std::sqrt(p), want[5][i] = 1 / (1 + std::exp(-v));
    want[6][i] = -v, want[7][i] = std::max(v, double(ys[i])), want[8][i] = v / p;
  }
  const char* names[] = {"exp", "log", "tanh", "rsqrt", "sqrt", "logistic", "negate", "max", "div"};
  for (int k = 0; k < 9; ++k) {
    // Relative, but log near 0 (p near 1) has no relative accuracy to give: there the error of p
    // (and of p's rounding, which the plugin may fuse away) is the scale.
    std::vector<double> scale = abs_of(want[k]);
    if (k == 1)
      for (double& s : scale) s = std::max(s, 1.0);
    expect_near_all(out[k].to_host<float>(), want[k], scale, 1e-6, names[k]);
  }
}

// Constants in every element type, non-finite ones included, come back bit for bit; an f64 sum
// and an i32 max (whose init is INT32_MIN, not -inf) reduce in their own type.
TEST_F(StablehloTest, ConstantsAndOtherDtypes) {
  SCOPED_TRACE(seed_note());
  StablehloBuilder b;
  auto d = b.param(DType::f64, {4, 9});
  auto n = b.param(DType::i32, {4, 9});
  b.ret({b.constant(0.1, DType::f64, {2}), b.constant(-INFINITY, DType::f64),
         b.constant(1e20, DType::f32, {3}), b.constant(NAN, DType::f32),
         b.constant(3.14159, DType::bf16), b.constant(INFINITY, DType::bf16),
         b.constant(-2147483648.0, DType::i32), b.reduce_sum(d, {1}), b.reduce_max(n, {0}),
         b.convert(b.compare(n, b.constant(0, DType::i32, {4, 9}), CompareDir::ge), DType::i32)});
  std::vector<double> ds(36);
  fill_normal(ds.data(), 36, 0.0, 1.0, seed_, stream_++);
  std::vector<int32_t> ns(36);
  for (int32_t& v : ns) v = int32_t(rng_() % 2001) - 1500;  // mostly negative
  PjrtBuffer dd = client_->to_device(ds.data(), DType::f64, {4, 9});
  PjrtBuffer dn = client_->to_device(ns.data(), DType::i32, {4, 9});
  std::vector<PjrtBuffer> out = run(b, {&dd, &dn});
  ASSERT_EQ(out.size(), 10u);
  EXPECT_EQ(out[0].to_host<double>(), (std::vector<double>{0.1, 0.1}));
  EXPECT_EQ(out[1].to_host<double>()[0], -INFINITY);
  EXPECT_EQ(out[2].to_host<float>(), (std::vector<float>{1e20f, 1e20f, 1e20f}));
  EXPECT_TRUE(std::isnan(out[3].to_host<float>()[0]));
  EXPECT_EQ(out[4].to_host<uint16_t>()[0], f32_to_bf16(3.14159f));
  EXPECT_EQ(out[5].to_host<uint16_t>()[0], f32_to_bf16(INFINITY));
  EXPECT_EQ(out[6].to_host<int32_t>()[0], std::numeric_limits<int32_t>::min());
  std::vector<double> sums = out[7].to_host<double>();
  std::vector<int32_t> maxes = out[8].to_host<int32_t>(), signs = out[9].to_host<int32_t>();
  for (int r = 0; r < 4; ++r) {
    double s = 0, a = 0;
    for (int c = 0; c < 9; ++c) s += ds[r * 9 + c], a += std::fabs(ds[r * 9 + c]);
    EXPECT_NEAR(sums[r], s, 9 * a * 0x1p-53) << r;
  }
  for (int c = 0; c < 9; ++c) {
    int32_t m = ns[c];
    for (int r = 1; r < 4; ++r) m = std::max(m, ns[r * 9 + c]);
    EXPECT_EQ(maxes[c], m) << c;
  }
  for (int i = 0; i < 36; ++i) EXPECT_EQ(signs[i], ns[i] >= 0 ? 1 : 0) << i;
}

// p := p - 0.1 * g, three runs, p donated each time: the update happens in the buffer's memory.
TEST_F(StablehloTest, DonatedParameterFedBack) {
  SCOPED_TRACE(seed_note());
  const Dims dims{7, 3};
  StablehloBuilder b;
  auto p = b.param(DType::f32, dims, 0);
  auto g = b.param(DType::f32, dims);
  b.ret({b.subtract(p, b.multiply(b.constant(0.1, DType::f32, dims), g))});
  PjrtExecutable exe = client_->compile(b.text());
  std::vector<float> p0 = normal(21), gs = normal(21);
  PjrtBuffer dp = dev(p0, dims), dg = dev(gs, dims);
  const int donate[] = {0};
  for (int step = 0; step < 3; ++step) {
    PjrtBuffer* args[] = {&dp, &dg};
    std::vector<PjrtBuffer> out = exe.execute(args, donate);
    EXPECT_FALSE(dp.valid());
    dp = std::move(out[0]);
  }
  std::vector<float> got = dp.to_host<float>();
  for (size_t i = 0; i < got.size(); ++i) {
    float want = p0[i];
    for (int step = 0; step < 3; ++step) want -= 0.1f * gs[i];
    EXPECT_NEAR(got[i], want, 1e-6 * (std::fabs(p0[i]) + 0.3 * std::fabs(gs[i]))) << i;
  }
}

}  // namespace
}  // namespace lmt

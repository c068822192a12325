// Programs built with StablehloBuilder, compiled and run on XLA's CPU plugin, each against a naive
// C++ computation in double on fresh normal inputs with odd shapes. One golden test fixes the text
// format; the others check that each op's text parses and that its computed type and meaning
// match what the plugin does.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "backend/pjrt/hlo/builder.h"
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

size_t ops_in(const std::string& text, const std::string& op) {
  size_t n = 0;
  for (size_t at = text.find(" = stablehlo." + op + " "); at != std::string::npos;
       at = text.find(" = stablehlo." + op + " ", at + 1))
    ++n;
  return n;
}

// Folding: a value read back in the shape it was written is the value itself; a slice of a
// concatenation is the pieces it covers; adjacent slices concatenated are one. The program keeps
// its meaning (run against the inputs) and loses the ops (counted in its text).
TEST_F(StablehloTest, FoldingLooksThroughReshapesSlicesAndConcatenations) {
  SCOPED_TRACE(seed_note());
  StablehloBuilder b;
  auto x = b.param(DType::f32, {4, 6});
  auto y = b.param(DType::f32, {2, 6});
  // The PJRT backend's way: each parameter flat, concatenated, reshaped to the rows it holds.
  auto flat = b.concatenate({b.reshape(x, {24}), b.reshape(y, {12})}, 0);
  auto rows = b.reshape(flat, {6, 6});
  auto again = b.reshape(b.reshape(rows, {36}), {6, 6});
  auto just_y = b.slice(again, {4, 0}, {6, 6});
  auto across = b.slice(b.reshape(rows, {36}), {18}, {30});  // rows 3..4: x's last, y's first
  auto cols = b.concatenate({b.slice(x, {0, 0}, {4, 2}), b.slice(x, {0, 2}, {4, 6})}, 1);
  auto inner = b.slice(b.slice(rows, {1, 1}, {6, 5}), {2, 1}, {4, 3});  // rows 3..4, cols 2..3
  b.ret({rows, again, just_y, across, cols, inner});
  // rows and again: the parameters' rows concatenated (%3), once; just_y: y; across: x's last row
  // and y's first (%8); cols: x; inner: slices of x and y concatenated (%16), no slice of a slice.
  const std::string text = b.text();
  EXPECT_NE(text.find("return %3, %3, %arg1, %8, %arg0, %16 :"), std::string::npos) << text;
  EXPECT_NE(text.find("%16 = stablehlo.concatenate %14, %15, dim = 0"), std::string::npos) << text;
  EXPECT_EQ(ops_in(text, "reshape"), 4u) << text;  // the two made here, %4 and %8
  std::vector<float> xs = normal(24), ys = normal(12);
  PjrtBuffer dx = dev(xs, {4, 6}), dy = dev(ys, {2, 6});
  std::vector<PjrtBuffer> out = run(b, {&dx, &dy});
  std::vector<float> all = xs;
  all.insert(all.end(), ys.begin(), ys.end());
  EXPECT_EQ(out[0].to_host<float>(), all);
  EXPECT_EQ(out[1].to_host<float>(), all);
  EXPECT_EQ(out[2].to_host<float>(), ys);
  EXPECT_EQ(out[3].to_host<float>(), std::vector<float>(all.begin() + 18, all.begin() + 30));
  EXPECT_EQ(out[4].to_host<float>(), xs);
  std::vector<float> want;
  for (int r = 3; r < 5; ++r)
    for (int c = 2; c < 4; ++c) want.push_back(all[r * 6 + c]);
  EXPECT_EQ(out[5].to_host<float>(), want);
}

// split_concatenations: products, elementwise ops and broadcasts of concatenations become one per
// piece, with the meaning of the unsplit program (q|k|v: a weight of two parameters' rows, a
// gradient of two column blocks).
TEST_F(StablehloTest, SplitConcatenationsKeepTheProductsMeaning) {
  SCOPED_TRACE(seed_note());
  const int64_t N = 7, C = 5, Q = 3, K = 2;
  std::vector<float> xs = normal(N * C), wq = normal(Q * C), wk = normal(K * C),
                     dys = normal(N * (Q + K)), bias = normal(Q + K);
  std::vector<std::vector<float>> results[2];
  for (bool split : {false, true}) {
    StablehloBuilder b;
    b.split_concatenations(split);
    auto x = b.param(DType::f32, {N, C});
    auto q = b.param(DType::f32, {Q, C});
    auto k = b.param(DType::f32, {K, C});
    auto dy = b.param(DType::f32, {N, Q + K});
    auto bq = b.param(DType::f32, {Q + K});
    auto w =
        b.reshape(b.concatenate({b.reshape(q, {Q * C}), b.reshape(k, {K * C})}, 0), {Q + K, C});
    auto yv = b.dot_general(x, w, {}, {}, {1}, {1});  // [N, Q+K]
    auto bias_v = b.concatenate({b.slice(bq, {0}, {Q}), b.slice(bq, {Q}, {Q + K})}, 0);
    auto y = b.add(yv, b.broadcast_in_dim(bias_v, {N, Q + K}, {1}));
    // dy as two column blocks (what the backward writes into the q|k rows).
    auto g = b.concatenate(
        {b.slice(dy, {0, 0}, {N, Q}),
         b.multiply(b.slice(dy, {0, Q}, {N, Q + K}), b.constant(2.0, DType::f32, {N, K}))},
        1);
    auto dx = b.dot_general(g, w, {}, {}, {1}, {0});  // [N, C]: a sum of two products when split
    auto dw = b.dot_general(g, x, {}, {}, {0}, {0});  // [Q+K, C]
    auto yq = b.slice(y, {0, 0}, {N, Q});
    b.ret({y, dx, dw, yq});
    const std::string text = b.text();
    EXPECT_EQ(ops_in(text, "dot_general"), split ? 6u : 3u) << text;
    PjrtBuffer d0 = dev(xs, {N, C}), d1 = dev(wq, {Q, C}), d2 = dev(wk, {K, C}),
               d3 = dev(dys, {N, Q + K}), d4 = dev(bias, {Q + K});
    for (PjrtBuffer& o : run(b, {&d0, &d1, &d2, &d3, &d4}))
      results[split].push_back(o.to_host<float>());
  }
  ASSERT_EQ(results[0].size(), results[1].size());
  for (size_t i = 0; i < results[0].size(); ++i) {
    std::vector<double> want(results[0][i].begin(), results[0][i].end()), scale(want.size(), 1.0);
    expect_near_all(results[1][i], want, scale, 1e-5, "result " + std::to_string(i));
  }
  // y against the host: x w^T + bias.
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < Q + K; ++o) {
      double s = bias[o];
      for (int64_t c = 0; c < C; ++c)
        s += double(xs[n * C + c]) * (o < Q ? wq[o * C + c] : wk[(o - Q) * C + c]);
      EXPECT_NEAR(results[1][0][n * (Q + K) + o], s, 1e-5 * (1 + std::fabs(s)));
    }
}

// A host array and the data-movement ops on it, as StableHLO defines them: the reference for the
// folding test below.
struct HostArray {
  Dims dims;
  std::vector<float> v;
};
Dims strides_of(const Dims& d) {
  Dims s(d.size(), 1);
  for (size_t i = d.size(); i-- > 1;) s[i - 1] = s[i] * d[i];
  return s;
}
HostArray host_slice(const HostArray& x, const Dims& start, const Dims& limit) {
  HostArray r;
  for (size_t d = 0; d < x.dims.size(); ++d) r.dims.push_back(limit[d] - start[d]);
  const Dims xs = strides_of(x.dims), rs = strides_of(r.dims);
  int64_t n = 1;
  for (int64_t d : r.dims) n *= d;
  for (int64_t i = 0; i < n; ++i) {
    int64_t at = 0;
    for (size_t d = 0; d < r.dims.size(); ++d) at += (i / rs[d] % r.dims[d] + start[d]) * xs[d];
    r.v.push_back(x.v[static_cast<size_t>(at)]);
  }
  return r;
}
HostArray host_concat(const std::vector<HostArray>& xs, size_t dim) {
  HostArray r{xs[0].dims, {}};
  r.dims[dim] = 0;
  for (const HostArray& x : xs) r.dims[dim] += x.dims[dim];
  const Dims rs = strides_of(r.dims);
  int64_t n = 1;
  for (int64_t d : r.dims) n *= d;
  for (int64_t i = 0; i < n; ++i) {
    Dims idx(r.dims.size());
    for (size_t d = 0; d < r.dims.size(); ++d) idx[d] = i / rs[d] % r.dims[d];
    size_t k = 0;
    while (idx[dim] >= xs[k].dims[dim]) idx[dim] -= xs[k++].dims[dim];
    const Dims s = strides_of(xs[k].dims);
    int64_t at = 0;
    for (size_t d = 0; d < idx.size(); ++d) at += idx[d] * s[d];
    r.v.push_back(xs[k].v[static_cast<size_t>(at)]);
  }
  return r;
}

// Random chains of reshapes, slices, concatenations (of neighbouring slices too, which fold back)
// and adds, built with folding (and, in the second round, split_concatenations), equal the host's
// reference bit for bit: folding only moves data.
TEST_F(StablehloTest, FoldingIsExactOnRandomChains) {
  SCOPED_TRACE(seed_note());
  for (bool split : {false, true}) {
    StablehloBuilder b;
    b.split_concatenations(split);
    std::vector<HostArray> host;
    std::vector<HloValue> vals;
    std::vector<PjrtBuffer> inputs;
    for (Dims d : {Dims{6, 4}, Dims{2, 3, 4}, Dims{24}}) {
      HostArray h{d, uniform(24)};
      inputs.push_back(dev(h.v, d));
      vals.push_back(b.param(DType::f32, d));
      host.push_back(h);
    }
    auto pick = [&](size_t n) { return static_cast<size_t>(rng_() % n); };
    for (int op = 0; op < 60; ++op) {
      const size_t i = pick(vals.size());
      const HostArray x = host[i];
      const HloValue v = vals[i];
      HostArray r;
      HloValue rv;
      switch (pick(4)) {
        case 0: {  // reshape to one of the shapes of 24 elements (or of its own count)
          int64_t n = 1;
          for (int64_t d : x.dims) n *= d;
          std::vector<Dims> shapes = {{n}};
          for (int64_t a = 1; a <= n; ++a)
            if (n % a == 0) shapes.push_back({a, n / a});
          if (n % 2 == 0) shapes.push_back({2, n / 2 / (n % 4 == 0 ? 2 : 1), n % 4 == 0 ? 2 : 1});
          r = {shapes[pick(shapes.size())], x.v};
          rv = b.reshape(v, r.dims);
          break;
        }
        case 1: {  // a non-empty slice
          Dims s, l;
          for (int64_t d : x.dims) {
            const int64_t a = static_cast<int64_t>(pick(static_cast<size_t>(d)));
            s.push_back(a);
            l.push_back(a + 1 + static_cast<int64_t>(pick(static_cast<size_t>(d - a))));
          }
          r = host_slice(x, s, l);
          rv = b.slice(v, s, l);
          break;
        }
        case 2: {  // cut along a dimension and put back together, maybe with a piece repeated
          const size_t d = pick(x.dims.size());
          if (x.dims[d] < 2) continue;
          const int64_t cut = 1 + static_cast<int64_t>(pick(static_cast<size_t>(x.dims[d] - 1)));
          Dims s0(x.dims.size(), 0), l0 = x.dims, s1(x.dims.size(), 0), l1 = x.dims;
          l0[d] = cut, s1[d] = cut;
          const HostArray a = host_slice(x, s0, l0), c = host_slice(x, s1, l1);
          const HloValue av = b.slice(v, s0, l0), cv = b.slice(v, s1, l1);
          if (pick(2)) {
            r = host_concat({a, c}, d);
            rv = b.concatenate({av, cv}, static_cast<int64_t>(d));
          } else {
            r = host_concat({c, a, c}, d);
            rv = b.concatenate({cv, av, cv}, static_cast<int64_t>(d));
          }
          break;
        }
        default: {  // x + x
          r = x;
          for (float& e : r.v) e += e;
          rv = b.add(v, v);
          break;
        }
      }
      host.push_back(r);
      vals.push_back(rv);
    }
    b.ret(vals);
    std::vector<PjrtBuffer*> args;
    for (PjrtBuffer& in : inputs) args.push_back(&in);
    const std::vector<PjrtBuffer> out = run(b, args);
    ASSERT_EQ(out.size(), host.size());
    for (size_t k = 0; k < host.size(); ++k) {
      EXPECT_EQ(out[k].dims(), host[k].dims) << "value " << k;
      EXPECT_EQ(out[k].to_host<float>(), host[k].v) << "value " << k << (split ? ", split" : "");
    }
  }
}

}  // namespace
}  // namespace lmt

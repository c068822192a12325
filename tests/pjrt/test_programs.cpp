// StableHLO programs compiled and run on XLA's CPU plugin, each against a naive C++ computation
// in double on fresh random inputs: elementwise add, a matmul (dot_general) with odd sizes, a sum
// (reduce), a program with two outputs, i32 and bf16 arrays, and parameters kept on the device
// across runs (x := x + 1, the output fed back as the next input, with and without donation).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/dtype.h"
#include "pjrt_test_util.h"

namespace lmt {
namespace {

using test::expect_near_all;
using test::PjrtTest;

TEST_F(PjrtTest, ClientDescribesItsDevice) {
  EXPECT_TRUE(pjrt_built());
  EXPECT_EQ(client_->platform_name(), "cpu");
  EXPECT_GE(client_->device_count(), 1u);
  EXPECT_FALSE(client_->device_kind().empty());
  EXPECT_EQ(client_->plugin().version().rfind("0.", 0), 0u) << client_->plugin().version();
}

TEST_F(PjrtTest, ElementwiseAdd) {
  SCOPED_TRACE(seed_note());
  const char* mlir = R"(
module {
  func.func @main(%a: tensor<3x5xf32>, %b: tensor<3x5xf32>) -> tensor<3x5xf32> {
    %0 = stablehlo.add %a, %b : tensor<3x5xf32>
    return %0 : tensor<3x5xf32>
  }
})";
  PjrtExecutable exe = client_->compile(mlir);
  ASSERT_EQ(exe.num_outputs(), 1u);
  std::vector<float> a = uniform(15), b = uniform(15);
  PjrtBuffer da = client_->to_device(a.data(), DType::f32, {3, 5});
  PjrtBuffer db = client_->to_device(b.data(), DType::f32, {3, 5});
  PjrtBuffer* args[] = {&da, &db};
  std::vector<PjrtBuffer> out = exe.execute(args);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].dtype(), DType::f32);
  EXPECT_EQ(out[0].dims(), (std::vector<int64_t>{3, 5}));
  std::vector<float> got = out[0].to_host<float>();
  for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], a[i] + b[i]) << i;  // exact in f32
  EXPECT_TRUE(da.valid() && db.valid());  // not donated: still usable
}

TEST_F(PjrtTest, MatmulWithOddSizes) {
  SCOPED_TRACE(seed_note());
  const int64_t M = 7, K = 13, N = 5;
  const char* mlir = R"(
module {
  func.func @main(%a: tensor<7x13xf32>, %b: tensor<13x5xf32>) -> tensor<7x5xf32> {
    %0 = stablehlo.dot_general %a, %b, contracting_dims = [1] x [0] : (tensor<7x13xf32>, tensor<13x5xf32>) -> tensor<7x5xf32>
    return %0 : tensor<7x5xf32>
  }
})";
  PjrtExecutable exe = client_->compile(mlir);
  std::vector<float> a = uniform(M * K), b = uniform(K * N);
  PjrtBuffer da = client_->to_device(a.data(), DType::f32, {M, K});
  PjrtBuffer db = client_->to_device(b.data(), DType::f32, {K, N});
  PjrtBuffer* args[] = {&da, &db};
  std::vector<PjrtBuffer> out = exe.execute(args);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].dims(), (std::vector<int64_t>{M, N}));
  std::vector<double> want(M * N), scale(M * N);
  for (int64_t i = 0; i < M; ++i) {
    for (int64_t j = 0; j < N; ++j) {
      double s = 0, abs_sum = 0;
      for (int64_t k = 0; k < K; ++k) {
        s += double(a[i * K + k]) * b[k * N + j];
        abs_sum += std::fabs(double(a[i * K + k]) * b[k * N + j]);
      }
      want[i * N + j] = s, scale[i * N + j] = abs_sum;
    }
  }
  // f32 accumulation over K terms: error within a few K * 2^-24 of the sum of |terms|.
  expect_near_all(out[0].to_host<float>(), want, scale, 4.0 * K * 0x1p-24, "matmul");
}

TEST_F(PjrtTest, ReduceSumOverRows) {
  SCOPED_TRACE(seed_note());
  const int64_t R = 6, C = 37;
  const char* mlir = R"(
module {
  func.func @main(%x: tensor<6x37xf32>) -> tensor<6xf32> {
    %zero = stablehlo.constant dense<0.0> : tensor<f32>
    %0 = stablehlo.reduce(%x init: %zero) applies stablehlo.add across dimensions = [1] : (tensor<6x37xf32>, tensor<f32>) -> tensor<6xf32>
    return %0 : tensor<6xf32>
  }
})";
  PjrtExecutable exe = client_->compile(mlir);
  std::vector<float> x = uniform(R * C);
  PjrtBuffer dx = client_->to_device(x.data(), DType::f32, {R, C});
  PjrtBuffer* args[] = {&dx};
  std::vector<PjrtBuffer> out = exe.execute(args);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].dims(), (std::vector<int64_t>{R}));
  std::vector<double> want(R, 0.0), scale(R, 0.0);
  for (int64_t r = 0; r < R; ++r) {
    for (int64_t c = 0; c < C; ++c) want[r] += x[r * C + c], scale[r] += std::fabs(x[r * C + c]);
  }
  expect_near_all(out[0].to_host<float>(), want, scale, 4.0 * C * 0x1p-24, "row sums");
}

TEST_F(PjrtTest, TwoOutputs) {
  SCOPED_TRACE(seed_note());
  const char* mlir = R"(
module {
  func.func @main(%a: tensor<9xf32>, %b: tensor<9xf32>) -> (tensor<9xf32>, tensor<f32>) {
    %p = stablehlo.multiply %a, %b : tensor<9xf32>
    %zero = stablehlo.constant dense<0.0> : tensor<f32>
    %m = stablehlo.reduce(%a init: %zero) applies stablehlo.maximum across dimensions = [0] : (tensor<9xf32>, tensor<f32>) -> tensor<f32>
    return %p, %m : tensor<9xf32>, tensor<f32>
  }
})";
  PjrtExecutable exe = client_->compile(mlir);
  ASSERT_EQ(exe.num_outputs(), 2u);
  std::vector<float> a = uniform(9), b = uniform(9);
  PjrtBuffer da = client_->to_device(a.data(), DType::f32, {9});
  PjrtBuffer db = client_->to_device(b.data(), DType::f32, {9});
  PjrtBuffer* args[] = {&da, &db};
  std::vector<PjrtBuffer> out = exe.execute(args);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[1].dims(), std::vector<int64_t>{});  // a scalar
  std::vector<float> prod = out[0].to_host<float>(), max = out[1].to_host<float>();
  float want_max = a[0];
  for (size_t i = 0; i < 9; ++i) {
    EXPECT_EQ(prod[i], a[i] * b[i]) << i;
    want_max = std::max(want_max, a[i]);
  }
  ASSERT_EQ(max.size(), 1u);
  EXPECT_EQ(max[0], want_max);
}

TEST_F(PjrtTest, Int32InputAndOutput) {
  SCOPED_TRACE(seed_note());
  const char* mlir = R"(
module {
  func.func @main(%t: tensor<2x11xi32>) -> (tensor<2x11xi32>, tensor<2x11xf32>) {
    %sq = stablehlo.multiply %t, %t : tensor<2x11xi32>
    %f = stablehlo.convert %t : (tensor<2x11xi32>) -> tensor<2x11xf32>
    return %sq, %f : tensor<2x11xi32>, tensor<2x11xf32>
  }
})";
  PjrtExecutable exe = client_->compile(mlir);
  std::uniform_int_distribution<int32_t> dist(-40000, 40000);
  std::vector<int32_t> t(22);
  for (int32_t& v : t) v = dist(rng_);
  PjrtBuffer dt = client_->to_device(t.data(), DType::i32, {2, 11});
  PjrtBuffer* args[] = {&dt};
  std::vector<PjrtBuffer> out = exe.execute(args);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].dtype(), DType::i32);
  std::vector<int32_t> sq = out[0].to_host<int32_t>();
  std::vector<float> f = out[1].to_host<float>();
  for (size_t i = 0; i < t.size(); ++i) {
    EXPECT_EQ(sq[i], t[i] * t[i]) << i;  // |t| <= 40000: no overflow
    EXPECT_EQ(f[i], static_cast<float>(t[i])) << i;
  }
}

TEST_F(PjrtTest, Bf16RoundTrip) {
  SCOPED_TRACE(seed_note());
  // bf16 in: widened to f32 and doubled in bf16 (both exact). f32 in: rounded to bf16 (nearest
  // even, as f32_to_bf16 rounds).
  const char* mlir = R"(
module {
  func.func @main(%h: tensor<6x7xbf16>, %x: tensor<6x7xf32>) -> (tensor<6x7xf32>, tensor<6x7xbf16>, tensor<6x7xbf16>) {
    %wide = stablehlo.convert %h : (tensor<6x7xbf16>) -> tensor<6x7xf32>
    %twice = stablehlo.add %h, %h : tensor<6x7xbf16>
    %narrow = stablehlo.convert %x : (tensor<6x7xf32>) -> tensor<6x7xbf16>
    return %wide, %twice, %narrow : tensor<6x7xf32>, tensor<6x7xbf16>, tensor<6x7xbf16>
  }
})";
  PjrtExecutable exe = client_->compile(mlir);
  std::vector<float> src = uniform(42), x = uniform(42);
  std::vector<uint16_t> h(42);
  for (size_t i = 0; i < h.size(); ++i) h[i] = f32_to_bf16(src[i] * 100.0f);
  PjrtBuffer dh = client_->to_device(h.data(), DType::bf16, {6, 7});
  PjrtBuffer dx = client_->to_device(x.data(), DType::f32, {6, 7});
  EXPECT_EQ(dh.to_host<uint16_t>(), h);  // host -> device -> host keeps the bits
  PjrtBuffer* args[] = {&dh, &dx};
  std::vector<PjrtBuffer> out = exe.execute(args);
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[1].dtype(), DType::bf16);
  std::vector<float> wide = out[0].to_host<float>();
  std::vector<uint16_t> twice = out[1].to_host<uint16_t>(), narrow = out[2].to_host<uint16_t>();
  for (size_t i = 0; i < h.size(); ++i) {
    EXPECT_EQ(wide[i], bf16_to_f32(h[i])) << i;
    EXPECT_EQ(bf16_to_f32(twice[i]), 2.0f * bf16_to_f32(h[i])) << i;
    EXPECT_EQ(narrow[i], f32_to_bf16(x[i])) << i;
  }
}

// x := x + 1, five times, each run's output the next run's input: the state never leaves the
// device. The parameter is marked for aliasing, so a donated input's memory holds the output.
constexpr const char* kIncrement = R"(
module {
  func.func @main(%x: tensor<4x3xf32> {tf.aliasing_output = 0 : i32}) -> tensor<4x3xf32> {
    %one = stablehlo.constant dense<1.0> : tensor<4x3xf32>
    %0 = stablehlo.add %x, %one : tensor<4x3xf32>
    return %0 : tensor<4x3xf32>
  }
})";

TEST_F(PjrtTest, StateStaysOnDeviceWithDonation) {
  SCOPED_TRACE(seed_note());
  PjrtExecutable exe = client_->compile(kIncrement);
  std::vector<float> x0 = uniform(12);
  PjrtBuffer x = client_->to_device(x0.data(), DType::f32, {4, 3});
  const int donate[] = {0};
  for (int step = 0; step < 5; ++step) {
    PjrtBuffer* args[] = {&x};
    std::vector<PjrtBuffer> out = exe.execute(args, donate);
    ASSERT_EQ(out.size(), 1u);
    EXPECT_FALSE(x.valid()) << "a donated input is given away";
    x = std::move(out[0]);
  }
  std::vector<float> got = x.to_host<float>();
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i], x0[i] + 1.0f + 1.0f + 1.0f + 1.0f + 1.0f) << i;  // f32 steps, as run
  }
}

TEST_F(PjrtTest, UndonatedInputSurvivesAnAliasingProgram) {
  SCOPED_TRACE(seed_note());
  PjrtExecutable exe = client_->compile(kIncrement);
  std::vector<float> x0 = uniform(12);
  PjrtBuffer x = client_->to_device(x0.data(), DType::f32, {4, 3});
  PjrtBuffer y;
  for (int step = 0; step < 5; ++step) {
    PjrtBuffer* args[] = {step == 0 ? &x : &y};
    std::vector<PjrtBuffer> out = exe.execute(args);
    y = std::move(out[0]);
  }
  ASSERT_TRUE(x.valid());
  EXPECT_EQ(x.to_host<float>(), x0);  // the first input is unchanged
  std::vector<float> got = y.to_host<float>();
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i], x0[i] + 1.0f + 1.0f + 1.0f + 1.0f + 1.0f) << i;
  }
}

}  // namespace
}  // namespace lmt

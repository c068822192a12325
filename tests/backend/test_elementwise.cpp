// Elementwise kernels of the CPU backend: add, accumulate (+= onto non-zero content), scale,
// sum_squares (double accumulation, thread-count independent) and conversions between the
// floating dtypes, plus the dtype check every kernel starts with.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "backend_test_util.h"

namespace lmt {
namespace {

using test::expect_close;

template <class T>
void run_elementwise() {
  SCOPED_TRACE(sizeof(T) == 4 ? "f32" : "f64");
  CpuBackend be;
  const DType dt = dtype_of<T>();
  for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{1003}}) {
    const std::vector<double> a = test::randn(n, 1), b = test::randn(n, 2);
    std::vector<double> sum(a.size()), acc(a.size()), scaled(a.size());
    for (size_t i = 0; i < a.size(); ++i)
      sum[i] = a[i] + b[i], acc[i] = b[i] + a[i], scaled[i] = a[i] * -0.37;
    std::vector<T> x = test::cast<T>(a), y = test::cast<T>(b), out(a.size(), T(99));
    be.add(dt, out.data(), x.data(), y.data(), n);
    expect_close(out, sum, test::kTol<T>, "add");
    be.accumulate(dt, y.data(), x.data(), n);
    expect_close(y, acc, test::kTol<T>, "accumulate");
    be.scale(dt, x.data(), -0.37, n);
    expect_close(x, scaled, test::kTol<T>, "scale");
  }
}

TEST(Elementwise, AddAccumulateScaleF32) {
  run_elementwise<float>();
}
TEST(Elementwise, AddAccumulateScaleF64) {
  run_elementwise<double>();
}

// Dropout keeps exactly the elements core/rng.h's mask keeps, scaled by 1 / (1 - p), in place
// too, with any thread count; about 1 - p of them; other streams draw other masks; the stream is
// the key's xor the call's.
TEST(Elementwise, DropoutFollowsItsMask) {
  CpuBackend be;
  const int64_t n = 100003;
  const double p = 0.3;
  const std::vector<double> x = test::randn(n, 7);
  std::vector<double> out(static_cast<size_t>(n));
  const uint64_t key[2] = {42, 5}, key4[2] = {42, 4};
  be.dropout(DType::f64, out.data(), x.data(), n, p, key, 0);
  int64_t kept = 0;
  for (int64_t i = 0; i < n; ++i) {
    const bool keep = dropout_keeps(42, 5, static_cast<uint64_t>(i), p);
    kept += keep;
    ASSERT_EQ(out[i], keep ? x[i] * (1.0 / (1.0 - p)) : 0.0) << i;
  }
  EXPECT_NEAR(static_cast<double>(kept) / n, 1 - p, 5 * std::sqrt(p * (1 - p) / n));
  std::vector<float> xf = test::cast<float>(x), of(xf.size());
  be.dropout(DType::f32, of.data(), xf.data(), n, p, key4, 1);  // stream 4 ^ 1 = 5
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  be.dropout(DType::f32, xf.data(), xf.data(), n, p, key, 0);  // in place, one thread
  omp_set_num_threads(threads);
  EXPECT_EQ(xf, of);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(of[i] == 0.0f, out[i] == 0.0) << i;
  std::vector<double> other(out.size());
  be.dropout(DType::f64, other.data(), x.data(), n, p, key, 3);  // stream 6
  int64_t same = 0;
  for (int64_t i = 0; i < n; ++i) same += (other[i] == 0.0) == (out[i] == 0.0);
  EXPECT_LT(same, n * 0.7);  // independent masks agree on p^2 + (1-p)^2 = 58% of elements
  be.dropout(DType::f64, other.data(), x.data(), n, 0.0, key, 0);
  EXPECT_EQ(other, x);
}

// The device-scalar reductions: *acc += sum (of squares) in double, thread-count independent.
TEST(Elementwise, SumsAccumulateInDouble) {
  CpuBackend be;
  auto reduce = [&](bool squares, DType dt, const void* x, int64_t n, double start = 0) {
    double acc = start;  // the CPU backend's device memory is host memory
    if (squares)
      be.sum_squares(dt, &acc, x, n);
    else
      be.sum(dt, &acc, x, n);
    return acc;
  };
  EXPECT_EQ(reduce(true, DType::f32, nullptr, 0, 2.5), 2.5);
  for (int64_t n : {int64_t{1}, int64_t{13}, int64_t{100003}}) {
    const std::vector<double> x = test::randn(n, static_cast<uint64_t>(n), 0, 3.0);
    const std::vector<float> xf = test::cast<float>(x);
    double sq_d = 0, sq_f = 0, s_d = 0, abs_d = 0;  // the float input's squares are exact in double
    for (int64_t i = 0; i < n; ++i)
      sq_d += x[i] * x[i], sq_f += double{xf[i]} * xf[i], s_d += x[i], abs_d += std::abs(x[i]);
    EXPECT_NEAR(reduce(true, DType::f64, x.data(), n), sq_d, 1e-12 * sq_d) << n;
    EXPECT_NEAR(reduce(true, DType::f32, xf.data(), n), sq_f, 1e-12 * sq_f) << n;
    EXPECT_NEAR(reduce(true, DType::f32, xf.data(), n, 1.0), sq_f + 1.0, 1e-12 * sq_f) << n;
    EXPECT_NEAR(reduce(false, DType::f64, x.data(), n, -4.0), s_d - 4.0, 1e-12 * abs_d) << n;
  }
  // Bit-identical for 1 and 2 threads: fixed chunks, summed in order.
  const std::vector<double> x = test::randn(300001, 3);
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  const double one = reduce(true, DType::f64, x.data(), 300001);
  omp_set_num_threads(std::max(2, threads));
  const double two = reduce(true, DType::f64, x.data(), 300001);
  omp_set_num_threads(threads);
  EXPECT_EQ(std::memcmp(&one, &two, sizeof one), 0) << one << " vs " << two;
}

TEST(Elementwise, ConvertBetweenFloatingDtypes) {
  CpuBackend be;
  const int64_t n = 257;
  std::vector<double> d = test::randn(n, 4, 0, 10.0);
  d[0] = 0.0, d[1] = -0.0, d[2] = 65504.0, d[3] = 1e-6;
  std::vector<float> f(n), f2(n);
  std::vector<double> d2(n);
  std::vector<uint16_t> h(n), h2(n);
  be.convert(DType::f32, f.data(), DType::f64, d.data(), n);
  for (int64_t i = 0; i < n; ++i) EXPECT_EQ(f[i], static_cast<float>(d[i]));
  be.convert(DType::f64, d2.data(), DType::f32, f.data(), n);
  for (int64_t i = 0; i < n; ++i) EXPECT_EQ(d2[i], static_cast<double>(f[i]));
  be.convert(DType::bf16, h.data(), DType::f32, f.data(), n);
  for (int64_t i = 0; i < n; ++i) EXPECT_EQ(h[i], f32_to_bf16(f[i]));
  be.convert(DType::f32, f2.data(), DType::bf16, h.data(), n);
  for (int64_t i = 0; i < n; ++i) EXPECT_EQ(f2[i], bf16_to_f32(h[i]));
  be.convert(DType::f16, h.data(), DType::f64, d.data(), n);  // rounds through float
  for (int64_t i = 0; i < n; ++i) EXPECT_EQ(h[i], f32_to_f16(static_cast<float>(d[i])));
  be.convert(DType::f16, h2.data(), DType::bf16, std::vector<uint16_t>(n, 0x3f80).data(), n);
  for (int64_t i = 0; i < n; ++i) EXPECT_EQ(f16_to_f32(h2[i]), 1.0f);  // bf16 1.0 -> f16 1.0
  be.convert(DType::f64, d2.data(), DType::f16, h.data(), n);
  for (int64_t i = 0; i < n; ++i) EXPECT_EQ(d2[i], static_cast<double>(f16_to_f32(h[i])));
  be.convert(DType::f32, f2.data(), DType::f32, f.data(), n);
  EXPECT_EQ(std::memcmp(f.data(), f2.data(), n * sizeof(float)), 0);
  EXPECT_THROW(be.convert(DType::i32, f2.data(), DType::f32, f.data(), n), InternalError);
}

TEST(Elementwise, UnsupportedDtypeNamesKernelAndDtype) {
  CpuBackend be;
  std::vector<uint16_t> x(8);
  try {
    be.accumulate(DType::f16, x.data(), x.data(), 8);
    FAIL() << "accumulate on f16 should fail";
  } catch (const InternalError& e) {
    EXPECT_NE(std::string(e.what()).find("accumulate"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("f16"), std::string::npos) << e.what();
  }
  double acc = 0;
  EXPECT_THROW(be.sum_squares(DType::f16, &acc, x.data(), 8), InternalError);
  EXPECT_THROW(be.scale(DType::i32, x.data(), 2.0, 4), InternalError);
}

}  // namespace
}  // namespace lmt

// GEMM (OpenBLAS and oneDNN) and the bias kernels of the CPU backend against plain double loops:
// every transpose combination, padded leading dimensions whose padding must survive, alpha/beta,
// beta == 0 with a C full of NaN (C must not be read), K == 0, and += semantics of the bias
// kernels.
#include <cblas.h>
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "backend_test_util.h"
#include "core/dtype.h"
#include "core/rng.h"
#include "core/threads.h"
#include "test_util.h"

namespace lmt {
namespace {

using test::expect_close;

struct GemmCase {
  bool ta, tb;
  int64_t M, N, K;
  double alpha, beta;
  bool nan_c = false;  // C starts as NaN (only with beta == 0)
};

const GemmCase kGemmCases[] = {
    {false, false, 7, 13, 5, 1.0, 0.0},         {false, true, 7, 13, 5, 0.5, 1.5},
    {true, false, 7, 13, 5, -1.0, 1.0},         {true, true, 7, 13, 5, 2.0, -0.5},
    {false, true, 65, 33, 129, 1.0, 0.0, true}, {true, false, 1, 37, 64, 1.0, 1.0},
    {false, false, 31, 1, 17, 1.0, 0.0, true},  {false, false, 4, 6, 0, 1.0, 0.5},
};

template <class T>
void run_gemm_cases() {
  SCOPED_TRACE(sizeof(T) == 4 ? "f32" : "f64");
  CpuBackend be;
  uint64_t seed = 100;
  for (const GemmCase& c : kGemmCases) {
    SCOPED_TRACE(::testing::Message() << "ta=" << c.ta << " tb=" << c.tb << " M=" << c.M
                                      << " N=" << c.N << " K=" << c.K);
    const int64_t pad = 3;
    const int64_t a_rows = c.ta ? c.K : c.M, a_cols = c.ta ? c.M : c.K;
    const int64_t b_rows = c.tb ? c.N : c.K, b_cols = c.tb ? c.K : c.N;
    const int64_t lda = a_cols + pad, ldb = b_cols + pad, ldc = c.N + pad;
    const std::vector<double> A = test::randn(a_rows * lda, ++seed);
    const std::vector<double> B = test::randn(b_rows * ldb, ++seed);
    std::vector<double> C0 = test::randn(c.M * ldc, ++seed);
    if (c.nan_c)
      for (int64_t m = 0; m < c.M; ++m)
        for (int64_t n = 0; n < c.N; ++n)
          C0[m * ldc + n] = std::numeric_limits<double>::quiet_NaN();
    std::vector<double> want = C0;
    for (int64_t m = 0; m < c.M; ++m)
      for (int64_t n = 0; n < c.N; ++n) {
        double s = 0;
        for (int64_t k = 0; k < c.K; ++k)
          s += (c.ta ? A[k * lda + m] : A[m * lda + k]) * (c.tb ? B[n * ldb + k] : B[k * ldb + n]);
        want[m * ldc + n] = c.alpha * s + (c.beta == 0 ? 0.0 : c.beta * C0[m * ldc + n]);
      }
    std::vector<T> a = test::cast<T>(A), b = test::cast<T>(B), cc = test::cast<T>(C0);
    be.gemm(dtype_of<T>(), c.ta, c.tb, c.M, c.N, c.K, c.alpha, a.data(), lda, b.data(), ldb, c.beta,
            cc.data(), ldc);
    // Padding columns of C keep their values (compared exactly through the reference copy).
    expect_close(cc, want, test::kTol<T> * 10, "C");
  }
}

// Each library the f32 products may go to (LMTRAIN_CPU_GEMM), and the machine's own choice.
TEST(Gemm, MatchesReferenceF32) {
  for (const char* engine : {static_cast<const char*>(nullptr), "openblas", "onednn"}) {
    if (engine && std::string(engine) == "onednn" && !LMTRAIN_TEST_HAVE_DNNL) continue;
    SCOPED_TRACE(engine ? engine : "the machine's choice");
    test::ScopedEnv env("LMTRAIN_CPU_GEMM", engine);
    run_gemm_cases<float>();
  }
}

TEST(Gemm, AnUnknownF32LibraryIsRefusedByName) {
  test::ScopedEnv env("LMTRAIN_CPU_GEMM", "mkl");
  CpuBackend be;
  std::vector<float> a(16, 1.0f), c(16);
  try {
    be.gemm(DType::f32, false, false, 4, 4, 4, 1.0, a.data(), 4, a.data(), 4, 0.0, c.data(), 4);
    FAIL() << "LMTRAIN_CPU_GEMM=mkl should be refused";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("LMTRAIN_CPU_GEMM=mkl"), std::string::npos) << e.what();
  }
  EXPECT_NE(be.kernels().find("f32: mkl (LMTRAIN_CPU_GEMM)"), std::string::npos) << be.kernels();
}
TEST(Gemm, MatchesReferenceF64) {
  run_gemm_cases<double>();
}

TEST(Gemm, CountsSecondsAndRejectsOtherDtypes) {
  CpuBackend be;
  std::vector<float> a(64 * 64, 1.0f), c(64 * 64);
  be.reset_gemm_seconds();
  EXPECT_EQ(be.gemm_seconds(), 0.0);
  be.gemm(DType::f32, false, false, 64, 64, 64, 1.0, a.data(), 64, a.data(), 64, 0.0, c.data(), 64);
  EXPECT_GT(be.gemm_seconds(), 0.0);
  EXPECT_EQ(c[5], 64.0f);
  be.reset_gemm_seconds();
  EXPECT_EQ(be.gemm_seconds(), 0.0);
  try {
    be.gemm(DType::f16, false, false, 4, 4, 4, 1.0, a.data(), 4, a.data(), 4, 0.0, c.data(), 4);
    FAIL() << "f16 gemm should fail";
  } catch (const InternalError& e) {
    EXPECT_NE(std::string(e.what()).find("gemm"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("f16"), std::string::npos) << e.what();
  }
}

// bf16 products (mixed precision): bf16 operands, f32 accumulation, the result rounded once.
// Sums of 300 products of values on a 1/16 grid are exact in f32, so C must be exactly the f64
// product rounded to bf16, with alpha, beta and either transpose. Natively (oneDNN) where the CPU
// has bf16 matrix instructions, else refused by name; emulated (f32 products) on any CPU.
TEST(Gemm, Bf16ProductsAccumulateInF32AndRoundOnce) {
  CpuBackend be;
  const std::string why = be.unsupported(DType::bf16);
  for (const bool emulated : {false, true}) {
    SCOPED_TRACE(emulated ? "emulated" : "native");
    test::ScopedEnv env("LMTRAIN_CPU_BF16", emulated ? "emulate" : nullptr);
    const int64_t M = 7, N = 33, K = 300;
    std::vector<uint16_t> c(M * N, f32_to_bf16(1.0f));
    if (!emulated && !why.empty()) {
      EXPECT_NE(why.find("AVX512-BF16"), std::string::npos) << why;
      EXPECT_THROW(be.gemm(DType::bf16, false, false, 1, 1, 1, 1.0, c.data(), 1, c.data(), 1, 0.0,
                           c.data(), 1),
                   InternalError);
      continue;
    }
    for (const bool ta : {false, true})
      for (const bool tb : {false, true}) {
        Rng r(7, ta * 2 + tb);
        std::vector<double> a(M * K), b(K * N);
        for (double& x : a) x = (static_cast<double>(r.below(33)) - 16) / 16;
        for (double& x : b) x = (static_cast<double>(r.below(33)) - 16) / 16;
        std::vector<uint16_t> ah(M * K), bh(K * N);
        for (int64_t m = 0; m < M; ++m)
          for (int64_t k = 0; k < K; ++k)
            ah[ta ? k * M + m : m * K + k] = f32_to_bf16(static_cast<float>(a[m * K + k]));
        for (int64_t k = 0; k < K; ++k)
          for (int64_t n = 0; n < N; ++n)
            bh[tb ? n * K + k : k * N + n] = f32_to_bf16(static_cast<float>(b[k * N + n]));
        std::fill(c.begin(), c.end(), f32_to_bf16(1.0f));
        be.gemm(DType::bf16, ta, tb, M, N, K, 0.5, ah.data(), ta ? M : K, bh.data(), tb ? K : N,
                2.0, c.data(), N);
        for (int64_t m = 0; m < M; ++m)
          for (int64_t n = 0; n < N; ++n) {
            double want = 2.0;
            for (int64_t k = 0; k < K; ++k) want += 0.5 * a[m * K + k] * b[k * N + n];
            ASSERT_EQ(c[m * N + n], f32_to_bf16(static_cast<float>(want)))
                << ta << tb << " at " << m << "," << n << ": want " << want << ", got "
                << bf16_to_f32(c[m * N + n]);
          }
      }
  }
}

template <class T>
void run_bias() {
  SCOPED_TRACE(sizeof(T) == 4 ? "f32" : "f64");
  CpuBackend be;
  for (auto [N, O] : {std::pair<int64_t, int64_t>{7, 13}, {300, 131}, {1, 1}}) {
    const std::vector<double> y0 = test::randn(N * O, 1), bias = test::randn(O, 2);
    const std::vector<double> db0 = test::randn(O, 3), dy = test::randn(N * O, 4);
    std::vector<double> want_y = y0, want_db = db0;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t o = 0; o < O; ++o) want_y[n * O + o] += bias[o], want_db[o] += dy[n * O + o];
    std::vector<T> y = test::cast<T>(y0), b = test::cast<T>(bias), db = test::cast<T>(db0);
    std::vector<T> g = test::cast<T>(dy);
    be.add_bias(dtype_of<T>(), y.data(), b.data(), N, O);
    be.bias_backward(dtype_of<T>(), db.data(), g.data(), N, O);  // += onto non-zero db
    expect_close(y, want_y, test::kTol<T>, "add_bias");
    expect_close(db, want_db, test::kTol<T>, "bias_backward");
  }
}

TEST(Bias, AddAndBackwardAccumulateF32) {
  run_bias<float>();
}
TEST(Bias, AddAndBackwardAccumulateF64) {
  run_bias<double>();
}

TEST(Bias, BackwardIsIndependentOfThreadCount) {
  CpuBackend be;
  const int64_t N = 1000, O = 300;
  const std::vector<float> dy = test::cast<float>(test::randn(N * O, 5));
  std::vector<float> one(O, 0.5f), two(O, 0.5f);
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  be.bias_backward(DType::f32, one.data(), dy.data(), N, O);
  omp_set_num_threads(std::max(2, threads));
  be.bias_backward(DType::f32, two.data(), dy.data(), N, O);
  omp_set_num_threads(threads);
  EXPECT_EQ(std::memcmp(one.data(), two.data(), O * sizeof(float)), 0);
}

// train.threads reaches OpenBLAS through set_threads alone: the CPU backend's GEMM follows it.
TEST(Gemm, BlasFollowsTheThreadSetting) {
  CpuBackend be;
  std::vector<float> a(64 * 64, 1.0f), c(64 * 64);
  const int before = thread_count();
  for (int n : {1, 2}) {
    set_threads(n);
    be.gemm(DType::f32, false, false, 64, 64, 64, 1.0, a.data(), 64, a.data(), 64, 0.0, c.data(),
            64);
    EXPECT_EQ(openblas_get_num_threads(), n);
    EXPECT_EQ(c[0], 64.0f);
  }
  set_threads(before);
}

}  // namespace
}  // namespace lmt

// Dense algebra of the CPU backend: GEMM through OpenBLAS (row-major cblas), and the bias add and
// its backward. bias_backward reduces over rows by columns: each thread owns a slice of columns and
// walks the rows in order, so the result does not depend on the thread count.
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <string>
#include <type_traits>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_dispatch.h"
#include "core/threads.h"

namespace lmt {

namespace {

bool fits_int(int64_t v) {
  return v >= 0 && v <= INT_MAX;
}

}  // namespace

// OpenBLAS picks its core kernels when it loads: the CPU's own, unless OPENBLAS_CORETYPE names
// others (some machines set it, holding OpenBLAS to AVX2 kernels on an AVX-512 CPU).
std::string CpuBackend::kernels() const {
  std::string s = std::string(openblas_get_config()) + "; core " + openblas_get_corename();
  const char* forced = std::getenv("OPENBLAS_CORETYPE");
  s += forced && *forced ? std::string(" (set by OPENBLAS_CORETYPE=") + forced + ")"
                         : " (this CPU's; OPENBLAS_CORETYPE unset)";
  return s;
}

void CpuBackend::gemm(DType dt, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                      double alpha, const void* A, int64_t lda, const void* B, int64_t ldb,
                      double beta, void* C, int64_t ldc) {
  LMT_CHECK(
      fits_int(M) && fits_int(N) && fits_int(K) && fits_int(lda) && fits_int(ldb) && fits_int(ldc),
      "CpuBackend::gemm: sizes must fit in a BLAS int");
  LMT_CHECK(ldc >= std::max<int64_t>(N, 1), "CpuBackend::gemm: ldc < N");
  LMT_CHECK(lda >= std::max<int64_t>(trans_a ? M : K, 1), "CpuBackend::gemm: lda too small");
  LMT_CHECK(ldb >= std::max<int64_t>(trans_b ? K : N, 1), "CpuBackend::gemm: ldb too small");
  if (M == 0 || N == 0) return;
  const auto t0 = std::chrono::steady_clock::now();
  if (const int n = thread_count(); n != blas_threads_) {  // train.threads, as set_threads set it
    openblas_set_num_threads(n);
    blas_threads_ = n;
  }
  const CBLAS_TRANSPOSE ta = trans_a ? CblasTrans : CblasNoTrans;
  const CBLAS_TRANSPOSE tb = trans_b ? CblasTrans : CblasNoTrans;
  const int m = static_cast<int>(M), n = static_cast<int>(N), k = static_cast<int>(K);
  cpu::dispatch_float(dt, "gemm", [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, float>) {
      cblas_sgemm(CblasRowMajor, ta, tb, m, n, k, static_cast<float>(alpha),
                  static_cast<const float*>(A), static_cast<int>(lda), static_cast<const float*>(B),
                  static_cast<int>(ldb), static_cast<float>(beta), static_cast<float*>(C),
                  static_cast<int>(ldc));
    } else {
      cblas_dgemm(CblasRowMajor, ta, tb, m, n, k, alpha, static_cast<const double*>(A),
                  static_cast<int>(lda), static_cast<const double*>(B), static_cast<int>(ldb), beta,
                  static_cast<double*>(C), static_cast<int>(ldc));
    }
  });
  gemm_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// out[N,O] += bias[O]
void CpuBackend::add_bias(DType dt, void* out, const void* bias, int64_t N, int64_t O) {
  cpu::dispatch_float(dt, "add_bias", [&](auto tag) {
    using T = decltype(tag);
    T* y = static_cast<T*>(out);
    const T* b = static_cast<const T*>(bias);
#pragma omp parallel for schedule(static) if (N * O >= cpu::kParallelMin)
    for (int64_t n = 0; n < N; ++n) {
      T* row = y + n * O;
      for (int64_t o = 0; o < O; ++o) row[o] += b[o];
    }
  });
}

// dbias[O] += sum over n of dout[N,O], accumulated in double per column in row order.
void CpuBackend::bias_backward(DType dt, void* dbias, const void* dout, int64_t N, int64_t O) {
  cpu::dispatch_float(dt, "bias_backward", [&](auto tag) {
    using T = decltype(tag);
    T* db = static_cast<T*>(dbias);
    const T* dy = static_cast<const T*>(dout);
    constexpr int64_t kCols = 64;  // columns per work item
    const int64_t items = (O + kCols - 1) / kCols;
#pragma omp parallel for schedule(static) if (N * O >= cpu::kParallelMin)
    for (int64_t it = 0; it < items; ++it) {
      const int64_t c0 = it * kCols, nc = std::min(kCols, O - c0);
      double acc[kCols] = {};
      for (int64_t n = 0; n < N; ++n) {
        const T* row = dy + n * O + c0;
        for (int64_t c = 0; c < nc; ++c) acc[c] += static_cast<double>(row[c]);
      }
      for (int64_t c = 0; c < nc; ++c) db[c0 + c] = static_cast<T>(db[c0 + c] + acc[c]);
    }
  });
}

}  // namespace lmt

// Private helpers of the CPU backend's kernels: the bf16 element type, the dtype dispatch each
// kernel starts with, the
// size below which kernels stay single-threaded, branch-free float exp/tanh that loops can
// vectorise (glibc's expf/tanhf are scalar calls), a register-blocked tile GEMM, and target
// clones for the compute-bound loops.
// The default build targets baseline x86-64; LMT_CLONES compiles a function also for x86-64-v3
// (AVX2+FMA) and v4 (AVX-512) and picks one at load time, so one binary is fast everywhere.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>

#include "core/dtype.h"
#include "core/error.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(__linux__)
#define LMT_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define LMT_CLONES
#endif
// Everything a cloned function calls in its hot loop must inline into it to get the clone's ISA.
#define LMT_INLINE inline __attribute__((always_inline))

namespace lmt::cpu {

// bf16 as the kernels hold it: storage only. It widens to float exactly (its bits are the top
// half of a float's) and rounds from float to nearest even (NaN kept quiet), as f32_to_bf16 does,
// branch-free so that loops over it vectorise. Kernels compute in compute_t<T> (float for bf16)
// and round once per stored element.
struct bf16 {
  uint16_t bits;
  bf16() = default;
  LMT_INLINE bf16(float f)
      : bits(round(f)) {}  // NOLINT(google-explicit-constructor): a store rounds
  LMT_INLINE bf16(double d) : bf16(static_cast<float>(d)) {}  // NOLINT: as from float
  LMT_INLINE explicit bf16(int i) : bf16(static_cast<float>(i)) {}
  // A store of a float writes the rounded bits in place: no bf16 temporary, which `omp simd` loops
  // would copy as an aggregate (GCC then does not vectorise them).
  LMT_INLINE bf16& operator=(float f) {
    bits = round(f);
    return *this;
  }
  LMT_INLINE bf16& operator=(double d) { return *this = static_cast<float>(d); }
  LMT_INLINE static uint16_t round(float f) {
    uint32_t u;
    std::memcpy(&u, &f, sizeof u);
    const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    const uint32_t quiet = (u >> 16) | 0x40u;
    return static_cast<uint16_t>((u & 0x7fffffffu) > 0x7f800000u ? quiet : rounded);
  }
  LMT_INLINE operator float() const {  // NOLINT(google-explicit-constructor): exact
    const uint32_t u = static_cast<uint32_t>(bits) << 16;
    float f;
    std::memcpy(&f, &u, sizeof f);
    return f;
  }
};
static_assert(sizeof(bf16) == 2 && std::is_trivially_copyable_v<bf16>);

// The type a kernel computes in for element type T, and its saved statistics' type (rstd, mean,
// lse, losses): float for bf16 (mixed precision keeps statistics in f32), else T itself.
template <class T>
using compute_t = std::conditional_t<std::is_same_v<T, bf16>, float, T>;

// Calls f(T{}) with T = float for f32 and double for f64; any other dtype is a bug in the caller.
template <class F>
decltype(auto) dispatch_float(DType dt, const char* kernel, F&& f) {
  if (dt == DType::f32) return f(float{});
  if (dt == DType::f64) return f(double{});
  check_failed("dt == f32 || dt == f64", __FILE__, __LINE__,
               std::string("CpuBackend::") + kernel + ": dtype " + std::string(dtype_name(dt)) +
                   " is not supported (f32 or f64)");
}

// As dispatch_float, and T = bf16 for bf16: the kernels of a mixed-precision step.
template <class F>
decltype(auto) dispatch_compute(DType dt, const char* kernel, F&& f) {
  if (dt == DType::bf16) return f(bf16{});
  if (dt == DType::f32) return f(float{});
  if (dt == DType::f64) return f(double{});
  check_failed("dt == bf16 || dt == f32 || dt == f64", __FILE__, __LINE__,
               std::string("CpuBackend::") + kernel + ": dtype " + std::string(dtype_name(dt)) +
                   " is not supported (bf16, f32 or f64)");
}

// Below this many elements a kernel runs on the calling thread: waking the team costs more than
// the work (and a team on a busy machine can wait a whole time slice for a descheduled member).
constexpr int64_t kParallelMin = int64_t{1} << 15;

// Work items of the cloned elementwise loops (LMT_CLONES): 16K elements, 64 KiB of f32 each.
constexpr int64_t kChunk = int64_t{1} << 14;

// Calls f(i0, i1) for the chunks [i0, i1) of [0, n), `chunk` long (the last one shorter), in a
// static schedule over the threads where `parallel`: each call runs a cloned loop over its chunk.
template <class F>
void for_chunks(int64_t n, int64_t chunk, bool parallel, F&& f) {
#pragma omp parallel for schedule(static) if (parallel)
  for (int64_t i = 0; i < n; i += chunk) f(i, std::min(n, i + chunk));
}

// exp(x) for float, ~1 ulp on [-87, 88]: exp(x) = 2^n * exp(r) with |r| <= ln2/2 and the Cephes
// polynomial for exp(r). Saturates above 88, returns 0 below -87 (so exp(-inf) = 0).
LMT_INLINE float fast_exp(float x) {
  // Branch-free (min/max and a select) so that loops calling it vectorise.
  const float xc = std::min(std::max(x, -87.0f), 88.0f);
  const float fn = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;  // round to nearest
  float r = xc - fn * 0.693359375f;
  r = r - fn * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float y = p * (r * r) + r + 1.0f;
  const int32_t bits = (static_cast<int32_t>(fn) + 127) << 23;
  float two_n;
  std::memcpy(&two_n, &bits, sizeof two_n);
  return x < -87.0f ? 0.0f : y * two_n;
}

// tanh(x) for float, a few ulp: Cephes' odd polynomial for |x| < 0.625, else 1 - 2/(exp(2|x|)+1).
LMT_INLINE float fast_tanh(float x) {
  const float ax = std::fabs(x);
  const float z = x * x;
  const float small = ((((-5.70498872745e-3f * z + 2.06390887954e-2f) * z - 5.37397155531e-2f) * z +
                        1.33314422036e-1f) *
                           z -
                       3.33332819422e-1f) *
                          z * x +
                      x;
  const float e = fast_exp(2.0f * std::min(ax, 44.0f));
  const float big = 1.0f - 2.0f / (e + 1.0f);
  return ax < 0.625f ? small : std::copysign(big, x);
}

// How attention_backward splits its work: `fused` gives each thread whole (sequence, kv head)
// pairs and computes dq, dk, dv in one sweep; `split` computes dk/dv per key tile, then dq per
// query tile (one more sweep, more parallelism). Both give the same bits; `automatic` picks by
// shape and thread count. A hook for tests and benchmarks.
enum class AttentionBackwardMode { automatic, fused, split };
void set_attention_backward_mode(AttentionBackwardMode mode);

// ---- tile GEMM for the kernels' own small products (attention tiles) ----
// C[M,N] (+)= A[M,K] B[K,N], row-major with leading dimensions, N a multiple of kTileGrain<T>.
// Accumulators for 4 rows x up to 4 grains (64 floats: 16 AVX-512 registers) stay in registers
// over the whole K loop. Always inlined, so it takes the ISA of the (cloned) caller.
template <class T>
constexpr int kTileGrain = 64 / static_cast<int>(sizeof(T));  // one cache line of T

template <class T, int R, int W, bool Acc>
LMT_INLINE void tile_micro(T* C, int64_t ldc, const T* A, int64_t lda, const T* B, int64_t ldb,
                           int K) {
  T acc[R][W];
  for (int r = 0; r < R; ++r)
    for (int w = 0; w < W; ++w) acc[r][w] = Acc ? C[r * ldc + w] : T(0);
  for (int k = 0; k < K; ++k) {
    const T* b = B + k * ldb;
    for (int r = 0; r < R; ++r) {
      const T a = A[r * lda + k];
      for (int w = 0; w < W; ++w) acc[r][w] += a * b[w];
    }
  }
  for (int r = 0; r < R; ++r)
    for (int w = 0; w < W; ++w) C[r * ldc + w] = acc[r][w];
}

// Columns [0, w) of R rows, w in {1, 2, 3, 4} grains.
template <class T, int R, bool Acc>
LMT_INLINE void tile_rows(int w, T* C, int64_t ldc, const T* A, int64_t lda, const T* B,
                          int64_t ldb, int K) {
  constexpr int G = kTileGrain<T>;
  if (w == G) return tile_micro<T, R, G, Acc>(C, ldc, A, lda, B, ldb, K);
  if (w == 2 * G) return tile_micro<T, R, 2 * G, Acc>(C, ldc, A, lda, B, ldb, K);
  if (w == 3 * G) return tile_micro<T, R, 3 * G, Acc>(C, ldc, A, lda, B, ldb, K);
  tile_micro<T, R, 4 * G, Acc>(C, ldc, A, lda, B, ldb, K);
}

template <class T, bool Acc>
LMT_INLINE void tile_gemm(T* C, int64_t ldc, const T* A, int64_t lda, const T* B, int64_t ldb,
                          int M, int N, int K) {
  constexpr int G = kTileGrain<T>;
  for (int n0 = 0; n0 < N; n0 += 4 * G) {
    const int w = std::min(4 * G, N - n0);
    int m = 0;
    for (; m + 4 <= M; m += 4)
      tile_rows<T, 4, Acc>(w, C + m * ldc + n0, ldc, A + m * lda, lda, B + n0, ldb, K);
    for (; m < M; ++m)
      tile_rows<T, 1, Acc>(w, C + m * ldc + n0, ldc, A + m * lda, lda, B + n0, ldb, K);
  }
}

LMT_INLINE float exp_t(float x) {
  return fast_exp(x);
}
LMT_INLINE double exp_t(double x) {
  return std::exp(x);
}
LMT_INLINE float tanh_t(float x) {
  return fast_tanh(x);
}
LMT_INLINE double tanh_t(double x) {
  return std::tanh(x);
}

}  // namespace lmt::cpu

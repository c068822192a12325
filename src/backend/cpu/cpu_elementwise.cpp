// Elementwise kernels of the CPU backend: add, accumulate, scale, dropout, sums (of squares) and
// dtype conversion. The sums split x into fixed-size chunks (independent of the thread count),
// sum each in double with eight fixed lanes, then add the chunk sums in order: bit-identical
// results for any thread count.
#include <algorithm>
#include <array>
#include <cstring>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_dispatch.h"
#include "core/rng.h"

namespace lmt {

// out[n] = a[n] + b[n]
void CpuBackend::add(DType dt, void* out, const void* a, const void* b, int64_t n) {
  cpu::dispatch_compute(dt, "add", [&](auto tag) {
    using T = decltype(tag);
    T* y = static_cast<T*>(out);
    const T* x0 = static_cast<const T*>(a);
    const T* x1 = static_cast<const T*>(b);
#pragma omp parallel for simd schedule(static) if (n >= cpu::kParallelMin)
    for (int64_t i = 0; i < n; ++i) y[i] = x0[i] + x1[i];
  });
}

// y[n] += x[n]
void CpuBackend::accumulate(DType dt, void* y, const void* x, int64_t n) {
  cpu::dispatch_compute(dt, "accumulate", [&](auto tag) {
    using T = decltype(tag);
    T* yy = static_cast<T*>(y);
    const T* xx = static_cast<const T*>(x);
#pragma omp parallel for simd schedule(static) if (n >= cpu::kParallelMin)
    for (int64_t i = 0; i < n; ++i) yy[i] = yy[i] + xx[i];
  });
}

// x[n] *= s
void CpuBackend::scale(DType dt, void* x, double s, int64_t n) {
  cpu::dispatch_compute(dt, "scale", [&](auto tag) {
    using T = decltype(tag);
    T* xx = static_cast<T*>(x);
    const cpu::compute_t<T> f = static_cast<cpu::compute_t<T>>(s);
#pragma omp parallel for simd schedule(static) if (n >= cpu::kParallelMin)
    for (int64_t i = 0; i < n; ++i) xx[i] = xx[i] * f;
  });
}

// out[n] = x[n] / (1 - p) or 0, by mask (key[0], key[1] ^ stream): one Philox call per 4
// elements.
void CpuBackend::dropout(DType dt, void* out, const void* x, int64_t n, double p,
                         const uint64_t* key, uint64_t stream_of_key) {
  const uint64_t seed = key[0], stream = key[1] ^ stream_of_key;
  cpu::dispatch_compute(dt, "dropout", [&](auto tag) {
    using T = decltype(tag);
    using C = cpu::compute_t<T>;
    T* y = static_cast<T*>(out);
    const T* xx = static_cast<const T*>(x);
    const uint32_t threshold = dropout_threshold(p);
    const C keep_scale = static_cast<C>(1.0 / (1.0 - p));
    const int64_t groups = (n + 3) / 4;
#pragma omp parallel for schedule(static) if (n >= cpu::kParallelMin)
    for (int64_t g = 0; g < groups; ++g) {
      const std::array<uint32_t, 4> r = philox4x32(seed, stream, static_cast<uint64_t>(g));
      for (int64_t j = 0; j < 4 && 4 * g + j < n; ++j) {
        const int64_t i = 4 * g + j;
        y[i] = r[static_cast<size_t>(j)] >= threshold ? xx[i] * keep_scale : C(0);
      }
    }
  });
}

namespace {

// Sum of f(x[i]) in double over fixed chunks of x, each with eight fixed lanes, chunk sums added
// in order: the same bits for any thread count.
template <class T, class F>
double chunked_sum(const T* x, int64_t n, F f) {
  constexpr int64_t kChunk = int64_t{1} << 15;
  constexpr int kLanes = 8;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  std::vector<double> partial(static_cast<size_t>(chunks));
#pragma omp parallel for schedule(static) if (chunks > 1)
  for (int64_t c = 0; c < chunks; ++c) {
    const T* p = x + c * kChunk;
    const int64_t len = std::min(kChunk, n - c * kChunk);
    double lane[kLanes] = {};
    int64_t i = 0;
    for (; i + kLanes <= len; i += kLanes)
      for (int l = 0; l < kLanes; ++l) lane[l] += f(static_cast<double>(p[i + l]));
    for (; i < len; ++i) lane[0] += f(static_cast<double>(p[i]));
    double s = 0;
    for (int l = 0; l < kLanes; ++l) s += lane[l];
    partial[static_cast<size_t>(c)] = s;
  }
  double total = 0;
  for (double s : partial) total += s;
  return total;
}

}  // namespace

void CpuBackend::sum(DType dt, double* acc, const void* x, int64_t n) {
  *acc += cpu::dispatch_compute(dt, "sum", [&](auto tag) {
    using T = decltype(tag);
    return chunked_sum(static_cast<const T*>(x), n, [](double v) { return v; });
  });
}

void CpuBackend::sum_squares(DType dt, double* acc, const void* x, int64_t n) {
  *acc += cpu::dispatch_compute(dt, "sum_squares", [&](auto tag) {
    using T = decltype(tag);
    return chunked_sum(static_cast<const T*>(x), n, [](double v) { return v * v; });
  });
}

namespace {

bool is_float_dtype(DType t) {
  return t == DType::f32 || t == DType::f64 || t == DType::bf16 || t == DType::f16;
}

}  // namespace

// dst[n] (dst_dt) = src[n] (src_dt), between f32, f64, bf16 and f16.
namespace {

// f32 to bf16, rounded to nearest even as f32_to_bf16 does (cpu::bf16's branch-free rounding):
// cloned for AVX2 and AVX-512, since the mixed-precision step rounds every weight once per step.
LMT_CLONES void to_bf16_range(cpu::bf16* __restrict d, const float* __restrict s, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) d[i] = s[i];
}

}  // namespace

void CpuBackend::convert(DType dst_dt, void* dst, DType src_dt, const void* src, int64_t n) {
  LMT_CHECK(is_float_dtype(dst_dt) && is_float_dtype(src_dt),
            std::string("CpuBackend::convert: unsupported dtypes ") +
                std::string(dtype_name(src_dt)) + " -> " + std::string(dtype_name(dst_dt)));
  if (n <= 0) return;
  if (dst_dt == src_dt) {
    std::memmove(dst, src, static_cast<size_t>(n) * dtype_size(dst_dt));
    return;
  }
  if (src_dt == DType::f32 && dst_dt == DType::bf16) {  // the hot pair (weights to bf16)
    const float* s = static_cast<const float*>(src);
    auto* d = static_cast<cpu::bf16*>(dst);
    cpu::for_chunks(n, cpu::kChunk, n >= cpu::kParallelMin,
                    [&](int64_t i0, int64_t i1) { to_bf16_range(d + i0, s + i0, i1 - i0); });
    return;
  }
  if (src_dt == DType::bf16 && dst_dt == DType::f32) {  // a bf16 frozen base, every layer
    const uint16_t* s = static_cast<const uint16_t*>(src);
    uint32_t* d = static_cast<uint32_t*>(dst);  // bf16 is the top half of an f32's bits
#pragma omp parallel for simd schedule(static) if (n >= cpu::kParallelMin)
    for (int64_t i = 0; i < n; ++i) d[i] = static_cast<uint32_t>(s[i]) << 16;
    return;
  }
#pragma omp parallel for schedule(static) if (n >= cpu::kParallelMin)
  for (int64_t i = 0; i < n; ++i) store_element(dst_dt, dst, i, load_element(src_dt, src, i));
}

}  // namespace lmt

// RMSNorm and LayerNorm, forward and backward, for the CPU backend. Row statistics accumulate in
// double and are rounded once to their saved type S (T's, or float for bf16), so forward and
// backward use the same saved value. The weight
// gradients reduce over rows by column slices (each thread owns columns and walks rows in order):
// deterministic for any thread count, at the price of a second read of x and dout.
#include <algorithm>
#include <cmath>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_dispatch.h"

namespace lmt {

namespace {

constexpr int64_t kCols = 64;  // columns per work item of the weight-gradient pass

// For each column c: acc[c] = sum over rows n of f(n, c), rows in order; then emit(c, acc[c]).
template <class F, class E>
void column_reduce(int64_t N, int64_t C, F f, E emit) {
  const int64_t slices = (C + kCols - 1) / kCols;
#pragma omp parallel for schedule(static) if (N * C >= cpu::kParallelMin)
  for (int64_t s = 0; s < slices; ++s) {
    const int64_t c0 = s * kCols, nc = std::min(kCols, C - c0);
    double acc[kCols] = {};
    for (int64_t n = 0; n < N; ++n)
      for (int64_t c = 0; c < nc; ++c) acc[c] += f(n, c0 + c);
    for (int64_t c = 0; c < nc; ++c) emit(c0 + c, acc[c]);
  }
}

// RMSNorm over `rows` rows of D values, row i starting at offset(i) in x and out:
// out = x * rstd * (w_offset + w); rstd[i] = 1 / sqrt(mean(x^2) + eps).
template <class T, class S, class Offset>
void rms_forward_rows(T* y, S* rs, const T* x, const T* w, int64_t rows, int64_t D, Offset offset,
                      double eps, double w_offset) {
#pragma omp parallel for schedule(static) if (rows * D >= cpu::kParallelMin)
  for (int64_t i = 0; i < rows; ++i) {
    const int64_t off = offset(i);
    const T* xr = x + off;
    double ss = 0;
    for (int64_t c = 0; c < D; ++c) ss += static_cast<double>(xr[c]) * xr[c];
    const S r = static_cast<S>(1.0 / std::sqrt(ss / static_cast<double>(D) + eps));
    rs[i] = r;
    const double rd = r;
    T* yr = y + off;
    for (int64_t c = 0; c < D; ++c) yr[c] = static_cast<T>(xr[c] * rd * (w_offset + w[c]));
  }
}

// Its backward: dx = r g dy - r^3 / D * x * sum(dy g x) with g = w_offset + w, added to dx or
// replacing it (then dx may be dout itself: the weight gradient dw += sum_i dy x r is reduced
// first, and each row's dx is written after its dout is read).
template <class T, class S, class Offset>
void rms_backward_rows(T* gx, T* gw, const T* dy, const T* x, const T* w, const S* rs, int64_t rows,
                       int64_t D, Offset offset, double w_offset, bool accumulate) {
  column_reduce(
      rows, D,
      [&](int64_t i, int64_t c) {
        const int64_t o = offset(i) + c;
        return static_cast<double>(dy[o]) * x[o] * static_cast<double>(rs[i]);
      },
      [&](int64_t c, double s) { gw[c] = static_cast<T>(gw[c] + s); });
#pragma omp parallel for schedule(static) if (rows * D >= cpu::kParallelMin)
  for (int64_t i = 0; i < rows; ++i) {
    const int64_t off = offset(i);
    const T* xr = x + off;
    const T* dr = dy + off;
    const double r = rs[i];
    double dot = 0;
    for (int64_t c = 0; c < D; ++c) dot += static_cast<double>(dr[c]) * (w_offset + w[c]) * xr[c];
    const double k = r * r * r * dot / static_cast<double>(D);
    T* gr = gx + off;
    for (int64_t c = 0; c < D; ++c) {
      const double g = r * (w_offset + w[c]) * dr[c] - k * xr[c];
      gr[c] = static_cast<T>(accumulate ? gr[c] + g : g);
    }
  }
}

}  // namespace

void CpuBackend::rmsnorm_forward(DType dt, void* out, void* rstd, const void* x, const void* w,
                                 int64_t N, int64_t C, double eps, double w_offset) {
  cpu::dispatch_compute(dt, "rmsnorm_forward", [&](auto tag) {
    using T = decltype(tag);
    using S = cpu::compute_t<T>;
    rms_forward_rows(
        static_cast<T*>(out), static_cast<S*>(rstd), static_cast<const T*>(x),
        static_cast<const T*>(w), N, C, [C](int64_t n) { return n * C; }, eps, w_offset);
  });
}

void CpuBackend::rmsnorm_backward(DType dt, void* dx, void* dw, const void* dout, const void* x,
                                  const void* w, const void* rstd, int64_t N, int64_t C,
                                  double w_offset) {
  cpu::dispatch_compute(dt, "rmsnorm_backward", [&](auto tag) {
    using T = decltype(tag);
    using S = cpu::compute_t<T>;
    rms_backward_rows(
        static_cast<T*>(dx), static_cast<T*>(dw), static_cast<const T*>(dout),
        static_cast<const T*>(x), static_cast<const T*>(w), static_cast<const S*>(rstd), N, C,
        [C](int64_t n) { return n * C; }, w_offset, /*accumulate=*/true);
  });
}

// The per-head RMSNorm: row (n, h) starts at n * row_stride + h * head_dim.
void CpuBackend::head_rmsnorm_forward(DType dt, void* out, void* rstd, const void* x,
                                      const void* w, int64_t N, int64_t row_stride, int heads,
                                      int head_dim, double eps, double w_offset) {
  cpu::dispatch_compute(dt, "head_rmsnorm_forward", [&](auto tag) {
    using T = decltype(tag);
    using S = cpu::compute_t<T>;
    const int64_t D = head_dim;
    rms_forward_rows(
        static_cast<T*>(out), static_cast<S*>(rstd), static_cast<const T*>(x),
        static_cast<const T*>(w), N * heads, D,
        [=](int64_t i) { return (i / heads) * row_stride + (i % heads) * D; }, eps, w_offset);
  });
}

void CpuBackend::head_rmsnorm_backward(DType dt, void* dx, void* dw, const void* dout,
                                       const void* x, const void* w, const void* rstd, int64_t N,
                                       int64_t row_stride, int heads, int head_dim,
                                       double w_offset) {
  cpu::dispatch_compute(dt, "head_rmsnorm_backward", [&](auto tag) {
    using T = decltype(tag);
    using S = cpu::compute_t<T>;
    const int64_t D = head_dim;
    rms_backward_rows(
        static_cast<T*>(dx), static_cast<T*>(dw), static_cast<const T*>(dout),
        static_cast<const T*>(x), static_cast<const T*>(w), static_cast<const S*>(rstd), N * heads,
        D, [=](int64_t i) { return (i / heads) * row_stride + (i % heads) * D; }, w_offset,
        /*accumulate=*/false);
  });
}

// out[N,C] = (x - mean) * rstd * w + b; mean[N], rstd[N] = 1 / sqrt(biased var + eps).
void CpuBackend::layernorm_forward(DType dt, void* out, void* mean, void* rstd, const void* x,
                                   const void* w, const void* b, int64_t N, int64_t C, double eps) {
  cpu::dispatch_compute(dt, "layernorm_forward", [&](auto tag) {
    using T = decltype(tag);
    using S = cpu::compute_t<T>;
    T* y = static_cast<T*>(out);
    S* mu = static_cast<S*>(mean);
    S* rs = static_cast<S*>(rstd);
    const T* xx = static_cast<const T*>(x);
    const T* ww = static_cast<const T*>(w);
    const T* bb = static_cast<const T*>(b);
#pragma omp parallel for schedule(static) if (N * C >= cpu::kParallelMin)
    for (int64_t n = 0; n < N; ++n) {
      const T* xr = xx + n * C;
      double s = 0;
      for (int64_t c = 0; c < C; ++c) s += xr[c];
      const double m = s / static_cast<double>(C);
      double v = 0;
      for (int64_t c = 0; c < C; ++c) v += (xr[c] - m) * (xr[c] - m);
      const S mt = static_cast<S>(m);
      const S rt = static_cast<S>(1.0 / std::sqrt(v / static_cast<double>(C) + eps));
      mu[n] = mt;
      rs[n] = rt;
      const double md = mt, rd = rt;
      T* yr = y + n * C;
      for (int64_t c = 0; c < C; ++c)
        yr[c] = static_cast<T>((xr[c] - md) * rd * ww[c] + static_cast<double>(bb[c]));
    }
  });
}

// xhat = (x - mean) rstd, g = dy w: dx += rstd (g - mean(g) - xhat mean(g xhat));
// dw += sum_n dy xhat; db += sum_n dy.
void CpuBackend::layernorm_backward(DType dt, void* dx, void* dw, void* db, const void* dout,
                                    const void* x, const void* w, const void* mean,
                                    const void* rstd, int64_t N, int64_t C) {
  cpu::dispatch_compute(dt, "layernorm_backward", [&](auto tag) {
    using T = decltype(tag);
    using S = cpu::compute_t<T>;
    T* gx = static_cast<T*>(dx);
    T* gw = static_cast<T*>(dw);
    T* gb = static_cast<T*>(db);
    const T* dy = static_cast<const T*>(dout);
    const T* xx = static_cast<const T*>(x);
    const T* ww = static_cast<const T*>(w);
    const S* mu = static_cast<const S*>(mean);
    const S* rs = static_cast<const S*>(rstd);
#pragma omp parallel for schedule(static) if (N * C >= cpu::kParallelMin)
    for (int64_t n = 0; n < N; ++n) {
      const T* xr = xx + n * C;
      const T* dr = dy + n * C;
      const double m = mu[n], r = rs[n];
      double sg = 0, sgx = 0;
      for (int64_t c = 0; c < C; ++c) {
        const double g = static_cast<double>(dr[c]) * ww[c];
        sg += g;
        sgx += g * ((xr[c] - m) * r);
      }
      const double mg = sg / static_cast<double>(C), mgx = sgx / static_cast<double>(C);
      T* gr = gx + n * C;
      for (int64_t c = 0; c < C; ++c) {
        const double xhat = (xr[c] - m) * r;
        const double g = static_cast<double>(dr[c]) * ww[c];
        gr[c] = static_cast<T>(gr[c] + r * (g - mg - xhat * mgx));
      }
    }
    column_reduce(
        N, C,
        [&](int64_t n, int64_t c) {
          return static_cast<double>(dy[n * C + c]) *
                 ((xx[n * C + c] - static_cast<double>(mu[n])) * static_cast<double>(rs[n]));
        },
        [&](int64_t c, double s) { gw[c] = static_cast<T>(gw[c] + s); });
    column_reduce(
        N, C, [&](int64_t n, int64_t c) { return static_cast<double>(dy[n * C + c]); },
        [&](int64_t c, double s) { gb[c] = static_cast<T>(gb[c] + s); });
  });
}

}  // namespace lmt

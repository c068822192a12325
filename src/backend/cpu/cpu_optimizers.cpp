// CpuBackend's steps of Lion, SGD with momentum and Muon (backend.h says what each computes).
// As adamw_step: per-step factors formed before (backend.h), per-element arithmetic in f32, the
// gradient scale read from the device scalar clip_scale wrote, and no write at all when it is not
// finite.
#include <algorithm>
#include <cmath>

#include "backend/cpu/cpu_backend.h"

namespace lmt {

namespace {

constexpr int64_t kParallelFrom = 32768;  // elements; below this one thread is faster

}  // namespace

void CpuBackend::lion_step(float* p, const float* g, float* m, int64_t n, const float* factors,
                           double beta1, double beta2, bool with_decay, const double* grad_scale) {
  if (!std::isfinite(*grad_scale)) return;
  const float gs = static_cast<float>(*grad_scale);
  const float decay = with_decay ? factors[0] : 1.0f, step = factors[1];
  const float b1 = static_cast<float>(beta1), c1 = static_cast<float>(1.0 - beta1);
  const float b2 = static_cast<float>(beta2), c2 = static_cast<float>(1.0 - beta2);
#pragma omp parallel for schedule(static) if (n >= kParallelFrom)
  for (int64_t i = 0; i < n; ++i) {
    const float gi = g[i] * gs;
    const float c = b1 * m[i] + c1 * gi;
    const float sign = c > 0 ? 1.0f : c < 0 ? -1.0f : 0.0f;
    p[i] = p[i] * decay - step * sign;
    m[i] = b2 * m[i] + c2 * gi;
  }
}

void CpuBackend::sgd_step(float* p, const float* g, float* buf, int64_t n, const float* lr,
                          double momentum, bool nesterov, double weight_decay,
                          const double* grad_scale) {
  if (!std::isfinite(*grad_scale)) return;
  const float gs = static_cast<float>(*grad_scale), wd = static_cast<float>(weight_decay);
  const float mu = static_cast<float>(momentum), step = *lr;
#pragma omp parallel for schedule(static) if (n >= kParallelFrom)
  for (int64_t i = 0; i < n; ++i) {
    const float d = g[i] * gs + wd * p[i];
    const float b = mu * buf[i] + d;
    buf[i] = b;
    p[i] -= step * (nesterov ? d + mu * b : b);
  }
}

void CpuBackend::muon_momentum(float* u, float* buf, const float* g, int64_t n, double beta,
                               bool nesterov, const double* grad_scale) {
  const bool finite = std::isfinite(*grad_scale);
  const float gs = static_cast<float>(*grad_scale);
  const float b = static_cast<float>(beta), c = static_cast<float>(1.0 - beta);
#pragma omp parallel for schedule(static) if (n >= kParallelFrom)
  for (int64_t i = 0; i < n; ++i) {
    const float gi = g[i] * gs;
    const float mi = b * buf[i] + c * gi;
    if (finite) buf[i] = mi;
    u[i] = nesterov ? c * gi + b * mi : mi;
  }
}

void CpuBackend::scale_by_rnorm(float* x, int64_t n, const double* sum_squares, double eps) {
  const float s = static_cast<float>(1.0 / (std::sqrt(*sum_squares) + eps));
#pragma omp parallel for schedule(static) if (n >= kParallelFrom)
  for (int64_t i = 0; i < n; ++i) x[i] *= s;
}

void CpuBackend::muon_apply(float* p, int64_t ldp, const float* x, int64_t rows, int64_t cols,
                            const float* factors, bool with_decay, const double* grad_scale) {
  if (!std::isfinite(*grad_scale)) return;
  const float decay = with_decay ? factors[0] : 1.0f, step = factors[1];
#pragma omp parallel for schedule(static) if (rows * cols >= kParallelFrom)
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      p[r * ldp + c] = p[r * ldp + c] * decay - step * x[r * cols + c];
}

void CpuBackend::copy_2d(float* dst, int64_t ldd, const float* src, int64_t lds, int64_t rows,
                         int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) std::copy(src + r * lds, src + r * lds + cols, dst + r * ldd);
}

}  // namespace lmt

// CpuBackend::adamw_step: one fused AdamW update in the exact order of torch.optim.AdamW
// (single-tensor path): decoupled decay p *= 1 - lr * wd first, then
// m = b1 m + (1 - b1) g, v = b2 v + (1 - b2) g^2,
// p -= (lr / (1 - b1^t)) * m / (sqrt(v) / sqrt(1 - b2^t) + eps).
// The per-step constants are formed in double; the per-element arithmetic is f32, as on a GPU.
// The clipping scale comes from the device (clip_scale), so no value crosses to the host.
#include <algorithm>
#include <cmath>

#include "backend/cpu/cpu_backend.h"
#include "core/error.h"

namespace lmt {

void CpuBackend::clip_scale(double* scale, const double* sum_squares, double max_norm) {
  const double norm = std::sqrt(*sum_squares);
  *scale = !std::isfinite(norm) ? NAN : max_norm > 0 ? std::min(1.0, max_norm / (norm + 1e-6)) : 1.0;
}

void CpuBackend::adamw_step(float* p, const float* g, float* m, float* v, int64_t n, double lr,
                            double beta1, double beta2, double eps, double weight_decay,
                            int64_t step, const double* scale) {
  LMT_CHECK(step >= 1, "adamw_step: step counts from 1");
  const double grad_scale = *scale;
  if (!std::isfinite(grad_scale)) return;  // a non-finite gradient norm: no update
  const float decay = static_cast<float>(1.0 - lr * weight_decay);
  const float b1 = static_cast<float>(beta1), b2 = static_cast<float>(beta2);
  const float one_minus_b1 = static_cast<float>(1.0 - beta1);
  const float one_minus_b2 = static_cast<float>(1.0 - beta2);
  const double t = static_cast<double>(step);
  const float step_size = static_cast<float>(lr / (1.0 - std::pow(beta1, t)));
  const float inv_bc2_sqrt = static_cast<float>(1.0 / std::sqrt(1.0 - std::pow(beta2, t)));
  const float gs = static_cast<float>(grad_scale), e = static_cast<float>(eps);
#pragma omp parallel for schedule(static) if (n >= 32768)
  for (int64_t i = 0; i < n; ++i) {
    const float gi = g[i] * gs;
    const float mi = b1 * m[i] + one_minus_b1 * gi;
    const float vi = b2 * v[i] + one_minus_b2 * gi * gi;
    m[i] = mi;
    v[i] = vi;
    p[i] = p[i] * decay - step_size * mi / (std::sqrt(vi) * inv_bc2_sqrt + e);
  }
}

}  // namespace lmt

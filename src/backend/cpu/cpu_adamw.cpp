// CpuBackend::adamw_step: one fused AdamW update in the exact order of torch.optim.AdamW
// (single-tensor path): decoupled decay p *= 1 - lr * wd first, then
// m = b1 m + (1 - b1) g, v = b2 v + (1 - b2) g^2,
// p -= (lr / (1 - b1^t)) * m / (sqrt(v) / sqrt(1 - b2^t) + eps).
// The per-step factors come formed (adamw_factors: in double, rounded to f32); the per-element
// arithmetic is f32, as on a GPU.
// The clipping scale comes from the device (clip_scale), so no value crosses to the host.
#include <algorithm>
#include <cmath>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_dispatch.h"
#include "core/error.h"

namespace lmt {

namespace {

struct AdamWConstants {
  float decay, b1, b2, one_minus_b1, one_minus_b2, step_size, inv_bc2_sqrt, gs, eps;
};

// Elements [0, n): cloned for AVX2 and AVX-512, so the sqrt and the division (the loop's cost:
// scalar, it ran at a quarter of memory speed) are vector instructions. Each is correctly rounded
// and nothing is contracted into an FMA (fp-contract=off: GCC contracts by default, even in ISO
// C++), so every clone gives the scalar loop's bits; the loop is memory-bound either way.
__attribute__((optimize("fp-contract=off"))) LMT_CLONES void adamw_range(
    float* __restrict p, const float* __restrict g, float* __restrict m, float* __restrict v,
    int64_t n, const AdamWConstants& c) {
  const AdamWConstants k = c;  // locals: the stores may alias c for the compiler
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const float gi = g[i] * k.gs;
    const float mi = k.b1 * m[i] + k.one_minus_b1 * gi;
    const float vi = k.b2 * v[i] + k.one_minus_b2 * gi * gi;
    m[i] = mi;
    v[i] = vi;
    p[i] = p[i] * k.decay - k.step_size * mi / (std::sqrt(vi) * k.inv_bc2_sqrt + k.eps);
  }
}

}  // namespace

void CpuBackend::clip_scale(double* scale, const double* sum_squares, double max_norm) {
  const double norm = std::sqrt(*sum_squares);
  *scale = !std::isfinite(norm) ? NAN : max_norm > 0 ? std::min(1.0, max_norm / (norm + 1e-6)) : 1.0;
}

void CpuBackend::adamw_step(float* p, const float* g, float* m, float* v, int64_t n,
                            const float* factors, double beta1, double beta2, double eps,
                            bool decay, const double* scale) {
  const double grad_scale = *scale;
  if (!std::isfinite(grad_scale)) return;  // a non-finite gradient norm: no update
  AdamWConstants c;
  c.decay = decay ? factors[0] : 1.0f;
  c.b1 = static_cast<float>(beta1), c.b2 = static_cast<float>(beta2);
  c.one_minus_b1 = static_cast<float>(1.0 - beta1);
  c.one_minus_b2 = static_cast<float>(1.0 - beta2);
  c.step_size = factors[1];
  c.inv_bc2_sqrt = factors[2];
  c.gs = static_cast<float>(grad_scale), c.eps = static_cast<float>(eps);
  cpu::for_chunks(n, cpu::kChunk, n >= cpu::kParallelMin, [&](int64_t i0, int64_t i1) {
    adamw_range(p + i0, g + i0, m + i0, v + i0, i1 - i0, c);
  });
}

}  // namespace lmt

// The PJRT backend's optimizer steps (see backend_impl.h). The per-step numbers are the
// optimizer's factors (backend.h), f32 device arrays it writes each step and the program reads:
// formed on the host as the CPU kernels read them, so both backends step with the same f32
// numbers, and a replayed step takes each step's.
#include "backend/pjrt/backend_impl.h"

namespace lmt {

void PjrtBackend::clip_scale(double* scale, const double* sum_squares, double max_norm) {
  set_wide(scale, hlo::clip_scale(b(), wide_value_at(sum_squares), max_norm));
}

HloValue PjrtBackend::scale_f32(const double* grad_scale) {
  return down(wide_value_at(grad_scale), DType::f32);
}

// Factor i of a kernel's factors (backend.h: the optimizer writes them each step), an f32
// scalar of the program; a step without decay multiplies by the constant 1 instead, so the
// program is the same whatever the rates.
HloValue PjrtBackend::factor(const float* factors, int i) {
  return view(factors + i, DType::f32, {});
}
HloValue PjrtBackend::decay_factor(const float* factors, bool decay) {
  return decay ? factor(factors, 0) : b().constant(1.0, DType::f32);
}

void PjrtBackend::adamw_step(float* p, const float* g, float* m, float* v, int64_t n,
                             const float* factors, double beta1, double beta2, double eps,
                             bool decay, const double* grad_scale) {
  if (n == 0) return;
  const Dims d = shape_of(p, DType::f32, n);
  const hlo::AdamWOut o =
      hlo::adamw_step(b(), view(p, DType::f32, d), view(g, DType::f32, d), view(m, DType::f32, d),
                      view(v, DType::f32, d), beta1, beta2, eps, decay_factor(factors, decay),
                      factor(factors, 1), factor(factors, 2), scale_f32(grad_scale));
  set(p, o.p);
  set(m, o.m);
  set(v, o.v);
}

void PjrtBackend::lion_step(float* p, const float* g, float* m, int64_t n, const float* factors,
                            double beta1, double beta2, bool decay, const double* grad_scale) {
  if (n == 0) return;
  const Dims d = shape_of(p, DType::f32, n);
  const hlo::LionOut o = hlo::lion_step(
      b(), view(p, DType::f32, d), view(g, DType::f32, d), view(m, DType::f32, d), beta1, beta2,
      decay_factor(factors, decay), factor(factors, 1), scale_f32(grad_scale));
  set(p, o.p);
  set(m, o.m);
}

void PjrtBackend::sgd_step(float* p, const float* g, float* buf, int64_t n, const float* lr,
                           double momentum, bool nesterov, double weight_decay,
                           const double* grad_scale) {
  if (n == 0) return;
  const Dims d = shape_of(p, DType::f32, n);
  const hlo::SgdOut o =
      hlo::sgd_step(b(), view(p, DType::f32, d), view(g, DType::f32, d), view(buf, DType::f32, d),
                    momentum, nesterov, weight_decay, factor(lr, 0), scale_f32(grad_scale));
  set(p, o.p);
  set(buf, o.buf);
}

void PjrtBackend::muon_momentum(float* u, float* buf, const float* g, int64_t n, double beta,
                                bool nesterov, const double* grad_scale) {
  if (n == 0) return;
  const hlo::MuonMomentumOut o =
      hlo::muon_momentum(b(), view(buf, DType::f32, {n}), view(g, DType::f32, {n}), beta, nesterov,
                         scale_f32(grad_scale));
  set(buf, o.buf);
  set(u, o.u);
}

void PjrtBackend::scale_by_rnorm(float* x, int64_t n, const double* sum_squares, double eps) {
  if (n == 0) return;
  set(x, hlo::scale_by_rnorm(b(), view(x, DType::f32, {n}), wide_value_at(sum_squares), eps));
}

void PjrtBackend::muon_apply(float* p, int64_t ldp, const float* x, int64_t rows, int64_t cols,
                             const float* factors, bool decay, const double* grad_scale) {
  if (rows == 0 || cols == 0) return;
  const Value pi = hlo::muon_apply(b(), view(p, DType::f32, {rows, cols}, {ldp, 1}),
                                   view(x, DType::f32, {rows, cols}), decay_factor(factors, decay),
                                   factor(factors, 1), scale_f32(grad_scale));
  set(p, pi, {ldp, 1});
}

void PjrtBackend::copy_2d(float* dst, int64_t ldd, const float* src, int64_t lds, int64_t rows,
                          int64_t cols) {
  if (rows == 0 || cols == 0) return;
  set(dst, view(src, DType::f32, {rows, cols}, {lds, 1}), {ldd, 1});
}

}  // namespace lmt

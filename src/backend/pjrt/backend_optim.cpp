// The PJRT backend's optimizer steps (see backend_impl.h). The per-step constants are
// runtime scalars formed as the CPU kernels form them, one argument per name and value however
// many tensors read it; a weight decay of 0 makes its factor the constant 1, so the program is the
// same at every step whatever the learning rate.
#include <cmath>

#include "backend/pjrt/backend_impl.h"

namespace lmt {

void PjrtBackend::clip_scale(double* scale, const double* sum_squares, double max_norm) {
  set(scale, hlo::clip_scale(b(), view(sum_squares, DType::f64, {}), max_norm));
}

HloValue PjrtBackend::scale_f32(const double* grad_scale) {
  return b().convert(view(grad_scale, DType::f64, {}), DType::f32);
}

namespace {

// 1 - lr * wd: a runtime scalar, or the constant 1 without decay.
HloValue decay_factor(PjrtTrace& trace, double lr, double weight_decay, const char* name) {
  if (weight_decay == 0) return trace.b().constant(1.0, DType::f32);
  return trace.runtime_scalar(1.0 - lr * weight_decay, DType::f32, name);
}

}  // namespace

void PjrtBackend::adamw_step(float* p, const float* g, float* m, float* v, int64_t n, double lr,
                             double beta1, double beta2, double eps, double weight_decay,
                             int64_t step, const double* grad_scale) {
  if (n == 0) return;
  const double t = static_cast<double>(step);
  const Value decay = decay_factor(trace_, lr, weight_decay, "adamw.decay");
  const Value step_size =
      runtime_scalar(lr / (1.0 - std::pow(beta1, t)), DType::f32, "adamw.step_size");
  const Value bc2 =
      runtime_scalar(1.0 / std::sqrt(1.0 - std::pow(beta2, t)), DType::f32, "adamw.inv_bc2_sqrt");
  const Dims d = shape_of(p, DType::f32, n);
  const hlo::AdamWOut o = hlo::adamw_step(
      b(), view(p, DType::f32, d), view(g, DType::f32, d), view(m, DType::f32, d),
      view(v, DType::f32, d), beta1, beta2, eps, decay, step_size, bc2, scale_f32(grad_scale));
  set(p, o.p);
  set(m, o.m);
  set(v, o.v);
}

void PjrtBackend::lion_step(float* p, const float* g, float* m, int64_t n, double lr, double beta1,
                            double beta2, double weight_decay, const double* grad_scale) {
  if (n == 0) return;
  const Dims d = shape_of(p, DType::f32, n);
  const hlo::LionOut o = hlo::lion_step(
      b(), view(p, DType::f32, d), view(g, DType::f32, d), view(m, DType::f32, d), beta1,
      beta2, decay_factor(trace_, lr, weight_decay, "lion.decay"),
      runtime_scalar(lr, DType::f32, "lion.lr"), scale_f32(grad_scale));
  set(p, o.p);
  set(m, o.m);
}

void PjrtBackend::sgd_step(float* p, const float* g, float* buf, int64_t n, double lr,
                           double momentum, bool nesterov, double weight_decay,
                           const double* grad_scale) {
  if (n == 0) return;
  const Dims d = shape_of(p, DType::f32, n);
  const hlo::SgdOut o =
      hlo::sgd_step(b(), view(p, DType::f32, d), view(g, DType::f32, d),
                    view(buf, DType::f32, d), momentum, nesterov, weight_decay,
                    runtime_scalar(lr, DType::f32, "sgd.lr"), scale_f32(grad_scale));
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
  set(x, hlo::scale_by_rnorm(b(), view(x, DType::f32, {n}), view(sum_squares, DType::f64, {}), eps));
}

void PjrtBackend::muon_apply(float* p, int64_t ldp, const float* x, int64_t rows, int64_t cols,
                             double lr, double weight_decay, const double* grad_scale) {
  if (rows == 0 || cols == 0) return;
  const Value pi = hlo::muon_apply(b(), view(p, DType::f32, {rows, cols}, {ldp, 1}),
                                   view(x, DType::f32, {rows, cols}),
                                   decay_factor(trace_, lr, weight_decay, "muon.decay"),
                                   runtime_scalar(lr, DType::f32, "muon.lr"), scale_f32(grad_scale));
  set(p, pi, {ldp, 1});
}

void PjrtBackend::copy_2d(float* dst, int64_t ldd, const float* src, int64_t lds, int64_t rows,
                          int64_t cols) {
  if (rows == 0 || cols == 0) return;
  set(dst, view(src, DType::f32, {rows, cols}, {lds, 1}), {ldd, 1});
}

}  // namespace lmt

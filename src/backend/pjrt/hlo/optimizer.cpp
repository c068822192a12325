// The optimizer section of backend.h as StableHLO (see lowering.h): the clipping scale and the
// AdamW, Lion, SGD and Muon steps, each as the CPU backend computes it, a step whose scale is not
// finite leaving the parameters and their state as they were.
#include <cmath>

#include "backend/pjrt/hlo/lowering_helpers.h"
#include "core/error.h"

namespace lmt::hlo {

Value clip_scale(StablehloBuilder& b, const Value& sum_squares, double max_norm) {
  LMT_CHECK(sum_squares.rank() == 0, "clip_scale: a scalar sum of squares");
  const Value norm = b.sqrt(sum_squares);
  const Value one = scalar(b, 1.0, norm);
  const Value scale =
      max_norm > 0
          ? b.select(b.compare(norm, scalar(b, max_norm, norm), CompareDir::gt),
                     b.divide(scalar(b, max_norm, norm), b.add(norm, scalar(b, 1e-6, norm))), one)
          : one;
  const Value finite = b.compare(b.subtract(norm, norm), scalar(b, 0.0, norm), CompareDir::eq);
  return b.select(finite, scale, scalar(b, NAN, norm));
}

AdamWOut adamw_step(StablehloBuilder& b, const Value& p, const Value& g, const Value& m,
                    const Value& v, double beta1, double beta2, double eps, const Value& decay,
                    const Value& step_size, const Value& inv_bc2_sqrt, const Value& grad_scale) {
  LMT_CHECK(p.dims == g.dims && p.dims == m.dims && p.dims == v.dims, "adamw_step: p, g, m, v");
  auto all = [&](const Value& s) { return b.broadcast_in_dim(s, p.dims, {}); };
  auto c = [&](double x) { return b.constant(x, p.dtype, p.dims); };
  // A skipped step (the scale not finite) as factors: the gradient's share 0 (the gradient itself
  // replaced by 0, as it may hold the non-finite values), the moments' 1, the weights' decay 1
  // and step 0, which leave p, m and v exactly as they are. The moments are formed as plain
  // updates and the weights from the new moments, so XLA reads each old moment once, in the
  // fusion that overwrites it, instead of copying it for the weights' fusion.
  const Value ok =
      b.compare(b.subtract(grad_scale, grad_scale), scalar(b, 0.0, grad_scale), CompareDir::eq);
  auto pick = [&](const Value& x, double skipped) {  // x where the step runs, else `skipped`
    return all(b.select(ok, x, scalar(b, skipped, x)));
  };
  auto factor = [&](double x) { return pick(scalar(b, x, grad_scale), 1.0); };
  const Value gi =
      b.select(b.broadcast_in_dim(ok, p.dims, {}), b.multiply(g, all(grad_scale)), c(0.0));
  const Value mo = b.add(b.multiply(factor(beta1), m), b.multiply(c(1.0 - beta1), gi));
  const Value vo =
      b.add(b.multiply(factor(beta2), v), b.multiply(b.multiply(c(1.0 - beta2), gi), gi));
  const Value denom = b.add(b.multiply(b.sqrt(vo), all(inv_bc2_sqrt)), c(eps));
  const Value po = b.subtract(b.multiply(p, pick(decay, 1.0)),
                              b.divide(b.multiply(pick(step_size, 0.0), mo), denom));
  return {po, mo, vo};
}

namespace {

// A pred of p's shape: whether the scalar s is finite (s - s == 0 is false for NaN and Inf).
Value finite_like(StablehloBuilder& b, const Value& s, const Value& p) {
  return b.broadcast_in_dim(b.compare(b.subtract(s, s), scalar(b, 0.0, s), CompareDir::eq), p.dims,
                            {});
}

}  // namespace

LionOut lion_step(StablehloBuilder& b, const Value& p, const Value& g, const Value& m, double beta1,
                  double beta2, const Value& decay, const Value& lr, const Value& grad_scale) {
  LMT_CHECK(p.dims == g.dims && p.dims == m.dims, "lion_step: p, g, m");
  auto all = [&](const Value& s) { return b.broadcast_in_dim(s, p.dims, {}); };
  auto c = [&](double x) { return b.constant(x, p.dtype, p.dims); };
  const Value gi = b.multiply(g, all(grad_scale));
  const Value mix = b.add(b.multiply(c(beta1), m), b.multiply(c(1.0 - beta1), gi));
  const Value sign = b.select(b.compare(mix, c(0.0), CompareDir::gt), c(1.0),
                              b.select(b.compare(mix, c(0.0), CompareDir::lt), c(-1.0), c(0.0)));
  const Value pi = b.subtract(b.multiply(p, all(decay)), b.multiply(all(lr), sign));
  const Value mi = b.add(b.multiply(c(beta2), m), b.multiply(c(1.0 - beta2), gi));
  const Value finite = finite_like(b, grad_scale, p);
  return {b.select(finite, pi, p), b.select(finite, mi, m)};
}

SgdOut sgd_step(StablehloBuilder& b, const Value& p, const Value& g, const Value& buf,
                double momentum, bool nesterov, double weight_decay, const Value& lr,
                const Value& grad_scale) {
  LMT_CHECK(p.dims == g.dims && p.dims == buf.dims, "sgd_step: p, g, buf");
  auto all = [&](const Value& s) { return b.broadcast_in_dim(s, p.dims, {}); };
  auto c = [&](double x) { return b.constant(x, p.dtype, p.dims); };
  const Value d = b.add(b.multiply(g, all(grad_scale)), b.multiply(c(weight_decay), p));
  const Value bi = b.add(b.multiply(c(momentum), buf), d);
  const Value dir = nesterov ? b.add(d, b.multiply(c(momentum), bi)) : bi;
  const Value pi = b.subtract(p, b.multiply(all(lr), dir));
  const Value finite = finite_like(b, grad_scale, p);
  return {b.select(finite, pi, p), b.select(finite, bi, buf)};
}

MuonMomentumOut muon_momentum(StablehloBuilder& b, const Value& buf, const Value& g, double beta,
                              bool nesterov, const Value& grad_scale) {
  LMT_CHECK(buf.dims == g.dims, "muon_momentum: buf, g");
  auto c = [&](double x) { return b.constant(x, g.dtype, g.dims); };
  const Value gi = b.multiply(g, b.broadcast_in_dim(grad_scale, g.dims, {}));
  const Value mi = b.add(b.multiply(c(beta), buf), b.multiply(c(1.0 - beta), gi));
  const Value u = nesterov ? b.add(b.multiply(c(1.0 - beta), gi), b.multiply(c(beta), mi)) : mi;
  return {u, b.select(finite_like(b, grad_scale, buf), mi, buf)};
}

Value scale_by_rnorm(StablehloBuilder& b, const Value& x, const Value& sum_squares, double eps) {
  LMT_CHECK(sum_squares.rank() == 0, "scale_by_rnorm: a scalar sum of squares");
  const Value inv = b.divide(scalar(b, 1.0, sum_squares),
                             b.add(b.sqrt(sum_squares), scalar(b, eps, sum_squares)));
  return b.multiply(x, b.broadcast_in_dim(b.convert(inv, x.dtype), x.dims, {}));
}

Value muon_apply(StablehloBuilder& b, const Value& p, const Value& x, const Value& decay,
                 const Value& lr, const Value& grad_scale) {
  LMT_CHECK(p.dims == x.dims, "muon_apply: p, x");
  auto all = [&](const Value& s) { return b.broadcast_in_dim(s, p.dims, {}); };
  const Value pi = b.subtract(b.multiply(p, all(decay)), b.multiply(all(lr), x));
  return b.select(finite_like(b, grad_scale, p), pi, p);
}

}  // namespace lmt::hlo

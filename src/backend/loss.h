// The training objective of one labelled row, written once for every backend: the CPU kernels
// evaluate it in double, the PJRT lowering as StableHLO on a vector of rows, through the same
// template. A new loss is added here (and to LossConfig in train/config_sections.h).
//
// From a row's logits z (after the soft-cap), its label y, the vocabulary size V,
//   lse       = log sum_j exp(z_j)
//   ce        = lse - z_y                                     the plain cross-entropy
//   smoothed  = ce + eps (z_y - (1/V) sum_j z_j)              label smoothing eps
//             = (1 - eps) ce + eps (lse - mean_j z_j)         (PyTorch's label_smoothing)
//   objective = (1 - p_y)^gamma smoothed + lambda lse^2        focal gamma, z-loss lambda
// with p_y = exp(-ce). gamma = 0 is the cross-entropy; the focal factor multiplies the smoothed
// loss. Its gradient is affine in the softmax p:
//   d objective / d z_j = a p_j + b [j == y] + c
// so a kernel needs only (lse, z_y, sum_j z_j) of a row to have its loss and, on a second look at
// the logits, its gradient: what lets the cut cross-entropy walk the vocabulary in tiles.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace lmt {

struct LossSpec {
  double label_smoothing = 0;  // eps in [0, 1)
  double z_loss = 0;           // lambda >= 0
  double focal_gamma = 0;      // gamma >= 0; 0: no focal factor
  bool plain() const { return label_smoothing == 0 && z_loss == 0 && focal_gamma == 0; }
};

template <class T>
struct RowLoss {
  T objective, ce;
  T a, b, c;  // d objective / d z_j = a p_j + b [j == y] + c
};

// Ops: T (a row's value: double, or a StableHLO vector of rows) and add, sub, mul (T, T),
// scale (T, double), c (a constant), neg, exp, expm1, pow (T, double), max (T, double).
template <class Ops>
RowLoss<typename Ops::T> row_loss(const LossSpec& s, Ops& o, const typename Ops::T& lse,
                                  const typename Ops::T& z_label, const typename Ops::T& z_sum,
                                  int64_t V) {
  using T = typename Ops::T;
  const double eps = s.label_smoothing, inv_v = 1.0 / static_cast<double>(V);
  RowLoss<T> r;
  r.ce = o.sub(lse, z_label);
  T loss = r.ce;
  if (eps > 0) loss = o.add(r.ce, o.scale(o.sub(z_label, o.scale(z_sum, inv_v)), eps));
  r.a = o.c(1.0), r.b = o.c(-(1 - eps)), r.c = o.c(-eps * inv_v);
  if (s.focal_gamma > 0) {
    // w = q^gamma with q = 1 - p_y (from expm1: exact as p_y nears 1, kept off 0 so that
    // q^(gamma - 1) stays finite); dw/dz_j = -gamma q^(gamma-1) p_y ([j == y] - p_j).
    const double g = s.focal_gamma;
    const T p_y = o.exp(o.neg(r.ce));
    const T q = o.max(o.neg(o.expm1(o.neg(r.ce))), 1e-30);
    const T w = o.pow(q, g);
    const T k = o.scale(o.mul(o.mul(o.pow(q, g - 1), p_y), loss), g);
    r.a = o.add(w, k);
    r.b = o.sub(o.scale(w, -(1 - eps)), k);
    r.c = o.scale(w, -eps * inv_v);
    loss = o.mul(w, loss);
  }
  if (s.z_loss > 0) {
    loss = o.add(loss, o.scale(o.mul(lse, lse), s.z_loss));
    r.a = o.add(r.a, o.scale(lse, 2 * s.z_loss));
  }
  r.objective = loss;
  return r;
}

// row_loss's Ops in double (the CPU backend).
struct ScalarLossOps {
  using T = double;
  static double add(double x, double y) { return x + y; }
  static double sub(double x, double y) { return x - y; }
  static double mul(double x, double y) { return x * y; }
  static double scale(double x, double s) { return x * s; }
  static double c(double v) { return v; }
  static double neg(double x) { return -x; }
  static double exp(double x) { return std::exp(x); }
  static double expm1(double x) { return std::expm1(x); }
  static double pow(double x, double e) { return std::pow(x, e); }
  static double max(double x, double m) { return std::max(x, m); }
};

inline RowLoss<double> row_loss(const LossSpec& s, double lse, double z_label, double z_sum,
                                int64_t V) {
  ScalarLossOps o;
  return row_loss(s, o, lse, z_label, z_sum, V);
}

}  // namespace lmt

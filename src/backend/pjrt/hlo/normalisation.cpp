// The normalisation section of backend.h as StableHLO (see lowering.h): RMSNorm (also per head,
// the q/k norm) and LayerNorm, each with the CPU kernel's formula (the same rstd), so the two
// agree to float32 rounding.
#include <numeric>

#include "backend/pjrt/hlo/lowering_helpers.h"
#include "core/error.h"

namespace lmt::hlo {

NormOut rmsnorm_forward(StablehloBuilder& b, const Value& x, const Value& w, double eps,
                        double w_offset) {
  LMT_CHECK(x.rank() >= 2 && w.rank() == 1 && w.dims[0] == x.dims.back(),
            "rmsnorm: x [rows..., C], w [C]");
  const int64_t last = x.rank() - 1, C = x.dims.back();
  const Dims lead(x.dims.begin(), x.dims.end() - 1);
  const Value ms = b.divide(b.reduce_sum(b.multiply(x, x), {last}), b.constant(C, x.dtype, lead));
  const Value rstd = b.rsqrt(b.add(ms, b.constant(eps, x.dtype, lead)));
  const Value scale = b.add(w, b.constant(w_offset, w.dtype, {C}));
  return {b.multiply(b.multiply(x, rows(b, rstd, C)), cols(b, scale, lead)), rstd};
}

// With g = dout * (offset + w): dx = rstd (g - x rstd^2 mean(g x)), dw = sum over rows of
// dout x rstd.
NormGrads rmsnorm_backward(StablehloBuilder& b, const Value& dout, const Value& x, const Value& w,
                           const Value& rstd, double w_offset) {
  const int64_t last = x.rank() - 1, C = x.dims.back();
  const Dims lead(x.dims.begin(), x.dims.end() - 1);
  Dims lead_axes(lead.size());
  std::iota(lead_axes.begin(), lead_axes.end(), int64_t{0});
  const Value scale = b.add(w, b.constant(w_offset, w.dtype, {C}));
  const Value g = b.multiply(dout, cols(b, scale, lead));
  const Value r = rows(b, rstd, C);
  const Value mean_gx =
      b.divide(b.reduce_sum(b.multiply(g, x), {last}), b.constant(C, x.dtype, lead));
  const Value r3_mean = b.multiply(b.multiply(b.multiply(rstd, rstd), rstd), mean_gx);
  const Value dx = b.subtract(b.multiply(g, r), b.multiply(x, rows(b, r3_mean, C)));
  const Value dw = b.reduce_sum(b.multiply(b.multiply(dout, x), r), lead_axes);
  return {dx, dw};
}

LayerNormOut layernorm_forward(StablehloBuilder& b, const Value& x, const Value& w,
                               const Value& bias, double eps) {
  LMT_CHECK(x.rank() == 2 && w.rank() == 1 && w.dims[0] == x.dims[1], "layernorm: x [N,C], w [C]");
  const int64_t N = x.dims[0], C = x.dims[1];
  const Value count = b.constant(C, x.dtype, {N});
  const Value mean = b.divide(b.reduce_sum(x, {1}), count);
  const Value xc = b.subtract(x, rows(b, mean, C));
  const Value var = b.divide(b.reduce_sum(b.multiply(xc, xc), {1}), count);
  const Value rstd = b.rsqrt(b.add(var, b.constant(eps, x.dtype, {N})));
  const Value out =
      b.add(b.multiply(b.multiply(xc, rows(b, rstd, C)), cols(b, w, {N})), cols(b, bias, {N}));
  return {out, mean, rstd};
}

// xhat = (x - mean) rstd, g = dout w: dx = rstd (g - mean(g) - xhat mean(g xhat)); dw = sum of
// dout xhat over rows; db = sum of dout.
LayerNormGrads layernorm_backward(StablehloBuilder& b, const Value& dout, const Value& x,
                                  const Value& w, const Value& mean, const Value& rstd) {
  const int64_t N = x.dims[0], C = x.dims[1];
  const Value count = b.constant(C, x.dtype, {N});
  const Value xhat = b.multiply(b.subtract(x, rows(b, mean, C)), rows(b, rstd, C));
  const Value g = b.multiply(dout, cols(b, w, {N}));
  const Value mean_g = b.divide(b.reduce_sum(g, {1}), count);
  const Value mean_gx = b.divide(b.reduce_sum(b.multiply(g, xhat), {1}), count);
  const Value inner =
      b.subtract(b.subtract(g, rows(b, mean_g, C)), b.multiply(xhat, rows(b, mean_gx, C)));
  return {b.multiply(rows(b, rstd, C), inner), b.reduce_sum(b.multiply(dout, xhat), {0}),
          b.reduce_sum(dout, {0})};
}

// The plain RMSNorm over each head's D, the heads kept an axis of their own ([N, H, D], not
// N * H rows): on a tensor-parallel mesh the heads are split, and rows merged across them are not.
NormOut head_rmsnorm_forward(StablehloBuilder& b, const Value& x, const Value& w, double eps,
                             double w_offset) {
  LMT_CHECK(x.rank() == 3 && w.dims == Dims{x.dims[2]}, "head_rmsnorm: x [N,H,D], w [D]");
  return rmsnorm_forward(b, x, w, eps, w_offset);
}

NormGrads head_rmsnorm_backward(StablehloBuilder& b, const Value& dout, const Value& x,
                                const Value& w, const Value& rstd, double w_offset) {
  LMT_CHECK(x.rank() == 3 && dout.dims == x.dims && rstd.dims == (Dims{x.dims[0], x.dims[1]}),
            "head_rmsnorm_backward: dout, x [N,H,D], rstd [N,H]");
  return rmsnorm_backward(b, dout, x, w, rstd, w_offset);
}

}  // namespace lmt::hlo

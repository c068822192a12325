// The loss on one chunk of logits (backend.h's cross_entropy) as StableHLO (see lowering.h):
// backend/loss.h's row_loss on StableHLO rows, softmax through the row maximum as the CPU kernel
// computes it.
#include "backend/pjrt/hlo/lowering_helpers.h"
#include "core/error.h"

namespace lmt::hlo {

namespace {

// row_loss's Ops on StableHLO vectors of rows (one float type).
struct HloLossOps {
  using T = Value;
  StablehloBuilder& b;
  DType dt;
  Dims dims;
  Value add(const Value& x, const Value& y) { return b.add(x, y); }
  Value sub(const Value& x, const Value& y) { return b.subtract(x, y); }
  Value mul(const Value& x, const Value& y) { return b.multiply(x, y); }
  Value scale(const Value& x, double s) { return b.multiply(x, c(s)); }
  Value c(double v) { return b.constant(v, dt, dims); }
  Value neg(const Value& x) { return b.negate(x); }
  Value exp(const Value& x) { return b.exp(x); }
  Value expm1(const Value& x) { return b.expm1(x); }
  Value pow(const Value& x, double e) { return b.power(x, c(e)); }
  Value max(const Value& x, double m) { return b.maximum(x, c(m)); }
};

}  // namespace

RowLoss<Value> row_loss(StablehloBuilder& b, const LossSpec& loss, const Value& lse,
                        const Value& z_label, const Value& z_sum, int64_t V) {
  HloLossOps o{b, lse.dtype, lse.dims};
  return row_loss(loss, o, lse, z_label, z_sum, V);
}

CrossEntropy cross_entropy(StablehloBuilder& b, const Value& logits, const Value& labels,
                           int32_t ignore_index, double grad_scale, double softcap,
                           const LossSpec& loss) {
  LMT_CHECK(logits.rank() == 2 && labels.rank() == 1 && labels.dtype == DType::i32 &&
                labels.dims[0] == logits.dims[0],
            "cross_entropy: logits [N,V], labels [N] i32");
  const int64_t N = logits.dims[0], V = logits.dims[1];
  Value z = logits, t;
  if (softcap > 0) {
    t = b.tanh(b.divide(logits, scalar(b, softcap, logits)));
    z = b.multiply(scalar(b, softcap, logits), t);
  }
  const Value max = b.reduce_max(z, {1});
  const Value e = b.exp(b.subtract(z, rows(b, max, V)));
  const Value sum = b.reduce_sum(e, {1});
  const Value lse = b.add(b.log(sum), max);
  const Value hit = b.compare(b.iota(DType::i32, {N, V}, 1), rows(b, labels, V), CompareDir::eq);
  const Value zero_nv = scalar(b, 0.0, z);
  const Value z_label = b.reduce_sum(b.select(hit, z, zero_nv), {1});
  const Value valid = b.compare(labels, b.constant(ignore_index, DType::i32, {N}), CompareDir::ne);
  const Value zero_n = b.constant(0.0, z.dtype, {N});
  const Value z_sum = loss.label_smoothing > 0 ? b.reduce_sum(z, {1}) : zero_n;
  const RowLoss<Value> r = row_loss(b, loss, lse, z_label, z_sum, V);
  CrossEntropy out;
  out.losses = b.select(valid, r.objective, zero_n);
  out.ce = loss.plain() ? out.losses : b.select(valid, r.ce, zero_n);
  if (grad_scale == 0) return out;
  // (a softmax + b onehot + c) * grad_scale on valid rows, through the cap's derivative
  // 1 - tanh^2.
  auto coef = [&](const Value& x) {
    return rows(b, b.select(valid, b.multiply(x, b.constant(grad_scale, z.dtype, {N})), zero_n), V);
  };
  const Value p = b.divide(e, rows(b, sum, V));
  Value d = b.add(b.multiply(coef(r.a), p), coef(r.c));
  d = b.add(d, b.select(hit, coef(r.b), zero_nv));
  if (softcap > 0) d = b.multiply(d, b.subtract(scalar(b, 1.0, z), b.multiply(t, t)));
  out.dlogits = d;
  return out;
}

}  // namespace lmt::hlo

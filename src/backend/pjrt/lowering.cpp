// StableHLO forms of the kernels; see lowering.h. Each follows its CPU kernel's formula (the
// same rstd, the same tanh-approximated GELU, softmax through the row maximum), so the two agree
// to float32 rounding.
#include "backend/pjrt/lowering.h"

#include <cmath>
#include <numeric>

#include "core/error.h"

namespace lmt::hlo {

namespace {

using Dims = std::vector<int64_t>;

// x[N] (any rows [rows...]) repeated along C: [N, C] ([rows..., C]).
Value rows(StablehloBuilder& b, const Value& x, int64_t C) {
  Dims dims = x.dims, axes(x.dims.size());
  dims.push_back(C);
  std::iota(axes.begin(), axes.end(), int64_t{0});
  return b.broadcast_in_dim(x, dims, axes);
}
// w[C] repeated for rows [N] (any [rows...]): [N, C] ([rows..., C]).
Value cols(StablehloBuilder& b, const Value& w, Dims lead) {
  const auto at = static_cast<int64_t>(lead.size());
  lead.push_back(w.dims[0]);
  return b.broadcast_in_dim(w, lead, {at});
}
Value scalar(StablehloBuilder& b, double v, const Value& like) {
  return b.constant(v, like.dtype, like.dims);
}

// act(g) and act'(g), elementwise.
struct Act {
  Value f, df;
};
Act activation(StablehloBuilder& b, Activation act, const Value& g) {
  if (act == Activation::relu || act == Activation::relu2) {  // as the CPU kernel: g > 0 ? g : 0
    const Value zero = scalar(b, 0.0, g);
    const Value pos = b.compare(g, zero, CompareDir::gt);
    const Value r = b.select(pos, g, zero);
    if (act == Activation::relu) return {r, b.select(pos, scalar(b, 1.0, g), zero)};
    return {b.multiply(r, r), b.multiply(scalar(b, 2.0, g), r)};
  }
  if (act == Activation::silu) {  // g s(g); s (1 + g (1 - s))
    const Value s = b.logistic(g);
    const Value one = scalar(b, 1.0, g);
    return {b.multiply(g, s), b.multiply(s, b.add(one, b.multiply(g, b.subtract(one, s))))};
  }
  // 0.5 g (1 + t), t = tanh(k (g + c g^3)); derivative 0.5 (1 + t) + 0.5 g (1 - t^2) k (1 + 3c g^2)
  const double k = std::sqrt(2.0 / M_PI), c = 0.044715;
  const Value g2 = b.multiply(g, g);
  const Value inner =
      b.multiply(scalar(b, k, g), b.add(g, b.multiply(scalar(b, c, g), b.multiply(g2, g))));
  const Value t = b.tanh(inner);
  const Value half = scalar(b, 0.5, g), one = scalar(b, 1.0, g);
  const Value one_t = b.add(one, t);
  const Value f = b.multiply(half, b.multiply(g, one_t));
  const Value dinner = b.multiply(scalar(b, k, g), b.add(one, b.multiply(scalar(b, 3 * c, g), g2)));
  const Value df =
      b.add(b.multiply(half, one_t),
            b.multiply(half, b.multiply(g, b.multiply(b.subtract(one, b.multiply(t, t)), dinner))));
  return {f, df};
}

}  // namespace

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

Value act_forward(StablehloBuilder& b, Activation act, const Value& x) {
  return activation(b, act, x).f;
}

Value act_backward(StablehloBuilder& b, Activation act, const Value& dout, const Value& x) {
  return b.multiply(dout, activation(b, act, x).df);
}

Value relu_mask(StablehloBuilder& b, const Value& x) {
  LMT_CHECK(x.rank() == 1, "relu_mask: x [n]");
  const int64_t n = x.dims[0], words = (n + 31) / 32;
  Value bits = b.convert(b.compare(x, scalar(b, 0.0, x), CompareDir::gt), DType::i32);
  if (words * 32 > n) bits = b.concatenate({bits, b.constant(0, DType::i32, {words * 32 - n})}, 0);
  const Dims wd = {words, 32};
  // Distinct bits: their wrapping i32 sum is their or.
  return b.reduce_sum(b.shift_left(b.reshape(bits, wd), b.iota(DType::i32, wd, 1)), {1});
}

Value relu_backward_masked(StablehloBuilder& b, const Value& dout, const Value& mask) {
  LMT_CHECK(dout.rank() == 1 && mask.rank() == 1 && mask.dtype == DType::i32 &&
                mask.dims[0] == (dout.dims[0] + 31) / 32,
            "relu_backward_masked: dout [n], mask [ceil(n / 32)] i32");
  const int64_t n = dout.dims[0], words = mask.dims[0];
  const Dims wd = {words, 32};
  const Value bits =
      b.bit_and(b.shift_right_logical(b.broadcast_in_dim(mask, wd, {0}), b.iota(DType::i32, wd, 1)),
                b.constant(1, DType::i32, wd));
  const Value on = b.compare(b.slice(b.reshape(bits, {words * 32}), {0}, {n}),
                             b.constant(0, DType::i32, {n}), CompareDir::ne);
  return b.multiply(dout, b.select(on, scalar(b, 1.0, dout), scalar(b, 0.0, dout)));
}

Value relu2_backward_from_output(StablehloBuilder& b, const Value& dout, const Value& y,
                                 DType stored) {
  Value r = b.sqrt(y);
  if (stored != r.dtype) r = b.convert(b.convert(r, stored), r.dtype);
  return b.multiply(dout, b.multiply(scalar(b, 2.0, r), r));
}

Value glu_forward(StablehloBuilder& b, Activation act, const Value& gate_up) {
  const int64_t N = gate_up.dims[0], F = gate_up.dims[1] / 2;
  LMT_CHECK(gate_up.rank() == 2 && gate_up.dims[1] == 2 * F, "glu: gate_up [N, 2F]");
  const Value gate = b.slice(gate_up, {0, 0}, {N, F});
  const Value up = b.slice(gate_up, {0, F}, {N, 2 * F});
  return b.multiply(activation(b, act, gate).f, up);
}

Value glu_backward(StablehloBuilder& b, Activation act, const Value& dout, const Value& gate_up) {
  const int64_t N = gate_up.dims[0], F = gate_up.dims[1] / 2;
  const Value gate = b.slice(gate_up, {0, 0}, {N, F});
  const Value up = b.slice(gate_up, {0, F}, {N, 2 * F});
  const Act a = activation(b, act, gate);
  return b.concatenate({b.multiply(b.multiply(dout, up), a.df), b.multiply(dout, a.f)}, 1);
}

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

Value rope(StablehloBuilder& b, const Value& x, const Value& pos, const Value& inv_freq,
           int64_t rotary_dim, double attn_factor, bool inverse) {
  LMT_CHECK(x.rank() == 3 && pos.rank() == 1 && pos.dims[0] == x.dims[0] && rotary_dim % 2 == 0 &&
                rotary_dim > 0 && rotary_dim <= x.dims[2] &&
                inv_freq.dims == std::vector<int64_t>{rotary_dim / 2},
            "rope: x [N,H,D], pos [N], inv_freq [rotary_dim/2]");
  const int64_t N = x.dims[0], H = x.dims[1], D = x.dims[2], half = rotary_dim / 2;
  const Value angle = b.multiply(b.broadcast_in_dim(b.convert(pos, DType::f32), {N, half}, {0}),
                                 b.broadcast_in_dim(inv_freq, {N, half}, {1}));
  auto table = [&](const Value& t) {  // [N, half] -> [N, H, half] in x's dtype, times the factor
    const Value scaled = b.multiply(t, b.constant(attn_factor, DType::f32, {N, half}));
    return b.broadcast_in_dim(b.convert(scaled, x.dtype), {N, H, half}, {0, 2});
  };
  const Value cs = table(b.cosine(angle)), sn = table(b.sine(angle));
  const Value a = b.slice(x, {0, 0, 0}, {N, H, half});
  const Value c = b.slice(x, {0, 0, half}, {N, H, rotary_dim});
  const Value first = inverse ? b.add(b.multiply(a, cs), b.multiply(c, sn))
                              : b.subtract(b.multiply(a, cs), b.multiply(c, sn));
  const Value second = inverse ? b.subtract(b.multiply(c, cs), b.multiply(a, sn))
                               : b.add(b.multiply(c, cs), b.multiply(a, sn));
  if (rotary_dim == D) return b.concatenate({first, second}, 2);
  return b.concatenate({first, second, b.slice(x, {0, 0, rotary_dim}, {N, H, D})}, 2);
}

namespace {

// The pieces forward and backward share: k and v with their heads repeated for the query heads,
// as [B, Hq, T, D]; the capped, masked scores and the softmax probabilities [B, Hq, T, T].
struct AttentionCore {
  Value qh, kh, vh;  // [B, H, T, D]
  Value t;           // tanh of the scaled scores (softcap only)
  Value valid;       // pred [B, H, T, T]
  Value p, lse;      // probabilities and log-sum-exp [B, H, T]
};

// Scores, softmax and sums in f32 for bf16 and f16 inputs (their products in their own type,
// accumulated in f32), else in the inputs' type.
DType compute_of(DType t) {
  return t == DType::bf16 || t == DType::f16 ? DType::f32 : t;
}
Value to(StablehloBuilder& b, const Value& x, DType t) {
  return x.dtype == t ? x : b.convert(x, t);
}

Value heads_first(StablehloBuilder& b, const Value& x) {  // [B,T,H,D] -> [B,H,T,D]
  return b.transpose(x, {0, 2, 1, 3});
}

Value repeat_kv(StablehloBuilder& b, const Value& x, int64_t Hq) {  // [B,T,Hkv,D] -> [B,Hq,T,D]
  const int64_t B = x.dims[0], T = x.dims[1], Hkv = x.dims[2], D = x.dims[3], G = Hq / Hkv;
  const Value r = b.broadcast_in_dim(x, {B, T, Hkv, G, D}, {0, 1, 2, 4});
  return heads_first(b, b.reshape(r, {B, T, Hq, D}));
}

AttentionCore attention_core(StablehloBuilder& b, const AttentionArgsHlo& a, const Value& q,
                             const Value& k, const Value& v, const Value* doc_start) {
  LMT_CHECK(q.rank() == 4 && k.dims == v.dims && k.dims[0] == q.dims[0] && k.dims[1] == q.dims[1] &&
                k.dims[3] == q.dims[3] && q.dims[2] % k.dims[2] == 0,
            "attention: q [B,T,Hq,D], k and v [B,T,Hkv,D]");
  const int64_t B = q.dims[0], T = q.dims[1], H = q.dims[2];
  AttentionCore c;
  c.qh = heads_first(b, q);
  c.kh = repeat_kv(b, k, H);
  c.vh = repeat_kv(b, v, H);
  const std::vector<int64_t> S = {B, H, T, T};
  const DType f = compute_of(q.dtype);
  Value s = b.multiply(b.dot_general(c.qh, c.kh, {0, 1}, {0, 1}, {3}, {3}, f),
                       b.constant(a.scale, f, S));
  if (a.softcap > 0) {
    c.t = b.tanh(b.divide(s, b.constant(a.softcap, f, S)));
    s = b.multiply(b.constant(a.softcap, f, S), c.t);
  }
  const Value i = b.iota(DType::i32, S, 2), j = b.iota(DType::i32, S, 3);
  Value valid = b.compare(j, i, CompareDir::le);
  auto both = [&](const Value& x, const Value& y) {  // pred and: select(x, y, false)
    return b.select(x, y, b.compare(i, i, CompareDir::ne));
  };
  if (a.window > 0)
    valid = both(valid,
                 b.compare(b.subtract(i, j), b.constant(a.window, DType::i32, S), CompareDir::lt));
  if (doc_start)
    valid = both(valid, b.compare(j, b.broadcast_in_dim(*doc_start, S, {0, 2}), CompareDir::ge));
  c.valid = valid;
  const Value lowest = b.constant(-INFINITY, f, S);
  s = b.select(valid, s, lowest);
  const Value max = b.reduce_max(s, {3});
  const Value e = b.exp(b.subtract(s, b.broadcast_in_dim(max, S, {0, 1, 2})));
  const Value sum = b.reduce_sum(e, {3});
  c.p = b.divide(e, b.broadcast_in_dim(sum, S, {0, 1, 2}));
  c.lse = b.add(b.log(sum), max);
  return c;
}

// [B,H,T,D] of a query-head gradient summed over each kv head's group -> [B,T,Hkv,D].
Value sum_groups(StablehloBuilder& b, const Value& x, int64_t Hkv) {
  const int64_t B = x.dims[0], H = x.dims[1], T = x.dims[2], D = x.dims[3];
  const Value t = b.transpose(x, {0, 2, 1, 3});  // [B,T,H,D]
  return b.reduce_sum(b.reshape(t, {B, T, Hkv, H / Hkv, D}), {3});
}

}  // namespace

AttentionOut attention_forward(StablehloBuilder& b, const AttentionArgsHlo& a, const Value& q,
                               const Value& k, const Value& v, const Value* doc_start) {
  const AttentionCore c = attention_core(b, a, q, k, v, doc_start);
  const Value o = b.dot_general(to(b, c.p, v.dtype), c.vh, {0, 1}, {0, 1}, {3}, {2},
                                c.p.dtype);  // [B,H,T,D]
  return {b.transpose(o, {0, 2, 1, 3}), c.lse};
}

// dp = dout v^T; ds = p (dp - rowsum(dout o)); through the cap: ds (1 - t^2); dq = scale ds k,
// dk = scale ds^T q, dv = p^T dout, kv gradients summed over each group of query heads.
AttentionGrads attention_backward(StablehloBuilder& b, const AttentionArgsHlo& a, const Value& dout,
                                  const Value& q, const Value& k, const Value& v,
                                  const Value* doc_start) {
  const AttentionCore c = attention_core(b, a, q, k, v, doc_start);
  const int64_t B = q.dims[0], T = q.dims[1], H = q.dims[2], Hkv = k.dims[2];
  const std::vector<int64_t> S = {B, H, T, T};
  const DType lo = q.dtype, f = compute_of(lo);
  const Value doh = heads_first(b, to(b, dout, lo));
  const Value pl = to(b, c.p, lo);
  const Value oh = b.dot_general(pl, c.vh, {0, 1}, {0, 1}, {3}, {2}, f);
  const Value dp = b.dot_general(doh, c.vh, {0, 1}, {0, 1}, {3}, {3}, f);  // [B,H,T,T]
  const Value row = b.reduce_sum(b.multiply(to(b, doh, f), oh), {3});      // [B,H,T]
  Value ds = b.multiply(c.p, b.subtract(dp, b.broadcast_in_dim(row, S, {0, 1, 2})));
  if (a.softcap > 0) ds = b.multiply(ds, b.subtract(b.constant(1.0, f, S), b.multiply(c.t, c.t)));
  ds = to(b, b.multiply(ds, b.constant(a.scale, f, S)), lo);
  const Value dq = b.dot_general(ds, c.kh, {0, 1}, {0, 1}, {3}, {2}, f);   // [B,H,T,D]
  const Value dkh = b.dot_general(ds, c.qh, {0, 1}, {0, 1}, {2}, {2}, f);  // [B,H,T(k),D]
  const Value dvh = b.dot_general(pl, doh, {0, 1}, {0, 1}, {2}, {2}, f);
  return {b.transpose(dq, {0, 2, 1, 3}), sum_groups(b, dkh, Hkv), sum_groups(b, dvh, Hkv)};
}

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
  const Value ok = b.compare(b.subtract(grad_scale, grad_scale), scalar(b, 0.0, grad_scale),
                             CompareDir::eq);
  auto pick = [&](const Value& x, double skipped) {  // x where the step runs, else `skipped`
    return all(b.select(ok, x, scalar(b, skipped, x)));
  };
  auto factor = [&](double x) { return pick(scalar(b, x, grad_scale), 1.0); };
  const Value gi = b.select(b.broadcast_in_dim(ok, p.dims, {}), b.multiply(g, all(grad_scale)),
                            c(0.0));
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

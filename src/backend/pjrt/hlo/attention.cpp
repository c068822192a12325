// Dense attention as StableHLO (see lowering.h): the whole [B, H, T, T] scores at once, for
// sequences up to the dense limit (backend/attention_forms.h); attention_blocked.cpp holds the
// long-sequence form and attention_cudnn.cpp cuDNN's fused kernel. Softmax through the row
// maximum, as the CPU kernel computes it.
#include <cmath>

#include "backend/pjrt/hlo/lowering_helpers.h"
#include "core/error.h"

namespace lmt::hlo {

namespace {

// The pieces forward and backward share: k and v with their heads repeated for the query heads,
// as [B, Hq, T, D]; the capped, masked scores and the softmax probabilities [B, Hq, T, T].
struct AttentionCore {
  Value qh, kh, vh;  // [B, H, T, D]
  Value t;           // tanh of the scaled scores (softcap only)
  Value valid;       // pred [B, H, T, T]
  Value p, lse;      // probabilities and log-sum-exp [B, H, T]
};

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
  Value s =
      b.multiply(b.dot_general(c.qh, c.kh, {0, 1}, {0, 1}, {3}, {3}, f), b.constant(a.scale, f, S));
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

}  // namespace lmt::hlo

// Blocked attention in StableHLO (see lowering.h): the dense form's masks and formulas applied to
// one [block x block] tile of scores at a time, so that the program never holds more than a tile
// per head. Heads are grouped as [B, Hkv, G, T, D] (G = Hq / Hkv query heads per kv head), which
// lets one dot_general serve a whole group against its kv head without repeating k and v, and
// sums the group's share of dk and dv in the same contraction.
//
// Forward: for each query block, a loop over the key blocks it may see keeps a running row max
// m, sum l and unnormalised output acc (rescaled by exp(m_old - m_new) when the max grows); out =
// acc / l and lse = m + log(l) are written into whole-sequence buffers. Backward: for each key
// block, a loop over the query blocks that may see it recomputes p = exp(s - lse) and gathers dk
// and dv for that block; dq is added into a whole-sequence buffer tile by tile.
#include <algorithm>
#include <cmath>
#include <limits>

#include "backend/pjrt/hlo/lowering_helpers.h"
#include "core/error.h"

namespace lmt::hlo {

namespace {

using Values = std::vector<Value>;

// Shapes and the padded, head-grouped inputs both directions share.
struct Blocked {
  int64_t B, T, Hq, Hkv, G, D, bs, nb, Tp;  // bs: block size; nb blocks cover Tp >= T positions
  Value qg;                                 // [B, Hkv, G, Tp, D]
  Value kg, vg;                             // [B, Hkv, Tp, D]
  bool docs = false;                        // doc_start given
  Value doc;                                // [B, Tp] i32 (doc_start only)
  Value block_doc_min;                      // [nb] i32: the smallest doc_start in each block
};

// x padded along `dim` with `value` up to `size` positions.
Value pad(StablehloBuilder& b, const Value& x, int64_t dim, int64_t size, double value) {
  if (x.dims[dim] == size) return x;
  Dims dims = x.dims;
  dims[dim] = size - x.dims[dim];
  return b.concatenate({x, b.constant(value, x.dtype, dims)}, dim);
}

// [B, T, Hq, D] -> [B, Hkv, G, Tp, D], zero rows past T.
Value group_queries(StablehloBuilder& b, const Blocked& s, const Value& x) {
  const Value p = b.reshape(pad(b, x, 1, s.Tp, 0.0), {s.B, s.Tp, s.Hkv, s.G, s.D});
  return b.transpose(p, {0, 2, 3, 1, 4});
}

// [B, Hkv, G, Tp, D] -> [B, T, Hq, D].
Value ungroup_queries(StablehloBuilder& b, const Blocked& s, const Value& x) {
  const Value t = b.slice(x, {0, 0, 0, 0, 0}, {s.B, s.Hkv, s.G, s.T, s.D});
  return b.reshape(b.transpose(t, {0, 3, 1, 2, 4}), {s.B, s.T, s.Hq, s.D});
}

Value min_i32(StablehloBuilder& b, const Value& x, const Value& y) {
  return b.select(b.compare(x, y, CompareDir::lt), x, y);
}

Blocked prepare(StablehloBuilder& b, const Value& q, const Value& k, const Value& v,
                const Value* doc_start, int64_t block) {
  LMT_CHECK(q.rank() == 4 && k.dims == v.dims && k.rank() == 4 && k.dims[0] == q.dims[0] &&
                k.dims[1] == q.dims[1] && k.dims[3] == q.dims[3] && q.dims[2] % k.dims[2] == 0,
            "attention: q [B,T,Hq,D], k and v [B,T,Hkv,D]");
  LMT_CHECK(block > 0, "attention: block size must be positive");
  Blocked s;
  s.B = q.dims[0], s.T = q.dims[1], s.Hq = q.dims[2], s.Hkv = k.dims[2], s.D = q.dims[3];
  s.G = s.Hq / s.Hkv;
  s.bs = std::min(block, s.T);
  s.nb = (s.T + s.bs - 1) / s.bs;
  s.Tp = s.nb * s.bs;
  s.qg = group_queries(b, s, q);
  s.kg = b.transpose(pad(b, k, 1, s.Tp, 0.0), {0, 2, 1, 3});
  s.vg = b.transpose(pad(b, v, 1, s.Tp, 0.0), {0, 2, 1, 3});
  if (doc_start) {
    s.docs = true;
    LMT_CHECK(doc_start->dtype == DType::i32 && doc_start->dims == (Dims{s.B, s.T}),
              "attention: doc_start [B,T] i32");
    // Padded queries start their document at T: they see only padded keys, never an empty row.
    s.doc = pad(b, *doc_start, 1, s.Tp, double(s.T));
    const Value blocks = b.reshape(s.doc, {s.B, s.nb, s.bs});
    s.block_doc_min = b.negate(b.reduce_max(b.negate(blocks), {0, 2}));
  }
  return s;
}

// The scores of query block q0 against key block k0 ([B, Hkv, G, bs, bs], -inf where masked)
// and, with a softcap, tanh of the scaled scores (for the backward's derivative).
struct Tile {
  Value s, t;
};
Tile scores(StablehloBuilder& b, const AttentionArgsHlo& a, const Blocked& s, const Value& qb,
            const Value& kb, const Value& q0, const Value& k0) {
  const Dims S = {s.B, s.Hkv, s.G, s.bs, s.bs}, P = {s.bs, s.bs};
  const DType dt = compute_of(qb.dtype);
  Tile r;
  Value x = b.multiply(b.dot_general(qb, kb, {0, 1}, {0, 1}, {4}, {3}, dt), b.constant(a.scale, dt, S));
  if (a.softcap > 0) {
    r.t = b.tanh(b.divide(x, b.constant(a.softcap, dt, S)));
    x = b.multiply(b.constant(a.softcap, dt, S), r.t);
  }
  const Value i = b.add(b.iota(DType::i32, P, 0), b.broadcast_in_dim(q0, P, {}));
  const Value j = b.add(b.iota(DType::i32, P, 1), b.broadcast_in_dim(k0, P, {}));
  Value valid = b.compare(j, i, CompareDir::le);
  if (a.window > 0) {  // pred and: select(x, y, false)
    const Value in_window =
        b.compare(b.subtract(i, j), b.constant(double(a.window), DType::i32, P), CompareDir::lt);
    valid = b.select(valid, in_window, b.compare(i, i, CompareDir::ne));
  }
  Value full;
  if (s.docs) {  // keys from the query's document start on: [B, bs, bs]
    const Dims BP = {s.B, s.bs, s.bs};
    const Value starts = b.dynamic_slice(s.doc, {i32(b, 0), q0}, {s.B, s.bs});
    const Value jb = b.broadcast_in_dim(j, BP, {1, 2});
    const Value in_doc = b.compare(jb, b.broadcast_in_dim(starts, BP, {0, 1}), CompareDir::ge);
    const Value v3 = b.broadcast_in_dim(valid, BP, {1, 2});
    full =
        b.broadcast_in_dim(b.select(v3, in_doc, b.compare(jb, jb, CompareDir::ne)), S, {0, 3, 4});
  } else {
    full = b.broadcast_in_dim(valid, S, {3, 4});
  }
  r.s = b.select(full, x, b.constant(-INFINITY, dt, S));
  return r;
}

Value start_of(StablehloBuilder& b, const Blocked& s, const Value& block_index) {
  return b.multiply(block_index, i32(b, s.bs));
}

// The tile of x ([B, Hkv, G, Tp, ...] or [B, Hkv, Tp, D]) at position p0 along Tp.
Value tile(StablehloBuilder& b, const Blocked& s, const Value& x, const Value& p0, int64_t t_dim) {
  Values start(x.rank(), i32(b, 0));
  start[t_dim] = p0;
  Dims sizes = x.dims;
  sizes[t_dim] = s.bs;
  return b.dynamic_slice(x, start, sizes);
}
Value put_tile(StablehloBuilder& b, const Value& x, const Value& update, const Value& p0,
               int64_t t_dim) {
  Values start(x.rank(), i32(b, 0));
  start[t_dim] = p0;
  return b.dynamic_update_slice(x, update, start);
}

// The first key block any query of the block starting at q0 (block qi) may see.
Value first_key_block(StablehloBuilder& r, const AttentionArgsHlo& a, const Blocked& s,
                      const Value& qi, const Value& q0) {
  Value lo = i32(r, 0);
  if (a.window > 0) {
    const Value first = r.subtract(q0, i32(r, a.window - 1));
    lo = r.divide(r.maximum(first, i32(r, 0)), i32(r, s.bs));
  }
  if (s.docs) {
    const Value min_doc = r.reshape(r.dynamic_slice(s.block_doc_min, {qi}, {1}), {});
    lo = r.maximum(lo, r.divide(min_doc, i32(r, s.bs)));
  }
  return lo;
}

// The last query block that may see the key block ending at k_last. With documents: the last
// block whose smallest doc_start is at most k_last (blocks between that see none of its keys
// are computed fully masked).
Value last_query_block(StablehloBuilder& r, const AttentionArgsHlo& a, const Blocked& s,
                       const Value& k_last) {
  Value hi = i32(r, s.nb - 1);
  if (a.window > 0)
    hi = min_i32(r, hi, r.divide(r.add(k_last, i32(r, a.window - 1)), i32(r, s.bs)));
  if (s.docs) {
    const Value sees =
        r.compare(s.block_doc_min, r.broadcast_in_dim(k_last, {s.nb}, {}), CompareDir::le);
    const Value ids = r.iota(DType::i32, {s.nb}, 0), none = r.constant(-1, DType::i32, {s.nb});
    hi = min_i32(r, hi, r.reduce_max(r.select(sees, ids, none), {0}));
  }
  return hi;
}

// One key block of the forward's online softmax. state = {key block, m, l, acc}: the row max
// and sum [B,Hkv,G,bs] and the unnormalised output [B,Hkv,G,bs,D] of the query block qb at q0.
Values softmax_step(StablehloBuilder& w, const AttentionArgsHlo& a, const Blocked& s,
                    const Value& qb, const Value& q0, const Values& state) {
  auto rows = [&](const Value& x, const Dims& to) {
    return w.broadcast_in_dim(x, to, {0, 1, 2, 3});
  };
  const Value k0 = start_of(w, s, state[0]);
  const Tile t = scores(w, a, s, qb, tile(w, s, s.kg, k0, 2), q0, k0);
  const Value m = w.maximum(state[1], w.reduce_max(t.s, {4}));
  const Value p = w.exp(w.subtract(t.s, rows(m, t.s.dims)));
  const Value alpha = w.exp(w.subtract(state[1], m));
  const Value l = w.add(w.multiply(state[2], alpha), w.reduce_sum(p, {4}));
  const Value vb = tile(w, s, s.vg, k0, 2);
  const Value pv = w.dot_general(to(w, p, vb.dtype), vb, {0, 1}, {0, 1}, {4}, {2}, p.dtype);
  const Value acc = w.add(w.multiply(state[3], rows(alpha, state[3].dims)), pv);
  return {w.add(state[0], i32(w, 1)), m, l, acc};
}

// What the backward reads per query row, grouped and padded: dout [B,Hkv,G,Tp,D], and lse and
// delta = rowsum(dout o) [B,Hkv,G,Tp].
struct RowInputs {
  Value dout, lse, delta;
};

// One query block of the backward against the key block kb, vb at k0. state = {query block, dq
// [B,Hkv,G,Tp,D], dk and dv of the key block [B,Hkv,D,bs] (transposed)}. Per tile: dp = dout
// v^T, ds = p (dp - delta), through the cap ds (1 - t^2), times the scale; dq += ds k, dk += ds^T
// q, dv += p^T dout, the last two summed over the head group. dk and dv are formed transposed, as
// q^T ds and dout^T p: the contraction over the group and query dims then runs along both
// operands' rows, which XLA's CPU dot does three times faster than ds^T q (which transposes the
// tile first; measured at T = 8192).
Values backward_step(StablehloBuilder& w, const AttentionArgsHlo& a, const Blocked& s,
                     const RowInputs& in, const Value& kb, const Value& vb, const Value& k0,
                     const Values& state) {
  const Dims S = {s.B, s.Hkv, s.G, s.bs, s.bs};
  const DType lo = kb.dtype, dt = compute_of(lo);
  auto rows = [&](const Value& x) { return w.broadcast_in_dim(x, S, {0, 1, 2, 3}); };
  const Value q0 = start_of(w, s, state[0]);
  const Value qb = tile(w, s, s.qg, q0, 3), dob = tile(w, s, in.dout, q0, 3);
  const Tile t = scores(w, a, s, qb, kb, q0, k0);
  const Value p = w.exp(w.subtract(t.s, rows(tile(w, s, in.lse, q0, 3))));
  const Value dp = w.dot_general(dob, vb, {0, 1}, {0, 1}, {4}, {3}, dt);
  Value ds = w.multiply(p, w.subtract(dp, rows(tile(w, s, in.delta, q0, 3))));
  if (a.softcap > 0) ds = w.multiply(ds, w.subtract(w.constant(1.0, dt, S), w.multiply(t.t, t.t)));
  ds = to(w, w.multiply(ds, w.constant(a.scale, dt, S)), lo);
  const Value dq =
      w.add(tile(w, s, state[1], q0, 3), w.dot_general(ds, kb, {0, 1}, {0, 1}, {4}, {2}, dt));
  const Value dk = w.add(state[2], w.dot_general(qb, ds, {0, 1}, {0, 1}, {2, 3}, {2, 3}, dt));
  const Value dv =
      w.add(state[3], w.dot_general(dob, to(w, p, lo), {0, 1}, {0, 1}, {2, 3}, {2, 3}, dt));
  return {w.add(state[0], i32(w, 1)), put_tile(w, state[1], dq, q0, 3), dk, dv};
}

}  // namespace

AttentionOut attention_forward_blocked(StablehloBuilder& b, const AttentionArgsHlo& a,
                                       const Value& q, const Value& k, const Value& v,
                                       const Value* doc_start, int64_t block) {
  const Blocked s = prepare(b, q, k, v, doc_start, block);
  const DType lo = q.dtype, dt = compute_of(lo);
  const Dims row = {s.B, s.Hkv, s.G, s.bs}, acc = {s.B, s.Hkv, s.G, s.bs, s.D};
  const Values init = {i32(b, 0), b.constant(0.0, lo, {s.B, s.Hkv, s.G, s.Tp, s.D}),
                       b.constant(0.0, dt, {s.B, s.Hkv, s.G, s.Tp})};
  const Values done = b.while_loop(
      init,
      [&](StablehloBuilder& r, const Values& x) {
        return r.compare(x[0], i32(r, s.nb), CompareDir::lt);
      },
      [&](StablehloBuilder& r, const Values& x) {  // x = {query block, out, lse}
        const Value qi = x[0], q0 = start_of(r, s, qi);
        const Value qb = tile(r, s, s.qg, q0, 3);
        // m starts at the lowest finite value, not -inf: a row that has seen only masked keys
        // then gets p = exp(-inf - m) = 0 and alpha = 1, where -inf - -inf would give NaN.
        const Values state = r.while_loop(
            {first_key_block(r, a, s, qi, q0),
             r.constant(std::numeric_limits<float>::lowest(), dt, row), r.constant(0.0, dt, row),
             r.constant(0.0, dt, acc)},
            [&](StablehloBuilder& w, const Values& y) {
              return w.compare(y[0], qi, CompareDir::le);
            },
            [&](StablehloBuilder& w, const Values& y) { return softmax_step(w, a, s, qb, q0, y); });
        const Value o =
            to(r, r.divide(state[3], r.broadcast_in_dim(state[2], acc, {0, 1, 2, 3})), lo);
        const Value lse = r.add(state[1], r.log(state[2]));
        return Values{r.add(qi, i32(r, 1)), put_tile(r, x[1], o, q0, 3),
                      put_tile(r, x[2], lse, q0, 3)};
      });
  const Value lse = b.reshape(done[2], {s.B, s.Hq, s.Tp});
  return {ungroup_queries(b, s, done[1]), b.slice(lse, {0, 0, 0}, {s.B, s.Hq, s.T})};
}

AttentionGrads attention_backward_blocked(StablehloBuilder& b, const AttentionArgsHlo& a,
                                          const Value& dout, const Value& q, const Value& k,
                                          const Value& v, const Value& out, const Value& lse,
                                          const Value* doc_start, int64_t block) {
  const Blocked s = prepare(b, q, k, v, doc_start, block);
  LMT_CHECK(dout.dims == q.dims && out.dims == q.dims && lse.dims == (Dims{s.B, s.Hq, s.T}),
            "attention backward: dout and out [B,T,Hq,D], lse [B,Hq,T]");
  const DType dt = compute_of(q.dtype);
  RowInputs in;
  in.dout = group_queries(b, s, to(b, dout, q.dtype));
  in.delta = b.reduce_sum(
      b.multiply(to(b, in.dout, dt), to(b, group_queries(b, s, to(b, out, q.dtype)), dt)), {4});
  // Padded rows get lse = +inf: p = exp(s - lse) = 0 there.
  in.lse = b.reshape(pad(b, lse, 2, s.Tp, INFINITY), {s.B, s.Hkv, s.G, s.Tp});
  const Dims kv_tile = {s.B, s.Hkv, s.D, s.bs};  // transposed, as backward_step forms them
  const Values init = {i32(b, 0), b.constant(0.0, dt, s.qg.dims), b.constant(0.0, dt, s.kg.dims),
                       b.constant(0.0, dt, s.vg.dims)};  // gradients summed in the compute type
  const Values done = b.while_loop(
      init,
      [&](StablehloBuilder& r, const Values& x) {
        return r.compare(x[0], i32(r, s.nb), CompareDir::lt);
      },
      [&](StablehloBuilder& r, const Values& x) {  // x = {key block, dq, dk, dv}
        const Value kj = x[0], k0 = start_of(r, s, kj);
        const Value kb = tile(r, s, s.kg, k0, 2), vb = tile(r, s, s.vg, k0, 2);
        const Value hi = last_query_block(r, a, s, r.add(k0, i32(r, s.bs - 1)));
        const Values state = r.while_loop(
            {kj, x[1], r.constant(0.0, dt, kv_tile), r.constant(0.0, dt, kv_tile)},
            [&](StablehloBuilder& w, const Values& y) {
              return w.compare(y[0], hi, CompareDir::le);
            },
            [&](StablehloBuilder& w, const Values& y) {
              return backward_step(w, a, s, in, kb, vb, k0, y);
            });
        return Values{r.add(kj, i32(r, 1)), state[1],
                      put_tile(r, x[2], r.transpose(state[2], {0, 1, 3, 2}), k0, 2),
                      put_tile(r, x[3], r.transpose(state[3], {0, 1, 3, 2}), k0, 2)};
      });
  auto kv_out = [&](const Value& x) {  // [B, Hkv, Tp, D] -> [B, T, Hkv, D]
    return b.transpose(b.slice(x, {0, 0, 0, 0}, {s.B, s.Hkv, s.T, s.D}), {0, 2, 1, 3});
  };
  return {ungroup_queries(b, s, done[1]), kv_out(done[2]), kv_out(done[3])};
}

}  // namespace lmt::hlo

// The output head and its loss in StableHLO (see lowering.h): a chunk of rows' logits, loss and
// gradients at a time. More than one chunk is a stablehlo.while whose carried values are the loss
// sums, the whole input gradient (each chunk's rows written in place) and the head's weight
// gradient summed in f32: no more than one chunk's [rows, vocabulary] logits exist at once, and
// the weight gradient is one array however many chunks add to it (unrolled, XLA could keep every
// chunk's [V, C] product alive before summing them).
//
// The cut cross-entropy (HeadLossArgs::cut) also walks the vocabulary in tiles inside a chunk:
// a first loop keeps each row's running maximum, sum of exponentials, sum of logits and label
// logit (the online log-sum-exp); a second computes each tile's logits again, their gradient
// (backend/loss.h: a p + b [j == y] + c) and its products, added into the chunk's dh and, in
// place, into the weight gradient's rows of the tile. The last tile is clamped to end at V (no
// padded copy of the head): the ids it shares with the tile before it count once.
#include <algorithm>
#include <limits>

#include "backend/pjrt/hlo/lowering_helpers.h"
#include "core/error.h"

namespace lmt::hlo {
namespace {

struct ChunkOut {
  Value loss, ce, dh, dw;  // wide scalars; [n, C] in h's dtype; [V, C] in the compute type
};

// Rows hc [n, C] against labels lc [n], whole rows of logits at once. dw: the chunk's product.
ChunkOut chunk_loss(StablehloBuilder& b, const Value& hc, const Value& w, const Value& lc,
                    const HeadLossArgs& a, const Value* grad_scale, bool want_dw, WideForm sums) {
  const DType f = hc.dtype == DType::f64 ? DType::f64 : DType::f32;
  // The logits [n, V] in the rows' dtype, as the CPU backend holds them (bf16 with mixed
  // precision: half the memory of f32 logits); the loss widens them as it reads them.
  Value z = b.dot_general(hc, w, {}, {}, {1}, {1}, hc.dtype);
  if (z.dtype != f) z = b.convert(z, f);
  const CrossEntropy ce =
      cross_entropy(b, z, lc, a.ignore_index, grad_scale ? 1.0 : 0.0, a.softcap, a.loss);
  ChunkOut o;
  o.loss = wide_sum(b, ce.losses, sums);
  o.ce = a.loss.plain() ? o.loss : wide_sum(b, ce.ce, sums);
  if (!grad_scale) return o;
  Value d = b.multiply(ce.dlogits, b.broadcast_in_dim(*grad_scale, ce.dlogits.dims, {}));
  if (d.dtype != hc.dtype) d = b.convert(d, hc.dtype);  // the products in the rows' dtype
  o.dh = b.dot_general(d, w, {}, {}, {1}, {0}, f);      // [n, C]
  if (o.dh.dtype != hc.dtype) o.dh = b.convert(o.dh, hc.dtype);
  if (want_dw) o.dw = b.dot_general(d, hc, {}, {}, {0}, {0}, f);  // [V, C]
  return o;
}

// The cut cross-entropy of rows hc [n, C] against labels lc [n]. dw_acc: the weight gradient
// so far ([V, C], compute type), returned with this chunk's products added (want_dw).
ChunkOut cut_chunk_loss(StablehloBuilder& b, const Value& hc, const Value& w, const Value& lc,
                        const HeadLossArgs& a, const Value* grad_scale, const Value* dw_acc,
                        WideForm sums) {
  const int64_t n = hc.dims[0], C = hc.dims[1], V = w.dims[0], vt = a.vocab_tile;
  const int64_t tiles = (V + vt - 1) / vt;
  const DType f = hc.dtype == DType::f64 ? DType::f64 : DType::f32;
  const double inf = std::numeric_limits<double>::infinity();
  auto zeros = [&](StablehloBuilder& lb) { return lb.constant(0.0, f, {n}); };
  auto more = [&](StablehloBuilder& lb, const std::vector<Value>& v) {
    return lb.compare(v[0], i32(lb, tiles), CompareDir::lt);
  };
  // Walk 1: max, sum of exp(z - max), sum of z, the label's z.
  const std::vector<Value> stats = b.while_loop(
      {i32(b, 0), b.constant(-inf, f, {n}), zeros(b), zeros(b), zeros(b)}, more,
      [&](StablehloBuilder& lb, const std::vector<Value>& v) {
        const Tile t = vocab_tile(lb, v[0], hc, w, vt, a.softcap);
        const Value zero = lb.constant(0.0, f, {n, vt});
        const Value zm = lb.select(t.fresh, t.z, lb.constant(-inf, f, {n, vt}));
        const Value mx = lb.maximum(v[1], lb.reduce_max(zm, {1}));
        const Value e = lb.reduce_sum(lb.exp(lb.subtract(zm, rows(lb, mx, vt))), {1});
        const Value sum = lb.add(lb.multiply(v[2], lb.exp(lb.subtract(v[1], mx))), e);
        const Value z_sum = lb.add(v[3], lb.reduce_sum(lb.select(t.fresh, t.z, zero), {1}));
        const Value hit = lb.compare(t.ids, rows(lb, lc, vt), CompareDir::eq);
        const Value z_label =
            lb.add(v[4], lb.reduce_sum(lb.select(hit, lb.select(t.fresh, t.z, zero), zero), {1}));
        return std::vector<Value>{lb.add(v[0], i32(lb, 1)), mx, sum, z_sum, z_label};
      });
  const Value lse = b.add(stats[1], b.log(stats[2]));
  const Value valid = b.compare(lc, b.constant(a.ignore_index, DType::i32, {n}), CompareDir::ne);
  const RowLoss<Value> r = row_loss(b, a.loss, lse, stats[4], stats[3], V);
  ChunkOut o;
  o.loss = wide_sum(b, b.select(valid, r.objective, zeros(b)), sums);
  o.ce = a.loss.plain() ? o.loss : wide_sum(b, b.select(valid, r.ce, zeros(b)), sums);
  if (!grad_scale) return o;
  auto coef = [&](const Value& x) {  // x * grad_scale on valid rows, 0 on ignored ones
    return b.select(valid, b.multiply(x, b.broadcast_in_dim(*grad_scale, {n}, {})), zeros(b));
  };
  const Value ca = coef(r.a), cb = coef(r.b), cc = coef(r.c);
  // Walk 2: each tile's gradient and its products.
  std::vector<Value> init = {i32(b, 0), b.constant(0.0, f, {n, C})};
  if (dw_acc) init.push_back(*dw_acc);
  const std::vector<Value> out =
      b.while_loop(init, more, [&](StablehloBuilder& lb, const std::vector<Value>& v) {
        const Tile t = vocab_tile(lb, v[0], hc, w, vt, a.softcap);
        const Value zero = lb.constant(0.0, f, {n, vt});
        const Value p = lb.exp(lb.subtract(t.z, rows(lb, lse, vt)));
        const Value hit = lb.compare(t.ids, rows(lb, lc, vt), CompareDir::eq);
        Value d = lb.add(lb.multiply(rows(lb, ca, vt), p), rows(lb, cc, vt));
        d = lb.add(d, lb.select(hit, rows(lb, cb, vt), zero));
        if (a.softcap > 0) d = lb.multiply(d, t.deriv);
        d = lb.select(t.fresh, d, zero);  // ids the tile before counted
        if (d.dtype != hc.dtype) d = lb.convert(d, hc.dtype);
        const Value wt = lb.dynamic_slice(w, {t.start, i32(lb, 0)}, {vt, C});
        std::vector<Value> next = {lb.add(v[0], i32(lb, 1)),
                                   lb.add(v[1], lb.dot_general(d, wt, {}, {}, {1}, {0}, f))};
        if (dw_acc) {
          const std::vector<Value> at = {t.start, i32(lb, 0)};
          const Value rows = lb.dynamic_slice(v[2], at, {vt, C});
          const Value dwt = lb.dot_general(d, hc, {}, {}, {0}, {0}, f);  // [vt, C]
          next.push_back(lb.dynamic_update_slice(v[2], lb.add(rows, dwt), at));
        }
        return next;
      });
  o.dh = out[1].dtype != hc.dtype ? b.convert(out[1], hc.dtype) : out[1];
  if (dw_acc) o.dw = out[2];
  return o;
}

}  // namespace

Tile vocab_tile(StablehloBuilder& b, const Value& i, const Value& hc, const Value& w, int64_t vt,
                double softcap) {
  const int64_t n = hc.dims[0], C = hc.dims[1], V = w.dims[0];
  const DType f = hc.dtype == DType::f64 ? DType::f64 : DType::f32;
  Tile t;
  const Value nominal = b.multiply(i, i32(b, vt));
  const Value last = i32(b, V - vt);
  t.start = b.select(b.compare(nominal, last, CompareDir::lt), nominal, last);
  const Value wt = b.dynamic_slice(w, {t.start, i32(b, 0)}, {vt, C});
  t.z = b.dot_general(hc, wt, {}, {}, {1}, {1}, f);  // [n, vt]
  if (softcap > 0) {
    const Value th = b.tanh(b.divide(t.z, b.constant(softcap, f, {n, vt})));
    t.z = b.multiply(b.constant(softcap, f, {n, vt}), th);
    t.deriv = b.subtract(b.constant(1.0, f, {n, vt}), b.multiply(th, th));
  }
  t.ids = b.add(b.iota(DType::i32, {n, vt}, 1), b.broadcast_in_dim(t.start, {n, vt}, {}));
  t.fresh = b.compare(t.ids, b.broadcast_in_dim(nominal, {n, vt}, {}), CompareDir::ge);
  return t;
}

HeadLossOut head_loss(StablehloBuilder& b, const Value& h, const Value& w_in, const Value& labels,
                      const HeadLossArgs& a, const Value* grad_scale, bool want_dw, WideForm sums,
                      const TensorSharding& rows, const TensorSharding& head,
                      const TensorSharding& vocab) {
  LMT_CHECK(h.rank() == 2 && w_in.rank() == 2 && w_in.dims[1] == h.dims[1] &&
                w_in.dtype == h.dtype && labels.rank() == 1 && labels.dims[0] == h.dims[0] &&
                labels.dtype == DType::i32,
            "head_loss: h [N,C], w [V,C] of h's dtype, labels [N] i32");
  const int64_t N = h.dims[0], C = h.dims[1], V = w_in.dims[0];
  const int64_t chunk = std::max<int64_t>(1, std::min(a.chunk, N));
  const bool cut = a.vocab_tile > 0 && a.vocab_tile < V;
  const bool grads = grad_scale != nullptr, dw = grads && want_dw;
  const DType f = h.dtype == DType::f64 ? DType::f64 : DType::f32;
  // Split rows: G groups of n rows, a device's own rows a group's.
  const int64_t G = rows.empty() || rows[0].empty() ? 1 : b.shards(rows, 0);
  // Vocabulary-parallel (split rows, whole rows of logits): a chunk's rows gathered to every
  // device, the head split by vocabulary over the rows' axes too, so that each device makes the
  // logits, the softmax's share and the weight gradient of its own ids and nothing of the head
  // moves in the loop: a chunk gathers its rows' [G c, C] and reduce-scatters their gradient, and
  // the row statistics are all-reduced. Otherwise (the cut loss walks the vocabulary in tiles)
  // the head is gathered over the rows' axes once, before the loop: XLA does not hoist that
  // loop-invariant gather (8 H100s, Llama-3.1-8B: the head's bf16 weights gathered once a chunk),
  // and the chunks' weight gradients are reduced, once a chunk on the GPU.
  const bool by_vocab = G > 1 && !cut && vocab.size() == 2 && V % b.shards(vocab, 0) == 0;
  const Value w = by_vocab       ? b.sharding_constraint(w_in, vocab)
                  : head.empty() ? w_in
                                 : b.sharding_constraint(w_in, head);
  const TensorSharding whole(2), by_rows = {G > 1 ? rows[0] : std::vector<std::string>{}, {}};
  // One chunk's loss; dw_acc: the weight gradient so far, for the cut loss to add into.
  auto one = [&](StablehloBuilder& lb, const Value& hc_in, const Value& lc_in,
                 const Value* dw_acc) {
    if (cut) return cut_chunk_loss(lb, hc_in, w, lc_in, a, grad_scale, dw ? dw_acc : nullptr, sums);
    const Value hc = by_vocab ? lb.sharding_constraint(hc_in, whole) : hc_in;
    const Value lc = by_vocab ? lb.sharding_constraint(lc_in, {{}}) : lc_in;
    ChunkOut c = chunk_loss(lb, hc, w, lc, a, grad_scale, dw, sums);
    if (by_vocab && grads) c.dh = lb.sharding_constraint(c.dh, by_rows);
    if (by_vocab && dw) c.dw = lb.sharding_constraint(c.dw, vocab);
    if (dw && dw_acc) c.dw = lb.add(*dw_acc, c.dw);
    return c;
  };
  if (N == chunk) {
    const Value zero_dw = dw && cut ? b.constant(0.0, f, {V, C}) : Value();
    const ChunkOut c = one(b, h, labels, dw && cut ? &zero_dw : nullptr);
    return {c.loss, c.ce, c.dh, c.dw};
  }
  // Chunks of c rows of every group at once (G c rows: a.chunk is what one device holds at a
  // time, as on one device), so that a chunk's slice stays on its devices.
  const int64_t n = N / G, c = std::max<int64_t>(1, std::min(a.chunk, n));
  const int64_t chunks = (n + c - 1) / c, np = chunks * c;
  auto grouped = [&](StablehloBuilder& lb, const Value& x, const StablehloBuilder::Dims& dims) {
    const Value r = lb.reshape(x, dims);
    if (G == 1) return r;
    TensorSharding by_group(dims.size());  // the groups split as the rows were, the rest whole
    by_group[0] = rows[0];
    return lb.sharding_constraint(r, by_group);
  };
  Value hp = grouped(b, h, {G, n, C}), lp = grouped(b, labels, {G, n});
  if (np > n) {  // padded rows carry no label: no loss, no gradient
    hp = b.concatenate({hp, b.constant(0.0, h.dtype, {G, np - n, C})}, 1);
    lp = b.concatenate({lp, b.constant(a.ignore_index, DType::i32, {G, np - n})}, 1);
  }
  std::vector<Value> init = {i32(b, 0), wide_zero(b, sums), wide_zero(b, sums)};
  if (grads) init.push_back(grouped(b, b.constant(0.0, h.dtype, {G * np, C}), {G, np, C}));
  if (dw) {
    const Value zero_dw = b.constant(0.0, f, {V, C});
    init.push_back(by_vocab ? b.sharding_constraint(zero_dw, vocab) : zero_dw);
  }
  const std::vector<Value> out = b.while_loop(
      init,
      [&](StablehloBuilder& lb, const std::vector<Value>& v) {
        return lb.compare(v[0], i32(lb, chunks), CompareDir::lt);
      },
      [&](StablehloBuilder& lb, const std::vector<Value>& v) {
        const Value start = lb.multiply(v[0], i32(lb, c));
        const Value zero = i32(lb, 0);
        const Value hc =
            lb.reshape(lb.dynamic_slice(hp, {zero, start, zero}, {G, c, C}), {G * c, C});
        const Value lc = lb.reshape(lb.dynamic_slice(lp, {zero, start}, {G, c}), {G * c});
        const ChunkOut o = one(lb, hc, lc, dw ? &v[4] : nullptr);
        std::vector<Value> next = {lb.add(v[0], i32(lb, 1)), wide_add(lb, v[1], o.loss),
                                   wide_add(lb, v[2], o.ce)};
        if (grads)
          next.push_back(
              lb.dynamic_update_slice(v[3], grouped(lb, o.dh, {G, c, C}), {zero, start, zero}));
        if (dw) next.push_back(o.dw);
        return next;
      });
  HeadLossOut r;
  r.loss_sum = out[1];
  r.ce_sum = out[2];
  if (grads) r.dh = b.reshape(np > n ? b.slice(out[3], {0, 0, 0}, {G, n, C}) : out[3], {N, C});
  if (dw) r.dw = out[4];
  return r;
}

}  // namespace lmt::hlo

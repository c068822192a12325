// Per-token scores in StableHLO (see lowering.h): each labelled row's log_softmax at its label
// and whether the label is the row's argmax, as the CPU backend's cpu_token_logprobs.cpp computes
// them. StableHLO has no argmin, so the lowest id of a row's maxima is a max over negated ids:
// -max_j(z_j == max ? -j : -V). The head's form mirrors head_loss.cpp's: a loop over chunks of
// rows, each writing its rows' scores in place into [N] results (no [N, V] logits at once), and
// with vocabulary tiles a loop over them carrying each row's online log-sum-exp, maximum and its
// id. Rows split over a mesh are not grouped by device as head_loss groups them: a chunk's slice
// may gather rows (correct, and an evaluation's head is small beside its trunk).
#include <algorithm>
#include <limits>

#include "backend/pjrt/hlo/lowering_helpers.h"
#include "core/error.h"

namespace lmt::hlo {
namespace {

// The lowest id where z [n, m] (ids [n, m] i32) equals its row's max mx [n]; among `mask`'s
// columns only when given. A row with no such column (NaN) gets `none`.
Value first_max_id(StablehloBuilder& b, const Value& z, const Value& ids, const Value& mx,
                   const Value* mask, int64_t none) {
  const int64_t m = z.dims[1];
  Value hit = b.compare(z, rows(b, mx, m), CompareDir::eq);
  if (mask) hit = b.select(*mask, hit, *mask);  // hit and mask
  const Value neg =
      b.select(hit, b.negate(ids), b.constant(-static_cast<double>(none), DType::i32, ids.dims));
  return b.negate(b.reduce_max(neg, {1}));
}

// The scores of rows from their statistics: log-sum-exp, label logit, argmax [n].
TokenScores row_scores(StablehloBuilder& b, const Value& lse, const Value& z_label,
                       const Value& argmax, const Value& labels, int32_t ignore_index) {
  const int64_t n = labels.dims[0];
  const Value valid = b.compare(labels, b.constant(ignore_index, DType::i32, {n}), CompareDir::ne);
  const Value hit = b.compare(argmax, labels, CompareDir::eq);
  const Value zero_i = b.constant(0.0, DType::i32, {n});
  TokenScores s;
  s.logprobs = b.select(valid, b.subtract(z_label, lse), b.constant(0.0, lse.dtype, {n}));
  s.greedy = b.select(valid, b.convert(hit, DType::i32), zero_i);
  return s;
}

// One chunk hc [n, C] walked over the vocabulary in tiles of vt ids.
TokenScores cut_chunk_scores(StablehloBuilder& b, const Value& hc, const Value& w, const Value& lc,
                             const HeadLossArgs& a) {
  const int64_t n = hc.dims[0], V = w.dims[0], vt = a.vocab_tile;
  const int64_t tiles = (V + vt - 1) / vt;
  const DType f = compute_of(hc.dtype);
  const double inf = std::numeric_limits<double>::infinity();
  // Carried: tile, max, sum of exp(z - max), argmax, label logit.
  const std::vector<Value> st = b.while_loop(
      {i32(b, 0), b.constant(-inf, f, {n}), b.constant(0.0, f, {n}),
       b.constant(static_cast<double>(V), DType::i32, {n}), b.constant(0.0, f, {n})},
      [&](StablehloBuilder& lb, const std::vector<Value>& v) {
        return lb.compare(v[0], i32(lb, tiles), CompareDir::lt);
      },
      [&](StablehloBuilder& lb, const std::vector<Value>& v) {
        const Tile t = vocab_tile(lb, v[0], hc, w, vt, a.softcap);
        const Value zero = lb.constant(0.0, f, {n, vt});
        const Value zm = lb.select(t.fresh, t.z, lb.constant(-inf, f, {n, vt}));
        const Value tmax = lb.reduce_max(zm, {1});
        const Value mx = lb.maximum(v[1], tmax);
        const Value e = lb.reduce_sum(lb.exp(lb.subtract(zm, rows(lb, mx, vt))), {1});
        const Value sum = lb.add(lb.multiply(v[2], lb.exp(lb.subtract(v[1], mx))), e);
        // Only a strictly greater maximum moves the argmax: earlier tiles hold lower ids.
        const Value targ = first_max_id(lb, zm, t.ids, tmax, &t.fresh, V);
        const Value arg = lb.select(lb.compare(tmax, v[1], CompareDir::gt), targ, v[3]);
        const Value hit = lb.compare(t.ids, rows(lb, lc, vt), CompareDir::eq);
        const Value z_label =
            lb.add(v[4], lb.reduce_sum(lb.select(hit, lb.select(t.fresh, t.z, zero), zero), {1}));
        return std::vector<Value>{lb.add(v[0], i32(lb, 1)), mx, sum, arg, z_label};
      });
  return row_scores(b, b.add(st[1], b.log(st[2])), st[4], st[3], lc, a.ignore_index);
}

// One chunk hc [n, C], whole rows of logits, formed in the rows' dtype as head_loss's are.
TokenScores chunk_scores(StablehloBuilder& b, const Value& hc, const Value& w, const Value& lc,
                         const HeadLossArgs& a) {
  if (a.cut()) return cut_chunk_scores(b, hc, w, lc, a);
  const Value z = to(b, b.dot_general(hc, w, {}, {}, {1}, {1}, hc.dtype), compute_of(hc.dtype));
  return token_logprobs(b, z, lc, a.ignore_index, a.softcap);
}

}  // namespace

TokenScores token_logprobs(StablehloBuilder& b, const Value& logits, const Value& labels,
                           int32_t ignore_index, double softcap) {
  LMT_CHECK(logits.rank() == 2 && labels.rank() == 1 && labels.dtype == DType::i32 &&
                labels.dims[0] == logits.dims[0],
            "token_logprobs: logits [N,V], labels [N] i32");
  const int64_t N = logits.dims[0], V = logits.dims[1];
  Value z = logits;
  if (softcap > 0)
    z = b.multiply(scalar(b, softcap, z), b.tanh(b.divide(z, scalar(b, softcap, z))));
  const Value mx = b.reduce_max(z, {1});
  const Value lse = b.add(b.log(b.reduce_sum(b.exp(b.subtract(z, rows(b, mx, V))), {1})), mx);
  const Value ids = b.iota(DType::i32, {N, V}, 1);
  const Value hit = b.compare(ids, rows(b, labels, V), CompareDir::eq);
  const Value z_label = b.reduce_sum(b.select(hit, z, scalar(b, 0.0, z)), {1});
  return row_scores(b, lse, z_label, first_max_id(b, z, ids, mx, nullptr, V), labels, ignore_index);
}

TokenScores head_logprobs(StablehloBuilder& b, const Value& h, const Value& w, const Value& labels,
                          const HeadLossArgs& a) {
  LMT_CHECK(h.rank() == 2 && w.rank() == 2 && w.dims[1] == h.dims[1] && w.dtype == h.dtype &&
                labels.rank() == 1 && labels.dims[0] == h.dims[0] && labels.dtype == DType::i32,
            "head_logprobs: h [N,C], w [V,C] of h's dtype, labels [N] i32");
  const int64_t N = h.dims[0], C = h.dims[1];
  const int64_t c = std::max<int64_t>(1, std::min(a.chunk, N));
  if (N == c) return chunk_scores(b, h, w, labels, a);
  const int64_t chunks = (N + c - 1) / c, np = chunks * c;
  const DType f = compute_of(h.dtype);
  Value hp = h, lp = labels;
  if (np > N) {  // padded rows carry no label
    hp = b.concatenate({hp, b.constant(0.0, h.dtype, {np - N, C})}, 0);
    lp = b.concatenate({lp, b.constant(a.ignore_index, DType::i32, {np - N})}, 0);
  }
  const std::vector<Value> out = b.while_loop(
      {i32(b, 0), b.constant(0.0, f, {np}), b.constant(0.0, DType::i32, {np})},
      [&](StablehloBuilder& lb, const std::vector<Value>& v) {
        return lb.compare(v[0], i32(lb, chunks), CompareDir::lt);
      },
      [&](StablehloBuilder& lb, const std::vector<Value>& v) {
        const Value start = lb.multiply(v[0], i32(lb, c));
        const Value hc = lb.dynamic_slice(hp, {start, i32(lb, 0)}, {c, C});
        const Value lc = lb.dynamic_slice(lp, {start}, {c});
        const TokenScores s = chunk_scores(lb, hc, w, lc, a);
        return std::vector<Value>{lb.add(v[0], i32(lb, 1)),
                                  lb.dynamic_update_slice(v[1], s.logprobs, {start}),
                                  lb.dynamic_update_slice(v[2], s.greedy, {start})};
      });
  TokenScores s{out[1], out[2]};
  if (np > N) s = {b.slice(s.logprobs, {0}, {N}), b.slice(s.greedy, {0}, {N})};
  return s;
}

}  // namespace lmt::hlo

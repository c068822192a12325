// The output head and its cross-entropy in StableHLO (see lowering.h): a chunk of rows' logits,
// loss and gradients at a time. More than one chunk is a stablehlo.while whose carried values are
// the loss sum, the whole input gradient (each chunk's rows written in place) and the head's
// weight gradient summed in f32: no more than one chunk's [rows, vocabulary] logits exist at once,
// and the weight gradient is one array however many chunks add to it (unrolled, XLA could keep
// every chunk's [V, C] product alive before summing them).
#include <algorithm>

#include "backend/pjrt/lowering.h"
#include "core/error.h"

namespace lmt::hlo {
namespace {

using Dims = std::vector<int64_t>;

struct ChunkOut {
  Value loss, dh, dw;  // f64 scalar; [n, C] in h's dtype; [V, C] in the compute type
};

// Rows hc [n, C] against labels lc [n].
ChunkOut chunk_loss(StablehloBuilder& b, const Value& hc, const Value& w, const Value& lc,
                    int32_t ignore_index, double softcap, const Value* grad_scale, bool want_dw) {
  const DType f = hc.dtype == DType::f64 ? DType::f64 : DType::f32;
  const Value z = b.dot_general(hc, w, {}, {}, {1}, {1}, f);  // [n, V]
  const CrossEntropy ce = cross_entropy(b, z, lc, ignore_index, grad_scale ? 1.0 : 0.0, softcap);
  ChunkOut o;
  o.loss = b.reduce_sum(b.convert(ce.losses, DType::f64), {0});
  if (!grad_scale) return o;
  Value d = b.multiply(ce.dlogits, b.broadcast_in_dim(*grad_scale, ce.dlogits.dims, {}));
  if (d.dtype != hc.dtype) d = b.convert(d, hc.dtype);  // the products in the rows' dtype
  o.dh = b.dot_general(d, w, {}, {}, {1}, {0}, f);      // [n, C]
  if (o.dh.dtype != hc.dtype) o.dh = b.convert(o.dh, hc.dtype);
  if (want_dw) o.dw = b.dot_general(d, hc, {}, {}, {0}, {0}, f);  // [V, C]
  return o;
}

Value i32(StablehloBuilder& b, int64_t v) {
  return b.constant(static_cast<double>(v), DType::i32);
}

}  // namespace

HeadLossOut head_loss(StablehloBuilder& b, const Value& h, const Value& w, const Value& labels,
                      int64_t chunk, int32_t ignore_index, double softcap, const Value* grad_scale,
                      bool want_dw) {
  LMT_CHECK(h.rank() == 2 && w.rank() == 2 && w.dims[1] == h.dims[1] && w.dtype == h.dtype &&
                labels.rank() == 1 && labels.dims[0] == h.dims[0] && labels.dtype == DType::i32,
            "head_loss: h [N,C], w [V,C] of h's dtype, labels [N] i32");
  const int64_t N = h.dims[0], C = h.dims[1], V = w.dims[0];
  chunk = std::max<int64_t>(1, std::min(chunk, N));
  if (N == chunk) {
    const ChunkOut c = chunk_loss(b, h, w, labels, ignore_index, softcap, grad_scale, want_dw);
    return {c.loss, c.dh, c.dw};
  }
  const int64_t chunks = (N + chunk - 1) / chunk, Np = chunks * chunk;
  const DType f = h.dtype == DType::f64 ? DType::f64 : DType::f32;
  Value hp = h, lp = labels;
  if (Np > N) {  // padded rows carry no label: no loss, no gradient
    hp = b.concatenate({h, b.constant(0.0, h.dtype, {Np - N, C})}, 0);
    lp = b.concatenate({labels, b.constant(ignore_index, DType::i32, {Np - N})}, 0);
  }
  const bool grads = grad_scale != nullptr, dw = grads && want_dw;
  std::vector<Value> init = {i32(b, 0), b.constant(0.0, DType::f64)};
  if (grads) init.push_back(b.constant(0.0, h.dtype, {Np, C}));
  if (dw) init.push_back(b.constant(0.0, f, {V, C}));
  const std::vector<Value> out = b.while_loop(
      init,
      [&](StablehloBuilder& lb, const std::vector<Value>& v) {
        return lb.compare(v[0], i32(lb, chunks), CompareDir::lt);
      },
      [&](StablehloBuilder& lb, const std::vector<Value>& v) {
        const Value start = lb.multiply(v[0], i32(lb, chunk));
        const Value zero = i32(lb, 0);
        const Value hc = lb.dynamic_slice(hp, {start, zero}, {chunk, C});
        const Value lc = lb.dynamic_slice(lp, {start}, {chunk});
        const ChunkOut c = chunk_loss(lb, hc, w, lc, ignore_index, softcap, grad_scale, dw);
        std::vector<Value> next = {lb.add(v[0], i32(lb, 1)), lb.add(v[1], c.loss)};
        if (grads) next.push_back(lb.dynamic_update_slice(v[2], c.dh, {start, zero}));
        if (dw) next.push_back(lb.add(v[3], c.dw));
        return next;
      });
  HeadLossOut r;
  r.loss_sum = out[1];
  if (grads) r.dh = Np > N ? b.slice(out[2], {0, 0}, {N, C}) : out[2];
  if (dw) r.dw = out[3];
  return r;
}

}  // namespace lmt::hlo

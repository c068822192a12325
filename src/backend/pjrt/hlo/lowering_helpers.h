// What the lowerings (hlo/*.cpp) share: broadcasts of rows and columns, constants shaped like a
// value, and the type a low-precision input computes in. For the files of hlo/ only; callers of the
// lowerings include lowering.h.
#pragma once

#include <cstdint>
#include <numeric>
#include <vector>

#include "backend/pjrt/hlo/lowering.h"

namespace lmt::hlo {

using Dims = std::vector<int64_t>;

// x[N] (any rows [rows...]) repeated along C: [N, C] ([rows..., C]).
inline Value rows(StablehloBuilder& b, const Value& x, int64_t C) {
  Dims dims = x.dims, axes(x.dims.size());
  dims.push_back(C);
  std::iota(axes.begin(), axes.end(), int64_t{0});
  return b.broadcast_in_dim(x, dims, axes);
}

// w[C] repeated for rows [N] (any [rows...]): [N, C] ([rows..., C]).
inline Value cols(StablehloBuilder& b, const Value& w, Dims lead) {
  const auto at = static_cast<int64_t>(lead.size());
  lead.push_back(w.dims[0]);
  return b.broadcast_in_dim(w, lead, {at});
}

// v in like's type and shape.
inline Value scalar(StablehloBuilder& b, double v, const Value& like) {
  return b.constant(v, like.dtype, like.dims);
}

// An i32 scalar (loop counters, dynamic-slice starts).
inline Value i32(StablehloBuilder& b, int64_t v) {
  return b.constant(static_cast<double>(v), DType::i32);
}

// The type scores, softmax statistics and sums are formed in: f32 for bf16 and f16 inputs (whose
// products run in their own type with f32 accumulation), else the inputs' own.
inline DType compute_of(DType t) {
  return t == DType::bf16 || t == DType::f16 ? DType::f32 : t;
}

// x in type t (x itself when it has it).
inline Value to(StablehloBuilder& b, const Value& x, DType t) {
  return x.dtype == t ? x : b.convert(x, t);
}

// One vocabulary tile of a chunk's rows hc [n, C] against the head w [V, C], tile i of vt ids
// (head_loss.cpp; the cut cross-entropy's and head_logprobs' walks): its first id (clamped so
// the tile ends by V), the capped logits [n, vt] in the compute type, d capped / d logit
// (softcap only), whether each column is new to this tile (not in the one before it), and the
// columns' token ids.
struct Tile {
  Value start, z, deriv, fresh, ids;
};
Tile vocab_tile(StablehloBuilder& b, const Value& i, const Value& hc, const Value& w, int64_t vt,
                double softcap);

}  // namespace lmt::hlo

// StablehloBuilder's folding (see builder.h): reshape, slice, concatenate and dot_general look
// through the reshapes, slices and concatenations that made their operands before they emit an
// op. Every rule moves data only, except a product split along a contracted dimension (a sum of
// products), which happens under split_concatenations alone.
#include <algorithm>

#include "backend/pjrt/hlo/builder.h"
#include "core/error.h"

namespace lmt {
namespace {

using Value = StablehloBuilder::Value;
using Dims = StablehloBuilder::Dims;

int64_t count(const Dims& dims, size_t from = 0) {
  int64_t n = 1;
  for (size_t i = from; i < dims.size(); ++i) n *= dims[i];
  return n;
}

bool same_value(const Value& a, const Value& b) {
  return a.builder == b.builder && a.index == b.index && a.is_param == b.is_param &&
         a.block_arg == b.block_arg && a.result == b.result;
}

// Where dimension d of a dot operand of `rank` lands among its free dimensions (-1: batch or
// contracted).
int64_t free_index(int64_t rank, const Dims& batch, const Dims& contract, int64_t d) {
  int64_t k = 0;
  for (int64_t i = 0; i < rank; ++i) {
    const bool used = std::find(batch.begin(), batch.end(), i) != batch.end() ||
                      std::find(contract.begin(), contract.end(), i) != contract.end();
    if (i == d) return used ? -1 : k;
    if (!used) ++k;
  }
  return -1;
}

}  // namespace

const StablehloBuilder::Def& StablehloBuilder::def_of(const Value& v) const {
  static const Def none;
  if (v.is_param || v.block_arg || v.result >= 0 || v.builder != id_ || v.index < 0 ||
      static_cast<size_t>(v.index) >= defs_.size())
    return none;
  return defs_[static_cast<size_t>(v.index)];
}

const Value* StablehloBuilder::reuse(const std::string& op) const {
  const auto it = emitted_.find(op);
  if (it == emitted_.end()) return nullptr;
  // Only where it is visible: a value made inside a closed region is not.
  const bool visible =
      std::find(open_scopes_.begin(), open_scopes_.end(), it->second.scope) != open_scopes_.end();
  return visible ? &it->second : nullptr;
}

void StablehloBuilder::emit(const Value& r, const std::string& op, Def d) {
  lines_.push_back(name(r) + " = " + op);
  emitted_[op] = r;
  if (defs_.size() <= static_cast<size_t>(r.index)) defs_.resize(static_cast<size_t>(r.index) + 1);
  defs_[static_cast<size_t>(r.index)] = std::move(d);
}

const std::vector<Value>* StablehloBuilder::pieces_of(const Value& v, int64_t dim) const {
  const Def& d = def_of(v);
  return d.kind == Def::concatenate && (dim < 0 || d.dim == dim) ? &d.in : nullptr;
}

Value StablehloBuilder::unflattened(const Value& x) const {
  const Def& d = def_of(x);
  return d.kind == Def::reshape ? d.in[0] : x;
}

Value StablehloBuilder::reshape(const Value& x, Dims dims) {
  check_mine(x);
  LMT_CHECK(count(x.dims) == count(dims), "StableHLO reshape: element counts differ");
  if (x.dims == dims) return x;
  const Def d = def_of(x);  // a copy: the ops emitted below may move defs_
  if (d.kind == Def::reshape) return reshape(d.in[0], std::move(dims));
  // A concatenation along dimension 0 is one of the pieces' elements in order: reshaped to rows
  // of S elements, it is the concatenation of the pieces' rows where each piece is whole rows.
  if (d.kind == Def::concatenate && d.dim == 0 && dims.size() >= 2) {
    const int64_t S = count(dims, 1);
    bool rows = S > 0;
    for (const Value& p : d.in) rows = rows && count(p.dims) % S == 0;
    if (rows) {
      std::vector<Value> pieces;
      for (const Value& p : d.in) {
        Dims pd = dims;
        pd[0] = count(p.dims) / S;
        pieces.push_back(reshape(p, std::move(pd)));
      }
      return concatenate(pieces, 0);
    }
  }
  // A concatenation along dimension c, reshaped so that the dimensions before c merge or split
  // among themselves, and those after c among themselves, with c kept: concatenated the same way.
  if (d.kind == Def::concatenate && x.dims[d.dim] > 0) {
    const int64_t c = d.dim, before = count(Dims(x.dims.begin(), x.dims.begin() + c));
    int64_t lead = 1;
    for (size_t k = 0; k < dims.size(); lead *= dims[k], ++k) {
      if (lead != before || dims[k] != x.dims[c]) continue;
      std::vector<Value> pieces;
      for (const Value& p : d.in) {
        Dims pd = dims;
        pd[k] = p.dims[c];
        pieces.push_back(reshape(p, std::move(pd)));
      }
      return concatenate(pieces, static_cast<int64_t>(k));
    }
  }
  return emit_reshape(x, std::move(dims));
}

Value StablehloBuilder::slice(const Value& x, Dims start, Dims limit, Dims stride) {
  check_mine(x);
  if (stride.empty()) stride.assign(x.dims.size(), 1);
  bool fold = int64_t(start.size()) == x.rank() && int64_t(limit.size()) == x.rank() &&
              int64_t(stride.size()) == x.rank();
  for (int64_t d = 0; fold && d < x.rank(); ++d)
    fold = stride[d] == 1 && 0 <= start[d] && start[d] < limit[d] && limit[d] <= x.dims[d];
  return fold ? fold_slice(x, start, limit) : emit_slice(x, start, limit, stride);
}

// A slice of stride 1, not empty, inside x.
Value StablehloBuilder::fold_slice(const Value& x, const Dims& start, const Dims& limit) {
  const int64_t rank = x.rank();
  bool whole = true;
  for (int64_t d = 0; d < rank; ++d) whole = whole && start[d] == 0 && limit[d] == x.dims[d];
  if (whole) return x;
  const Def def = def_of(x);     // a copy: the ops emitted below may move defs_
  if (def.kind == Def::slice) {  // a slice of a slice
    Dims s = def.start, l = def.start;
    for (int64_t d = 0; d < rank; ++d) s[d] += start[d], l[d] += limit[d];
    return fold_slice(def.in[0], s, l);
  }
  if (def.kind == Def::concatenate) {  // the pieces it covers, each sliced as the whole is
    const int64_t c = def.dim;
    std::vector<Value> pieces;
    int64_t off = 0;
    for (const Value& p : def.in) {
      const int64_t lo = std::max(start[c], off), hi = std::min(limit[c], off + p.dims[c]);
      if (lo < hi) {
        Dims s = start, l = limit;
        s[c] = lo - off, l[c] = hi - off;
        pieces.push_back(fold_slice(p, s, l));
      }
      off += p.dims[c];
    }
    return pieces.size() == 1 ? pieces[0] : concatenate(pieces, c);
  }
  if (def.kind == Def::reshape) {
    const Value& y = def.in[0];
    bool rows = true;  // whole along every dimension but the first
    for (int64_t d = 1; d < rank; ++d) rows = rows && start[d] == 0 && limit[d] == x.dims[d];
    const int64_t S = count(x.dims, 1);
    if (rows && y.rank() == 1) {  // rows of a reshaped flat value: a range of it
      Dims dims = x.dims;
      dims[0] = limit[0] - start[0];
      return reshape(fold_slice(y, {start[0] * S}, {limit[0] * S}), dims);
    }
    if (rank == 1 && y.rank() >= 2) {  // a flat range of whole rows of y
      const int64_t R = count(y.dims, 1);
      if (R > 0 && start[0] % R == 0 && limit[0] % R == 0) {
        Dims s(y.dims.size(), 0), l = y.dims;
        s[0] = start[0] / R, l[0] = limit[0] / R;
        return reshape(fold_slice(y, s, l), {limit[0] - start[0]});
      }
    }
  }
  return emit_slice(x, start, limit, Dims(start.size(), 1));
}

Value StablehloBuilder::concatenate(const std::vector<Value>& xs, int64_t dim) {
  std::vector<Value> out;
  auto add = [&](const Value& v) {
    // Adjacent slices of one value along `dim`, alike elsewhere: one slice.
    if (!out.empty()) {
      const Def a = def_of(out.back()), b = def_of(v);
      bool next = a.kind == Def::slice && b.kind == Def::slice && same_value(a.in[0], b.in[0]) &&
                  dim < static_cast<int64_t>(a.start.size()) && a.limit[dim] == b.start[dim];
      for (size_t d = 0; next && d < a.start.size(); ++d)
        next = int64_t(d) == dim || (a.start[d] == b.start[d] && a.limit[d] == b.limit[d]);
      if (next) {
        Dims l = a.limit;
        l[dim] = b.limit[dim];
        out.back() = fold_slice(a.in[0], a.start, l);
        return;
      }
    }
    out.push_back(v);
  };
  for (const Value& x : xs) {
    check_mine(x);
    if (const std::vector<Value>* p = pieces_of(x, dim)) {
      for (const Value& v : std::vector<Value>(*p)) add(v);
    } else {
      add(x);
    }
  }
  if (out.size() == 1) return out[0];
  return emit_concatenate(out, dim);
}

Value StablehloBuilder::dot_general(const Value& lhs, const Value& rhs, Dims lhs_batch,
                                    Dims rhs_batch, Dims lhs_contract, Dims rhs_contract,
                                    DType result) {
  if (split_) {
    if (std::optional<Value> r =
            split_dot(lhs, rhs, lhs_batch, rhs_batch, lhs_contract, rhs_contract, result))
      return *r;
  }
  return emit_dot(lhs, rhs, lhs_batch, rhs_batch, lhs_contract, rhs_contract, result);
}

// A product with an operand concatenated along a free dimension: the products with its pieces,
// concatenated where that dimension lands in the result. Both operands concatenated alike along a
// pair of contracted dimensions: the sum of the pieces' products.
std::optional<Value> StablehloBuilder::split_dot(const Value& lhs, const Value& rhs, const Dims& lb,
                                                 const Dims& rb, const Dims& lc, const Dims& rc,
                                                 DType result) {
  // Copies: the ops emitted below may move defs_.
  const Def dl_def = def_of(lhs), dr_def = def_of(rhs);
  const std::vector<Value>* pl = dl_def.kind == Def::concatenate ? &dl_def.in : nullptr;
  const std::vector<Value>* pr = dr_def.kind == Def::concatenate ? &dr_def.in : nullptr;
  if (pl) {
    const int64_t k = free_index(lhs.rank(), lb, lc, dl_def.dim);
    if (k >= 0) {
      std::vector<Value> out;
      for (const Value& p : *pl) out.push_back(dot_general(p, rhs, lb, rb, lc, rc, result));
      return concatenate(out, static_cast<int64_t>(lb.size()) + k);
    }
  }
  if (pr) {
    const int64_t k = free_index(rhs.rank(), rb, rc, dr_def.dim);
    if (k >= 0) {
      const int64_t lhs_free = lhs.rank() - static_cast<int64_t>(lb.size() + lc.size());
      std::vector<Value> out;
      for (const Value& p : *pr) out.push_back(dot_general(lhs, p, lb, rb, lc, rc, result));
      return concatenate(out, static_cast<int64_t>(lb.size()) + lhs_free + k);
    }
  }
  if (pl && pr && pl->size() == pr->size()) {
    const int64_t dl = dl_def.dim, dr = dr_def.dim;
    bool paired = false;
    for (size_t i = 0; i < lc.size(); ++i) paired = paired || (lc[i] == dl && rc[i] == dr);
    for (size_t i = 0; paired && i < pl->size(); ++i)
      paired = (*pl)[i].dims[dl] == (*pr)[i].dims[dr];
    if (paired) {  // summed in f32 at least, as one product accumulates, then rounded once
      const DType acc = result == DType::bf16 || result == DType::f16 ? DType::f32 : result;
      const std::vector<Value> a = *pl, b = *pr;
      Value sum = dot_general(a[0], b[0], lb, rb, lc, rc, acc);
      for (size_t i = 1; i < a.size(); ++i)
        sum = add(sum, dot_general(a[i], b[i], lb, rb, lc, rc, acc));
      return acc == result ? sum : convert(sum, result);
    }
  }
  return std::nullopt;
}

}  // namespace lmt

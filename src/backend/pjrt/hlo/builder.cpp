// StablehloBuilder: type rules of the StableHLO ops it emits (the spec's shape inference, only as
// far as lmtrain uses each op) and their pretty-form MLIR text. Numbers in constants are printed
// as the shortest decimal that parses back to the same value of the element type; the
// non-finite ones (MLIR has no literal for them) as the element type's bits in hex.
#include "backend/pjrt/hlo/builder.h"

#include <algorithm>
#include <atomic>
#include <bit>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <limits>
#include <sstream>

#include "backend/pjrt/hlo/builder_text.h"
#include "core/error.h"

namespace lmt {
namespace shlo {

std::string element_type(DType t) {
  if (t == DType::u8) return "ui8";  // raw bytes (the PJRT backend's untyped uploads)
  LMT_CHECK(
      t == DType::f32 || t == DType::f64 || t == DType::bf16 || t == DType::f16 || t == DType::i32,
      "StableHLO: no element type for " + std::string(dtype_name(t)));
  return std::string(dtype_name(t));
}

std::string join(const std::vector<int64_t>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s;
}

std::string signature(const std::vector<HloValue>& in, const HloValue& out) {
  std::string s = "(";
  for (size_t i = 0; i < in.size(); ++i) s += (i ? ", " : "") + mlir_tensor_type(in[i]);
  return s + ") -> " + mlir_tensor_type(out);
}

void check_dims(const std::vector<int64_t>& dims, int64_t n, const char* what) {
  std::vector<bool> seen(n, false);
  for (int64_t d : dims) {
    LMT_CHECK(d >= 0 && d < n && !seen[d], std::string(what) + ": bad dimension " +
                                               std::to_string(d) + " of rank " + std::to_string(n));
    seen[d] = true;
  }
}

}  // namespace shlo

namespace {

using shlo::check_dims;
using shlo::element_type;
using shlo::join;
using shlo::signature;

bool is_float(DType t) {
  return t == DType::f32 || t == DType::f64 || t == DType::bf16 || t == DType::f16;
}

std::string hex_bits(uint64_t bits, int hex_digits) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "0x%0*llX", hex_digits, static_cast<unsigned long long>(bits));
  return buf;
}

// A float literal MLIR accepts: digits with a '.', so "1" becomes "1.0" and "1e+20" "1.0e+20".
template <class T>
std::string float_literal(T v) {
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  LMT_CHECK(ec == std::errc(), "to_chars");
  std::string s(buf, end);
  if (s.find('.') == std::string::npos) {
    size_t e = s.find('e');
    s.insert(e == std::string::npos ? s.size() : e, ".0");
  }
  return s;
}

std::string constant_literal(double value, DType t) {
  if (t == DType::i32 || t == DType::u8) {
    const double lo = t == DType::u8 ? 0.0 : -2147483648.0,
                 hi = t == DType::u8 ? 255 : 2147483647.0;
    LMT_CHECK(value == std::trunc(value) && value >= lo && value <= hi,
              "StableHLO constant: " + std::to_string(value) + " is not an " +
                  std::string(dtype_name(t)));
    return std::to_string(static_cast<int64_t>(value));
  }
  if (t == DType::f64) {
    return std::isfinite(value) ? float_literal(value)
                                : hex_bits(std::bit_cast<uint64_t>(value), 16);
  }
  const float f = static_cast<float>(value);  // bf16 and f16 round through f32, as on the host
  switch (t) {
    case DType::f32:
      return std::isfinite(f) ? float_literal(f) : hex_bits(std::bit_cast<uint32_t>(f), 8);
    case DType::bf16:
      return std::isfinite(f) ? float_literal(bf16_to_f32(f32_to_bf16(f)))
                              : hex_bits(f32_to_bf16(f), 4);
    case DType::f16:
      return std::isfinite(f) ? float_literal(f16_to_f32(f32_to_f16(f)))
                              : hex_bits(f32_to_f16(f), 4);
    default:
      return element_type(t);  // fails
  }
}

std::atomic<int> next_builder_id{0};

}  // namespace

std::string mlir_tensor_type(const HloValue& v) {
  std::string s = "tensor<";
  for (int64_t d : v.dims) s += std::to_string(d) + "x";
  return s + (v.pred ? "i1" : element_type(v.dtype)) + ">";
}

StablehloBuilder::StablehloBuilder() : id_(next_builder_id++) {}

StablehloBuilder::Value StablehloBuilder::next(DType dtype, Dims dims, bool pred) {
  for (int64_t d : dims) LMT_CHECK(d >= 0, "StableHLO: negative dimension");
  if (!pred) check_type(dtype);
  return Value{id_, ops_++, false, pred, dtype, std::move(dims), false, -1, open_scopes_.back()};
}

// A type MLIR can spell, and no f64 after refuse_f64().
void StablehloBuilder::check_type(DType t) const {
  element_type(t);
  LMT_CHECK(!(refuse_f64_ && t == DType::f64),
            "StableHLO: an f64 value in a program for an accelerator, which holds none (the PJRT "
            "backend keeps its f64 statistics there as f32 pairs)");
}

// %arg3 (parameter), %7 (op result), %7#1 (result 1 of a multi-result op), %r2_1 (argument 1 of
// region 2's block).
std::string StablehloBuilder::name(const Value& v) const {
  check_mine(v);
  if (v.is_param) return "%arg" + std::to_string(v.index);
  if (v.block_arg) return "%r" + std::to_string(v.index) + "_" + std::to_string(v.result);
  return "%" + std::to_string(v.index) + (v.result >= 0 ? "#" + std::to_string(v.result) : "");
}

void StablehloBuilder::check_mine(const Value& v) const {
  const int count = v.is_param ? int(params_.size()) : v.block_arg ? regions_ : ops_;
  LMT_CHECK(v.builder == id_ && v.index >= 0 && v.index < count,
            "StableHLO: a value from another program");
  LMT_CHECK(std::find(open_scopes_.begin(), open_scopes_.end(), v.scope) != open_scopes_.end(),
            "StableHLO: a value used outside the region that made it");
}

StablehloBuilder::Value StablehloBuilder::param(DType dtype, Dims dims, int donate_to) {
  LMT_CHECK(!returned_, "StableHLO: param after ret");
  for (int64_t d : dims) LMT_CHECK(d >= 0, "StableHLO: negative dimension");
  check_type(dtype);
  Value v{id_, static_cast<int>(params_.size()), true, false, dtype, std::move(dims)};
  params_.push_back(v);
  donate_to_.push_back(donate_to);
  return v;
}

void StablehloBuilder::donate(const Value& param, int output) {
  check_mine(param);
  LMT_CHECK(param.is_param && !returned_, "StableHLO: donate a param, before ret");
  donate_to_[static_cast<size_t>(param.index)] = output;
}

void StablehloBuilder::ret(std::vector<Value> outputs) {
  LMT_CHECK(!returned_, "StableHLO: ret twice");
  LMT_CHECK(outer_lines_.empty(), "StableHLO: ret inside a region");
  for (const Value& v : outputs) {
    check_mine(v);
    LMT_CHECK(!v.pred, "StableHLO: a pred output (no PJRT buffer type holds it; convert it)");
  }
  for (size_t i = 0; i < params_.size(); ++i) {
    int k = donate_to_[i];
    if (k < 0) continue;
    LMT_CHECK(k < int(outputs.size()), "StableHLO: param donated to a missing output");
    LMT_CHECK(mlir_tensor_type(outputs[k]) == mlir_tensor_type(params_[i]),
              "StableHLO: a donated param and its output differ in type");
  }
  outputs_ = std::move(outputs);
  returned_ = true;
}

void StablehloBuilder::shard_param(const Value& param, const TensorSharding& sharding) {
  check_mine(param);
  LMT_CHECK(param.is_param, "StableHLO: shard_param of a value that is no param");
  param_shardings_.resize(params_.size());
  param_shardings_[static_cast<size_t>(param.index)] = sharding;
}

void StablehloBuilder::shard_results(std::vector<TensorSharding> shardings) {
  result_shardings_ = std::move(shardings);
}

HloValue StablehloBuilder::sharding_constraint(const HloValue& x, TensorSharding s) {
  check_mine(x);
  if (mesh_.single()) return x;
  for (std::vector<std::string>& axes : s)
    std::erase_if(axes, [&](const std::string& a) { return mesh_.axis_size(a) == 1; });
  std::string attr = sharding_attr(s, x.dims.size());  // #sdy.sharding<@mesh, [...]>
  attr = attr.substr(std::string("#sdy.sharding").size());
  Value r = next(x.dtype, x.dims, x.pred);
  lines_.push_back(name(r) + " = sdy.sharding_constraint " + name(x) + " " + attr + " : " +
                   mlir_tensor_type(r));
  return r;
}

// `#sdy.sharding<@mesh, [{"fsdp"}, {}]>`: per dimension the axes that split it, closed (no
// dimension left for the partitioner to choose).
std::string StablehloBuilder::sharding_attr(const TensorSharding& s, size_t rank) const {
  std::string out = "#sdy.sharding<@mesh, [";
  for (size_t d = 0; d < rank; ++d) {
    out += d ? ", {" : "{";
    if (d < s.size())
      for (size_t i = 0; i < s[d].size(); ++i) out += (i ? ", \"" : "\"") + s[d][i] + "\"";
    out += "}";
  }
  return out + "]>";
}

std::string StablehloBuilder::text() const {
  LMT_CHECK(returned_, "StableHLO: text before ret");
  const bool spmd = !mesh_.single();
  auto sharding = [&](const std::vector<TensorSharding>& all, size_t i, size_t rank) {
    return sharding_attr(i < all.size() ? all[i] : TensorSharding{}, rank);
  };
  std::ostringstream s;
  s << "module {\n";
  if (spmd) {
    s << "  sdy.mesh @mesh = <[";
    for (size_t i = 0; i < mesh_.axes.size(); ++i)
      s << (i ? ", \"" : "\"") << mesh_.axes[i].name << "\"=" << mesh_.axes[i].size;
    s << "]>\n";
  }
  s << "  func.func @main(";
  for (size_t i = 0; i < params_.size(); ++i) {
    s << (i ? ", " : "") << name(params_[i]) << ": " << mlir_tensor_type(params_[i]);
    std::vector<std::string> attrs;
    if (donate_to_[i] >= 0)
      attrs.push_back("tf.aliasing_output = " + std::to_string(donate_to_[i]) + " : i32");
    if (spmd)
      attrs.push_back("sdy.sharding = " + sharding(param_shardings_, i, params_[i].dims.size()));
    for (size_t k = 0; k < attrs.size(); ++k) s << (k ? ", " : " {") << attrs[k];
    if (!attrs.empty()) s << "}";
  }
  s << ") -> (";
  for (size_t i = 0; i < outputs_.size(); ++i) {
    s << (i ? ", " : "") << mlir_tensor_type(outputs_[i]);
    if (spmd)
      s << " {sdy.sharding = " << sharding(result_shardings_, i, outputs_[i].dims.size()) << "}";
  }
  s << ") {\n";
  for (const std::string& line : lines_) s << "    " << line << "\n";
  s << "    return ";
  for (size_t i = 0; i < outputs_.size(); ++i) s << (i ? ", " : "") << name(outputs_[i]);
  s << " : ";
  for (size_t i = 0; i < outputs_.size(); ++i)
    s << (i ? ", " : "") << mlir_tensor_type(outputs_[i]);
  s << "\n  }\n}\n";
  return s.str();
}

StablehloBuilder::Value StablehloBuilder::constant(double value, DType dtype, Dims dims) {
  Value r = next(dtype, std::move(dims));
  lines_.push_back(name(r) + " = stablehlo.constant dense<" + constant_literal(value, dtype) +
                   "> : " + mlir_tensor_type(r));
  return r;
}

StablehloBuilder::Value StablehloBuilder::elementwise(const char* op, const Value& a,
                                                      const Value& b) {
  check_mine(a), check_mine(b);
  LMT_CHECK(!a.pred && !b.pred, std::string("StableHLO ") + op + ": pred operand");
  LMT_CHECK(
      a.dtype == b.dtype && a.dims == b.dims,
      std::string("StableHLO ") + op + ": " + mlir_tensor_type(a) + " vs " + mlir_tensor_type(b));
  // op(reshape(a'), reshape(b')) with a' and b' of one shape: the op in that shape (the flat
  // memory the PJRT backend passes values through otherwise hides how a value is split).
  const Def &ra = def_of(a), &rb = def_of(b);
  if (ra.kind == Def::reshape && rb.kind == Def::reshape && ra.in[0].dims == rb.in[0].dims &&
      ra.in[0].dtype == rb.in[0].dtype && !ra.in[0].pred && !rb.in[0].pred) {
    const Value a0 = ra.in[0], b0 = rb.in[0];  // copies: the ops below may move defs_
    return reshape(elementwise(op, a0, b0), a.dims);
  }
  if (split_ && pieces_of(a)) {  // op(concat(a_i), concat(b_i)) = concat(op(a_i, b_i))
    const Def da = def_of(a), db = def_of(b);  // copies: the ops below may move defs_
    bool alike = db.kind == Def::concatenate && db.dim == da.dim && da.in.size() == db.in.size();
    for (size_t i = 0; alike && i < da.in.size(); ++i) alike = da.in[i].dims == db.in[i].dims;
    if (alike) {
      std::vector<Value> out;
      for (size_t i = 0; i < da.in.size(); ++i) out.push_back(elementwise(op, da.in[i], db.in[i]));
      return concatenate(out, da.dim);
    }
  }
  Value r = next(a.dtype, a.dims);
  lines_.push_back(name(r) + " = stablehlo." + op + " " + name(a) + ", " + name(b) + " : " +
                   mlir_tensor_type(r));
  return r;
}

StablehloBuilder::Value StablehloBuilder::unary(const char* op, const Value& x, bool float_only) {
  check_mine(x);
  LMT_CHECK(!x.pred && (!float_only || is_float(x.dtype)),
            std::string("StableHLO ") + op + ": operand " + mlir_tensor_type(x));
  Value r = next(x.dtype, x.dims);
  lines_.push_back(name(r) + " = stablehlo." + op + " " + name(x) + " : " + mlir_tensor_type(r));
  return r;
}

using Value = StablehloBuilder::Value;
Value StablehloBuilder::add(const Value& a, const Value& b) {
  return elementwise("add", a, b);
}
Value StablehloBuilder::subtract(const Value& a, const Value& b) {
  return elementwise("subtract", a, b);
}
Value StablehloBuilder::multiply(const Value& a, const Value& b) {
  return elementwise("multiply", a, b);
}
Value StablehloBuilder::divide(const Value& a, const Value& b) {
  return elementwise("divide", a, b);
}
Value StablehloBuilder::maximum(const Value& a, const Value& b) {
  return elementwise("maximum", a, b);
}
Value StablehloBuilder::negate(const Value& x) {
  return unary("negate", x, false);
}
Value StablehloBuilder::power(const Value& a, const Value& b) {
  return elementwise("power", a, b);
}
Value StablehloBuilder::exp(const Value& x) {
  return unary("exponential", x, true);
}
Value StablehloBuilder::expm1(const Value& x) {
  return unary("exponential_minus_one", x, true);
}
Value StablehloBuilder::log(const Value& x) {
  return unary("log", x, true);
}
Value StablehloBuilder::sine(const Value& x) {
  return unary("sine", x, true);
}
Value StablehloBuilder::cosine(const Value& x) {
  return unary("cosine", x, true);
}
Value StablehloBuilder::tanh(const Value& x) {
  return unary("tanh", x, true);
}
Value StablehloBuilder::rsqrt(const Value& x) {
  return unary("rsqrt", x, true);
}
Value StablehloBuilder::sqrt(const Value& x) {
  return unary("sqrt", x, true);
}
Value StablehloBuilder::logistic(const Value& x) {
  return unary("logistic", x, true);
}

Value StablehloBuilder::convert(const Value& x, DType to) {
  check_mine(x);
  if (split_ && pieces_of(x)) {
    const Def d = def_of(x);  // a copy: the ops below may move defs_
    std::vector<Value> out;
    for (const Value& p : d.in) out.push_back(convert(p, to));
    return concatenate(out, d.dim);
  }
  Value r = next(to, x.dims);
  lines_.push_back(name(r) + " = stablehlo.convert " + name(x) + " : " + signature({x}, r));
  return r;
}

// Integer ops: elementwise's checks, and i32 only.
Value StablehloBuilder::integer(const char* op, const Value& a, const Value& b) {
  LMT_CHECK(a.dtype == DType::i32 && !a.pred,
            std::string("StableHLO ") + op + ": operand " + mlir_tensor_type(a));
  return elementwise(op, a, b);
}
Value StablehloBuilder::bit_and(const Value& a, const Value& b) {
  return integer("and", a, b);
}
Value StablehloBuilder::bit_or(const Value& a, const Value& b) {
  return integer("or", a, b);
}
Value StablehloBuilder::bit_xor(const Value& a, const Value& b) {
  return integer("xor", a, b);
}
Value StablehloBuilder::shift_left(const Value& x, const Value& count) {
  return integer("shift_left", x, count);
}
Value StablehloBuilder::shift_right_logical(const Value& x, const Value& count) {
  return integer("shift_right_logical", x, count);
}

// Gather and scatter have no pretty form: generic syntax, indices [N] with index_vector_dim = 1
// (the implicit trailing 1), one row of x per index.
Value StablehloBuilder::gather_rows(const Value& x, const Value& indices) {
  check_mine(x), check_mine(indices);
  LMT_CHECK(x.rank() >= 1 && !x.pred && indices.rank() == 1 && indices.dtype == DType::i32 &&
                !indices.pred,
            "StableHLO gather_rows: " + signature({x, indices}, x));
  Dims dims = x.dims, offset_dims, slice_sizes = x.dims;
  dims[0] = indices.dims[0];
  slice_sizes[0] = 1;
  for (int64_t d = 1; d < x.rank(); ++d) offset_dims.push_back(d);
  Value r = next(x.dtype, std::move(dims));
  lines_.push_back(name(r) + " = \"stablehlo.gather\"(" + name(x) + ", " + name(indices) +
                   ") {dimension_numbers = #stablehlo.gather<offset_dims = [" + join(offset_dims) +
                   "], collapsed_slice_dims = [0], start_index_map = [0], index_vector_dim = 1>, "
                   "slice_sizes = array<i64: " +
                   join(slice_sizes) +
                   ">, indices_are_sorted = false} : " + signature({x, indices}, r));
  return r;
}

Value StablehloBuilder::scatter_add_rows(const Value& x, const Value& indices,
                                         const Value& updates) {
  check_mine(x), check_mine(indices), check_mine(updates);
  const std::string what = "StableHLO scatter_add_rows: " + signature({x, indices, updates}, x);
  LMT_CHECK(x.rank() >= 1 && !x.pred && indices.rank() == 1 && indices.dtype == DType::i32 &&
                !indices.pred && updates.dtype == x.dtype && !updates.pred,
            what);
  Dims want = x.dims;
  want[0] = indices.dims[0];
  LMT_CHECK(updates.dims == want, what);
  Dims window_dims;
  for (int64_t d = 1; d < x.rank(); ++d) window_dims.push_back(d);
  Value r = next(x.dtype, x.dims);
  // The add region's names carry the op's number: unique even where regions nest.
  const std::string s = "%scatter" + std::to_string(r.index) + "_";
  const std::string t = mlir_tensor_type(Value{id_, 0, false, false, x.dtype, {}});
  lines_.push_back(name(r) + " = \"stablehlo.scatter\"(" + name(x) + ", " + name(indices) + ", " +
                   name(updates) + ") ({ ^bb0(" + s + "a: " + t + ", " + s + "b: " + t + "): " + s +
                   "sum = stablehlo.add " + s + "a, " + s + "b : " + t + " stablehlo.return " + s +
                   "sum : " + t +
                   " }) {scatter_dimension_numbers = #stablehlo.scatter<update_window_dims = [" +
                   join(window_dims) +
                   "], inserted_window_dims = [0], scatter_dims_to_operand_dims = [0], "
                   "index_vector_dim = 1>, indices_are_sorted = false, unique_indices = false} : " +
                   signature({x, indices, updates}, r));
  return r;
}

Value StablehloBuilder::broadcast_in_dim(const Value& x, Dims dims, Dims broadcast_dims) {
  check_mine(x);
  LMT_CHECK(int64_t(broadcast_dims.size()) == x.rank(), "StableHLO broadcast_in_dim: one per dim");
  check_dims(broadcast_dims, int64_t(dims.size()), "StableHLO broadcast_in_dim");
  for (int64_t i = 0; i < x.rank(); ++i) {
    LMT_CHECK(x.dims[i] == 1 || x.dims[i] == dims[broadcast_dims[i]],
              "StableHLO broadcast_in_dim: dimension " + std::to_string(i) + " does not fit");
  }
  if (split_ && pieces_of(x)) {
    const Def def = def_of(x);  // a copy: the ops below may move defs_
    const int64_t d = def.dim, to = broadcast_dims[static_cast<size_t>(d)];
    if (x.dims[d] == dims[to]) {  // the concatenated dimension is not broadcast: one per piece
      std::vector<Value> out;
      for (const Value& p : def.in) {
        Dims pd = dims;
        pd[to] = p.dims[d];
        out.push_back(broadcast_in_dim(p, pd, broadcast_dims));
      }
      return concatenate(out, to);
    }
  }
  Value r = next(x.dtype, std::move(dims), x.pred);
  lines_.push_back(name(r) + " = stablehlo.broadcast_in_dim " + name(x) + ", dims = [" +
                   join(broadcast_dims) + "] : " + signature({x}, r));
  return r;
}

Value StablehloBuilder::emit_reshape(const Value& x, Dims dims) {
  check_mine(x);
  int64_t n = 1, m = 1;
  for (int64_t d : x.dims) n *= d;
  for (int64_t d : dims) m *= d;
  LMT_CHECK(n == m, "StableHLO reshape: element counts differ");
  Value t = type_of(x.dtype, dims);
  t.pred = x.pred;
  const std::string op = "stablehlo.reshape " + name(x) + " : " + signature({x}, t);
  if (const Value* seen = reuse(op)) return *seen;
  Value r = next(x.dtype, std::move(dims), x.pred);
  emit(r, op, Def{Def::reshape, {x}, {}, {}, 0});
  return r;
}

Value StablehloBuilder::bitcast_convert(const Value& x, DType to) {
  check_mine(x);
  LMT_CHECK(!x.pred, "StableHLO bitcast_convert: not of a pred");
  const size_t from_size = dtype_size(x.dtype), to_size = dtype_size(to);
  Dims dims = x.dims;
  if (to_size < from_size) {
    dims.push_back(static_cast<int64_t>(from_size / to_size));
  } else if (to_size > from_size) {
    LMT_CHECK(!dims.empty() && dims.back() == static_cast<int64_t>(to_size / from_size),
              "StableHLO bitcast_convert: the last dimension must be the width ratio");
    dims.pop_back();
  }
  Value r = next(to, std::move(dims));
  lines_.push_back(name(r) + " = stablehlo.bitcast_convert " + name(x) + " : " + signature({x}, r));
  return r;
}

Value StablehloBuilder::transpose(const Value& x, Dims permutation) {
  check_mine(x);
  LMT_CHECK(int64_t(permutation.size()) == x.rank(), "StableHLO transpose: one entry per dim");
  check_dims(permutation, x.rank(), "StableHLO transpose");
  Dims dims;
  for (int64_t p : permutation) dims.push_back(x.dims[p]);
  Value r = next(x.dtype, std::move(dims), x.pred);
  lines_.push_back(name(r) + " = stablehlo.transpose " + name(x) + ", dims = [" +
                   join(permutation) + "] : " + signature({x}, r));
  return r;
}

Value StablehloBuilder::emit_slice(const Value& x, const Dims& start, const Dims& limit,
                                   const Dims& stride) {
  check_mine(x);
  LMT_CHECK(int64_t(start.size()) == x.rank() && int64_t(limit.size()) == x.rank() &&
                int64_t(stride.size()) == x.rank(),
            "StableHLO slice: one start, limit and stride per dimension");
  Dims dims;
  std::string ranges;
  for (int64_t d = 0; d < x.rank(); ++d) {
    LMT_CHECK(0 <= start[d] && start[d] <= limit[d] && limit[d] <= x.dims[d] && stride[d] >= 1,
              "StableHLO slice: bad range in dimension " + std::to_string(d));
    dims.push_back((limit[d] - start[d] + stride[d] - 1) / stride[d]);
    if (d > 0) ranges += ", ";
    ranges += std::to_string(start[d]) + ":" + std::to_string(limit[d]);
    if (stride[d] != 1) ranges.append(":").append(std::to_string(stride[d]));
  }
  Value t = type_of(x.dtype, dims);
  t.pred = x.pred;
  const std::string op = "stablehlo.slice " + name(x) + " [" + ranges + "] : " + signature({x}, t);
  if (const Value* seen = reuse(op)) return *seen;
  Value r = next(x.dtype, std::move(dims), x.pred);
  const bool unit = std::all_of(stride.begin(), stride.end(), [](int64_t k) { return k == 1; });
  emit(r, op, unit ? Def{Def::slice, {x}, start, limit, 0} : Def{});
  return r;
}

Value StablehloBuilder::pad_zeros(const Value& x, const Dims& low, const Dims& high) {
  check_mine(x);
  LMT_CHECK(int64_t(low.size()) == x.rank() && int64_t(high.size()) == x.rank(),
            "StableHLO pad: one low and high per dimension");
  const Value zero = constant(0.0, x.dtype);
  Dims dims = x.dims;
  auto list = [](const Dims& v) {
    std::string t;
    for (size_t i = 0; i < v.size(); ++i) t += (i ? ", " : "") + std::to_string(v[i]);
    return t;
  };
  for (int64_t d = 0; d < x.rank(); ++d) {
    LMT_CHECK(low[d] >= 0 && high[d] >= 0, "StableHLO pad: negative padding");
    dims[d] += low[d] + high[d];
  }
  const Value t = type_of(x.dtype, dims);
  const std::string op = "stablehlo.pad " + name(x) + ", " + name(zero) + ", low = [" + list(low) +
                         "], high = [" + list(high) + "], interior = [" +
                         list(Dims(low.size(), 0)) + "] : " + signature({x, zero}, t);
  if (const Value* seen = reuse(op)) return *seen;
  Value r = next(x.dtype, std::move(dims));
  emit(r, op, Def{});
  return r;
}

Value StablehloBuilder::emit_concatenate(const std::vector<Value>& xs, int64_t dim) {
  LMT_CHECK(!xs.empty(), "StableHLO concatenate: no operands");
  const Value& x0 = xs[0];
  LMT_CHECK(dim >= 0 && dim < x0.rank(), "StableHLO concatenate: bad dimension");
  Dims dims = x0.dims;
  dims[dim] = 0;
  std::string operands;
  for (const Value& x : xs) {
    operands += (operands.empty() ? "" : ", ") + name(x);
    bool fits = x.rank() == x0.rank() && x.dtype == x0.dtype && x.pred == x0.pred;
    for (int64_t d = 0; fits && d < x.rank(); ++d) fits = d == dim || x.dims[d] == x0.dims[d];
    LMT_CHECK(fits, "StableHLO concatenate: " + mlir_tensor_type(x) + " does not fit " +
                        mlir_tensor_type(x0));
    dims[dim] += x.dims[dim];
  }
  Value t = type_of(x0.dtype, dims);
  t.pred = x0.pred;
  const std::string op = "stablehlo.concatenate " + operands + ", dim = " + std::to_string(dim) +
                         " : " + signature(xs, t);
  if (const Value* seen = reuse(op)) return *seen;
  Value r = next(x0.dtype, std::move(dims), x0.pred);
  emit(r, op, Def{Def::concatenate, xs, {}, {}, dim});
  return r;
}

Value StablehloBuilder::dot_general(const Value& lhs, const Value& rhs, Dims lhs_batch,
                                    Dims rhs_batch, Dims lhs_contract, Dims rhs_contract) {
  return dot_general(lhs, rhs, std::move(lhs_batch), std::move(rhs_batch), std::move(lhs_contract),
                     std::move(rhs_contract), lhs.dtype);
}

Value StablehloBuilder::emit_dot(const Value& lhs, const Value& rhs, const Dims& lhs_batch,
                                 const Dims& rhs_batch, const Dims& lhs_contract,
                                 const Dims& rhs_contract, DType result) {
  check_mine(lhs), check_mine(rhs);
  const char* what = "StableHLO dot_general";
  LMT_CHECK(!lhs.pred && !rhs.pred && lhs.dtype == rhs.dtype,
            std::string(what) + ": operand types");
  LMT_CHECK(result == lhs.dtype ||
                ((lhs.dtype == DType::bf16 || lhs.dtype == DType::f16) && result == DType::f32),
            std::string(what) + ": result type");
  LMT_CHECK(lhs_batch.size() == rhs_batch.size() && lhs_contract.size() == rhs_contract.size(),
            std::string(what) + ": unpaired dimensions");
  Dims lhs_used = lhs_batch, rhs_used = rhs_batch;
  lhs_used.insert(lhs_used.end(), lhs_contract.begin(), lhs_contract.end());
  rhs_used.insert(rhs_used.end(), rhs_contract.begin(), rhs_contract.end());
  check_dims(lhs_used, lhs.rank(), what);
  check_dims(rhs_used, rhs.rank(), what);
  Dims dims;
  for (size_t i = 0; i < lhs_used.size(); ++i) {
    LMT_CHECK(lhs.dims[lhs_used[i]] == rhs.dims[rhs_used[i]],
              std::string(what) + ": paired dimensions differ in size");
    if (i < lhs_batch.size()) dims.push_back(lhs.dims[lhs_batch[i]]);
  }
  auto free_dims = [&](const Value& v, const Dims& used) {
    for (int64_t d = 0; d < v.rank(); ++d) {
      if (std::find(used.begin(), used.end(), d) == used.end()) dims.push_back(v.dims[d]);
    }
  };
  free_dims(lhs, lhs_used);
  free_dims(rhs, rhs_used);
  Value r = next(result, std::move(dims));
  std::string attrs;
  if (!lhs_batch.empty()) {
    attrs += ", batching_dims = [" + join(lhs_batch) + "] x [" + join(rhs_batch) + "]";
  }
  attrs += ", contracting_dims = [" + join(lhs_contract) + "] x [" + join(rhs_contract) + "]";
  lines_.push_back(name(r) + " = stablehlo.dot_general " + name(lhs) + ", " + name(rhs) + attrs +
                   " : " + signature({lhs, rhs}, r));
  return r;
}

Value StablehloBuilder::reduce(const char* op, double init, const Value& x, const Dims& dims) {
  check_mine(x);
  LMT_CHECK(!x.pred, std::string("StableHLO reduce ") + op + ": pred operand");
  check_dims(dims, x.rank(), "StableHLO reduce");
  if (split_ && pieces_of(x)) {  // along a kept dimension: one reduction per piece
    const Def def = def_of(x);   // a copy: the ops below may move defs_
    if (std::find(dims.begin(), dims.end(), def.dim) == dims.end()) {
      const int64_t at =
          def.dim - std::count_if(dims.begin(), dims.end(), [&](int64_t d) { return d < def.dim; });
      std::vector<Value> out;
      for (const Value& p : def.in) out.push_back(reduce(op, init, p, dims));
      return concatenate(out, at);
    }
  }
  Value zero = constant(init, x.dtype);
  Dims kept;
  for (int64_t d = 0; d < x.rank(); ++d) {
    if (std::find(dims.begin(), dims.end(), d) == dims.end()) kept.push_back(x.dims[d]);
  }
  Value r = next(x.dtype, std::move(kept));
  lines_.push_back(name(r) + " = stablehlo.reduce(" + name(x) + " init: " + name(zero) +
                   ") applies stablehlo." + op + " across dimensions = [" + join(dims) +
                   "] : " + signature({x, zero}, r));
  return r;
}

Value StablehloBuilder::reduce_sum(const Value& x, Dims dims) {
  return reduce("add", 0.0, x, dims);
}

Value StablehloBuilder::reduce_max(const Value& x, Dims dims) {
  double lowest = x.dtype == DType::i32 ? double(std::numeric_limits<int32_t>::min())
                                        : -std::numeric_limits<double>::infinity();
  return reduce("maximum", lowest, x, dims);
}

Value StablehloBuilder::compare(const Value& a, const Value& b, CompareDir dir) {
  check_mine(a), check_mine(b);
  LMT_CHECK(a.pred == b.pred && a.dtype == b.dtype && a.dims == b.dims,
            "StableHLO compare: " + mlir_tensor_type(a) + " vs " + mlir_tensor_type(b));
  static const char* const kDirs[] = {"EQ", "NE", "LT", "LE", "GT", "GE"};
  Value r = next(a.dtype, a.dims, true);
  lines_.push_back(name(r) + " = stablehlo.compare " + kDirs[int(dir)] + ", " + name(a) + ", " +
                   name(b) + " : " + signature({a, b}, r));
  return r;
}

Value StablehloBuilder::select(const Value& pred, const Value& on_true, const Value& on_false) {
  check_mine(pred), check_mine(on_true), check_mine(on_false);
  LMT_CHECK(pred.pred && pred.dims == on_true.dims,
            "StableHLO select: predicate " + mlir_tensor_type(pred));
  LMT_CHECK(mlir_tensor_type(on_true) == mlir_tensor_type(on_false),
            "StableHLO select: branches differ in type");
  Value r = next(on_true.dtype, on_true.dims, on_true.pred);
  lines_.push_back(name(r) + " = stablehlo.select " + name(pred) + ", " + name(on_true) + ", " +
                   name(on_false) + " : " + signature({pred, on_true, on_false}, r));
  return r;
}

Value StablehloBuilder::iota(DType dtype, Dims dims, int64_t dim) {
  LMT_CHECK(dim >= 0 && dim < int64_t(dims.size()), "StableHLO iota: bad dimension");
  Value r = next(dtype, std::move(dims));
  lines_.push_back(name(r) + " = stablehlo.iota dim = " + std::to_string(dim) + " : " +
                   mlir_tensor_type(r));
  return r;
}

}  // namespace lmt

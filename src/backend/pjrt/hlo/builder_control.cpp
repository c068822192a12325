// StablehloBuilder: the ops with regions or several results, and those that steer the compiler
// rather than compute: while loops and indexed slices (blocked attention walks a long axis with
// them), optimization_barrier (activation checkpointing: what a recomputation starts from must not
// be merged with the computation it repeats) and custom_call (a library kernel XLA calls, such as
// cuDNN's fused attention).
#include <algorithm>

#include "backend/pjrt/hlo/builder.h"
#include "backend/pjrt/hlo/builder_text.h"
#include "core/error.h"

namespace lmt {

using Value = StablehloBuilder::Value;
using shlo::check_dims;
using shlo::join;
using shlo::signature;

// ---- Regions, loops and indexed slices ----

// A new innermost region whose block arguments have the types of `block_args`.
std::vector<Value> StablehloBuilder::open_region(const std::vector<Value>& block_args) {
  const int region = regions_++;
  outer_lines_.push_back(std::move(lines_));
  lines_.clear();
  open_scopes_.push_back(region + 1);  // scope 0 is the function body
  std::vector<Value> args;
  for (size_t i = 0; i < block_args.size(); ++i) {
    const Value& t = block_args[i];
    args.push_back(Value{id_, region, false, t.pred, t.dtype, t.dims, true, int(i), region + 1});
  }
  return args;
}

// Ends the innermost region; returns its lines, indented one level.
std::vector<std::string> StablehloBuilder::close_region() {
  std::vector<std::string> body;
  for (std::string& line : lines_) body.push_back("  " + line);
  lines_ = std::move(outer_lines_.back());
  outer_lines_.pop_back();
  open_scopes_.pop_back();
  return body;
}

// The results of op number `op`, typed like `like`: %op itself for one, %op#i for several.
std::vector<Value> StablehloBuilder::op_results(int op, const std::vector<Value>& like) {
  std::vector<Value> r;
  for (size_t i = 0; i < like.size(); ++i) {
    const Value& t = like[i];
    r.push_back(Value{id_, op, false, t.pred, t.dtype, t.dims, false, like.size() > 1 ? int(i) : -1,
                      open_scopes_.back()});
  }
  return r;
}

// Printed in the generic form, "stablehlo.while"(inits) ({^bb0(args): cond}, {^bb0(args): body}),
// which spells each region's block arguments in the region itself.
std::vector<Value> StablehloBuilder::while_loop(const std::vector<Value>& init, const Cond& cond,
                                                const Body& body) {
  LMT_CHECK(!init.empty(), "StableHLO while: no loop values");
  std::string operands, types;
  for (const Value& v : init) {
    operands += (operands.empty() ? "" : ", ") + name(v);
    types += (types.empty() ? "" : ", ") + mlir_tensor_type(v);
  }
  const int op = ops_++;
  auto region = [&](const std::vector<Value>& args, const std::vector<Value>& returned) {
    std::string header = "^bb0(";
    for (size_t i = 0; i < args.size(); ++i)
      header += (i ? ", " : "") + name(args[i]) + ": " + mlir_tensor_type(args[i]);
    std::string ret = "stablehlo.return ", ret_types;
    for (size_t i = 0; i < returned.size(); ++i) {
      ret += (i ? ", " : "") + name(returned[i]);
      ret_types += (i ? ", " : "") + mlir_tensor_type(returned[i]);
    }
    lines_.push_back(ret + " : " + ret_types);
    std::vector<std::string> text = close_region();
    text.insert(text.begin(), header + "):");
    return text;
  };

  const std::vector<Value> cond_args = open_region(init);
  const Value go = cond(*this, cond_args);
  check_mine(go);
  LMT_CHECK(go.pred && go.rank() == 0,
            "StableHLO while: cond must give a pred scalar, not " + mlir_tensor_type(go));
  const std::vector<std::string> cond_text = region(cond_args, {go});

  const std::vector<Value> body_args = open_region(init);
  const std::vector<Value> next_values = body(*this, body_args);
  LMT_CHECK(next_values.size() == init.size(), "StableHLO while: body gives " +
                                                   std::to_string(next_values.size()) +
                                                   " values for " + std::to_string(init.size()));
  for (size_t i = 0; i < init.size(); ++i) {
    check_mine(next_values[i]);
    LMT_CHECK(mlir_tensor_type(next_values[i]) == mlir_tensor_type(init[i]),
              "StableHLO while: loop value " + std::to_string(i) + " enters as " +
                  mlir_tensor_type(init[i]) + ", the body gives " +
                  mlir_tensor_type(next_values[i]));
  }
  const std::vector<std::string> body_text = region(body_args, next_values);

  const std::string result =
      "%" + std::to_string(op) + (init.size() > 1 ? ":" + std::to_string(init.size()) : "");
  lines_.push_back(result + " = \"stablehlo.while\"(" + operands + ") ({");
  lines_.insert(lines_.end(), cond_text.begin(), cond_text.end());
  lines_.push_back("}, {");
  lines_.insert(lines_.end(), body_text.begin(), body_text.end());
  lines_.push_back("}) : (" + types + ") -> (" + types + ")");
  return op_results(op, init);
}

// Printed in the generic form, "stablehlo.reduce"(operands, inits) ({^bb0(a..., c...): body}),
// as while_loop is.
std::vector<Value> StablehloBuilder::reduce_with(const std::vector<Value>& xs,
                                                 const std::vector<Value>& init, const Dims& dims,
                                                 const Combine& combine) {
  LMT_CHECK(!xs.empty() && init.size() == xs.size(), "StableHLO reduce: one init per operand");
  std::vector<Value> scalars, results;
  std::string operands, inits, types, init_types, result_types;
  for (size_t i = 0; i < xs.size(); ++i) {
    const Value &x = xs[i], &z = init[i];
    check_mine(x), check_mine(z);
    LMT_CHECK(!x.pred && x.dims == xs[0].dims && z.rank() == 0 && z.dtype == x.dtype && !z.pred,
              "StableHLO reduce: operands of one shape, each with a scalar init of its type");
    operands += (i ? ", " : "") + name(x);
    inits += ", " + name(z);
    types += (i ? ", " : "") + mlir_tensor_type(x);
    init_types += ", " + mlir_tensor_type(z);
    scalars.push_back(z);
  }
  check_dims(dims, xs[0].rank(), "StableHLO reduce");
  Dims kept;
  for (int64_t d = 0; d < xs[0].rank(); ++d)
    if (std::find(dims.begin(), dims.end(), d) == dims.end()) kept.push_back(xs[0].dims[d]);
  for (const Value& x : xs) results.push_back(type_of(x.dtype, kept));
  for (size_t i = 0; i < results.size(); ++i)
    result_types += (i ? ", " : "") + mlir_tensor_type(results[i]);

  const int op = ops_++;
  std::vector<Value> block = scalars;
  block.insert(block.end(), scalars.begin(), scalars.end());
  const std::vector<Value> args = open_region(block);
  const std::vector<Value> a(args.begin(), args.begin() + long(xs.size())),
      c(args.begin() + long(xs.size()), args.end());
  const std::vector<Value> joined = combine(*this, a, c);
  LMT_CHECK(joined.size() == xs.size(), "StableHLO reduce: combine gives one value per operand");
  std::string header = "^bb0(", ret = "stablehlo.return ", ret_types;
  for (size_t i = 0; i < args.size(); ++i)
    header += (i ? ", " : "") + name(args[i]) + ": " + mlir_tensor_type(args[i]);
  for (size_t i = 0; i < joined.size(); ++i) {
    check_mine(joined[i]);
    LMT_CHECK(mlir_tensor_type(joined[i]) == mlir_tensor_type(scalars[i]),
              "StableHLO reduce: combine gives " + mlir_tensor_type(joined[i]) + " for " +
                  mlir_tensor_type(scalars[i]));
    ret += (i ? ", " : "") + name(joined[i]);
    ret_types += (i ? ", " : "") + mlir_tensor_type(joined[i]);
  }
  lines_.push_back(ret + " : " + ret_types);
  const std::vector<std::string> body = close_region();

  const std::string result =
      "%" + std::to_string(op) + (xs.size() > 1 ? ":" + std::to_string(xs.size()) : "");
  lines_.push_back(result + " = \"stablehlo.reduce\"(" + operands + inits + ") ({");
  lines_.push_back("  " + header + "):");
  lines_.insert(lines_.end(), body.begin(), body.end());
  lines_.push_back("}) {dimensions = array<i64: " + join(dims) + ">} : (" + types + init_types +
                   ") -> (" + result_types + ")");
  return op_results(op, results);
}

namespace {

void check_starts(const std::vector<HloValue>& start, const HloValue& x, const char* what) {
  LMT_CHECK(int64_t(start.size()) == x.rank(),
            std::string(what) + ": one start index per dimension of " + mlir_tensor_type(x));
  for (const HloValue& s : start) {
    LMT_CHECK(
        !s.pred && s.dtype == DType::i32 && s.rank() == 0,
        std::string(what) + ": a start index must be an i32 scalar, not " + mlir_tensor_type(s));
  }
}

}  // namespace

Value StablehloBuilder::dynamic_slice(const Value& x, const std::vector<Value>& start, Dims sizes) {
  check_mine(x);
  check_starts(start, x, "StableHLO dynamic_slice");
  LMT_CHECK(int64_t(sizes.size()) == x.rank(), "StableHLO dynamic_slice: one size per dimension");
  for (int64_t d = 0; d < x.rank(); ++d) {
    LMT_CHECK(sizes[d] >= 0 && sizes[d] <= x.dims[d],
              "StableHLO dynamic_slice: size " + std::to_string(sizes[d]) + " in dimension " +
                  std::to_string(d) + " of " + mlir_tensor_type(x));
  }
  std::vector<Value> in = {x};
  std::string operands = name(x);
  for (const Value& s : start) operands += ", " + name(s), in.push_back(s);
  Value r = next(x.dtype, sizes, x.pred);
  lines_.push_back(name(r) + " = stablehlo.dynamic_slice " + operands + ", sizes = [" +
                   join(sizes) + "] : " + signature(in, r));
  return r;
}

Value StablehloBuilder::dynamic_update_slice(const Value& x, const Value& update,
                                             const std::vector<Value>& start) {
  check_mine(x), check_mine(update);
  check_starts(start, x, "StableHLO dynamic_update_slice");
  LMT_CHECK(update.rank() == x.rank() && update.dtype == x.dtype && update.pred == x.pred,
            "StableHLO dynamic_update_slice: update " + mlir_tensor_type(update) + " into " +
                mlir_tensor_type(x));
  for (int64_t d = 0; d < x.rank(); ++d) {
    LMT_CHECK(update.dims[d] <= x.dims[d],
              "StableHLO dynamic_update_slice: update larger than the operand");
  }
  std::vector<Value> in = {x, update};
  std::string operands = name(x) + ", " + name(update);
  for (const Value& s : start) operands += ", " + name(s), in.push_back(s);
  Value r = next(x.dtype, x.dims, x.pred);
  lines_.push_back(name(r) + " = stablehlo.dynamic_update_slice " + operands + " : " +
                   signature(in, r));
  return r;
}

// ---- Barriers and library calls ----

std::vector<Value> StablehloBuilder::optimization_barrier(const std::vector<Value>& xs) {
  LMT_CHECK(!xs.empty(), "StableHLO optimization_barrier: no operands");
  std::string operands, types;
  for (const Value& x : xs) {
    check_mine(x);
    operands += (operands.empty() ? "" : ", ") + name(x);
    types += (types.empty() ? "" : ", ") + mlir_tensor_type(x);
  }
  const int op = ops_++;
  const std::string result =
      "%" + std::to_string(op) + (xs.size() > 1 ? ":" + std::to_string(xs.size()) : "");
  lines_.push_back(result + " = stablehlo.optimization_barrier " + operands + " : " + types);
  return op_results(op, xs);
}

namespace {

// An MLIR string literal: quotes and backslashes as \22 and \5C, as XLA's own printer writes them.
std::string mlir_string(const std::string& s) {
  std::string r = "\"";
  for (char c : s) {
    if (c == '"')
      r += "\\22";
    else if (c == '\\')
      r += "\\5C";
    else
      r += c;
  }
  return r + "\"";
}

std::string layouts(const std::vector<std::vector<int64_t>>& ls) {
  std::string s = "[";
  for (size_t i = 0; i < ls.size(); ++i) {
    s += (i ? ", " : "");
    s += ls[i].empty() ? "dense<> : tensor<0xindex>"
         : ls[i].size() == 1
             ? "dense<" + std::to_string(ls[i][0]) + "> : tensor<1xindex>"
             : "dense<[" + join(ls[i]) + "]> : tensor<" + std::to_string(ls[i].size()) + "xindex>";
  }
  return s + "]";
}

}  // namespace

std::vector<Value> StablehloBuilder::custom_call(const CustomCall& c,
                                                 const std::vector<Value>& operands,
                                                 const std::vector<Value>& result_types) {
  LMT_CHECK(!c.target.empty() && !result_types.empty(), "StableHLO custom_call: no target or result");
  LMT_CHECK(c.operand_layouts.empty() || c.operand_layouts.size() == operands.size(),
            "StableHLO custom_call: one operand layout per operand");
  LMT_CHECK(c.result_layouts.empty() || c.result_layouts.size() == result_types.size(),
            "StableHLO custom_call: one result layout per result");
  std::string names, in_types, out_types;
  for (const Value& x : operands) {
    check_mine(x);
    names += (names.empty() ? "" : ", ") + name(x);
    in_types += (in_types.empty() ? "" : ", ") + mlir_tensor_type(x);
  }
  for (const Value& r : result_types) out_types += (out_types.empty() ? "" : ", ") + mlir_tensor_type(r);
  std::string attrs = "api_version = 2 : i32";
  if (!c.backend_config.empty()) attrs += ", backend_config = " + mlir_string(c.backend_config);
  if (!c.operand_layouts.empty()) attrs += ", operand_layouts = " + layouts(c.operand_layouts);
  if (!c.result_layouts.empty()) attrs += ", result_layouts = " + layouts(c.result_layouts);
  const int op = ops_++;
  const std::string result = "%" + std::to_string(op) +
                             (result_types.size() > 1 ? ":" + std::to_string(result_types.size()) : "");
  lines_.push_back(result + " = stablehlo.custom_call @" + c.target + "(" + names + ") {" + attrs +
                   "} : (" + in_types + ") -> " +
                   (result_types.size() > 1 ? "(" + out_types + ")" : out_types));
  return op_results(op, result_types);
}

}  // namespace lmt

// A builder of StableHLO programs as MLIR text: one function @main, built op by op, printed as the
// module PjrtClient::compile takes. Each value is an SSA handle that carries its type, and each op
// checks its operands and computes its result type itself, so a caller never spells a type and a
// mistake fails here (LMT_CHECK) rather than as a parser diagnostic from the plugin. Ops are
// printed in StableHLO's pretty form, which XLA's CPU plugin parses (tests/pjrt/stablehlo_test).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "backend/mesh.h"
#include "core/dtype.h"

namespace lmt {

// One SSA value of the program: a function argument, an op's result or a region's block argument.
// `pred` marks a boolean tensor (a compare's result, i1 in MLIR); its dtype is then meaningless.
struct HloValue {
  int builder = -1;  // which StablehloBuilder made it (values do not cross programs)
  int index = -1;    // argument number, op number, or region number (block_arg)
  bool is_param = false;
  bool pred = false;
  DType dtype = DType::f32;
  std::vector<int64_t> dims;  // row-major, outermost first; empty for a scalar
  bool block_arg = false;
  int result = -1;  // >= 0: which result of a multi-result op, or which block argument
  int scope = 0;    // the region it is defined in (0: the function body); visible inside it only

  int64_t rank() const { return static_cast<int64_t>(dims.size()); }
};

enum class CompareDir { eq, ne, lt, le, gt, ge };

class StablehloBuilder {
 public:
  using Value = HloValue;
  using Dims = std::vector<int64_t>;

  StablehloBuilder();

  // A function argument. donate_to >= 0 marks it `tf.aliasing_output = donate_to`: when the caller
  // donates the buffer, output donate_to (same type) may be written into its memory.
  Value param(DType dtype, Dims dims, int donate_to = -1);
  // Marks a param as donated to output `output` after the fact (before ret), for callers that
  // learn their outputs last.
  void donate(const Value& param, int output);
  // The function's outputs, in order (set once).
  void ret(std::vector<Value> outputs);
  // The whole module, `module { func.func @main(...) -> (...) { ... } }`.
  std::string text() const;

  // Several devices: the module declares the mesh (Shardy's `sdy.mesh @mesh`), and every argument
  // and result carries its sharding over it (unset ones: whole on every device). A single-device
  // mesh adds nothing to the text.
  void set_mesh(const Mesh& mesh) { mesh_ = mesh; }
  // The pieces dimension `dim` of a value sharded `s` is split into on the mesh.
  int64_t shards(const TensorSharding& s, size_t dim) const { return shard_count(mesh_, s, dim); }
  void shard_param(const Value& param, const TensorSharding& sharding);
  void shard_results(std::vector<TensorSharding> shardings);
  // Folding. reshape, slice and concatenate look through the reshapes, slices and concatenations
  // that made their operand: a reshape of a reshape is one reshape (none where the shape comes
  // back), a slice of a concatenation is the pieces it covers, adjacent slices of one value
  // concatenated are one slice. All exact (data movement only). The PJRT backend passes every
  // value through flat memory, so a value read back in the shape it was written is then the value
  // itself, and a weight read across several parameters (the fused q|k|v rows) is the
  // concatenation of those parameters.
  // With split_concatenations (a tensor-parallel mesh) concatenations also move outwards through
  // the ops that take them: a product with a concatenated operand is the concatenation of the
  // products with its pieces (or, concatenated alike on both sides along a contracted dimension,
  // their sum), and so for elementwise ops and broadcasts. Then each of q, k and v keeps the
  // split of its own parameter (by heads), where their concatenation, split in halves, would not.
  void split_concatenations(bool on) { split_ = on; }
  // A program for a device that emulates f64 or runs it slowly (an accelerator): from here on
  // an f64 parameter or result is a failed check, so no f64 reaches it by any path.
  void refuse_f64() { refuse_f64_ = true; }
  // x constrained to the sharding s over the mesh (Shardy's sharding_constraint; axes the mesh
  // lacks or has of size 1 are left out); x itself on a single device.
  Value sharding_constraint(const Value& x, TensorSharding s);
  // The value x is a reshape of (x where it is none): the shape a flat value had before the PJRT
  // backend flattened it, for ops that should see it in that shape (a barrier, a loop).
  Value unflattened(const Value& x) const;

  // `value` in every element of a tensor of this type, rounded to dtype (bf16 and f16 through f32,
  // as f32_to_bf16 does); an i32 constant must be an integer in range.
  Value constant(double value, DType dtype, Dims dims = {});

  // Elementwise, on operands of one type (no implicit broadcast: see broadcast_in_dim).
  Value add(const Value& a, const Value& b);
  Value subtract(const Value& a, const Value& b);
  Value multiply(const Value& a, const Value& b);
  Value divide(const Value& a, const Value& b);
  Value maximum(const Value& a, const Value& b);
  Value negate(const Value& x);
  Value power(const Value& a, const Value& b);  // a^b
  Value exp(const Value& x);
  Value expm1(const Value& x);  // exp(x) - 1, exact near 0
  Value log(const Value& x);
  Value tanh(const Value& x);
  Value rsqrt(const Value& x);
  Value sqrt(const Value& x);
  Value logistic(const Value& x);  // 1 / (1 + exp(-x))
  Value sine(const Value& x);
  Value cosine(const Value& x);
  Value convert(const Value& x, DType to);  // x may be a pred (true -> 1)

  // Integer bit ops (i32; XLA's i32 add and multiply wrap, so with these an i32 tensor does u32
  // arithmetic: Philox in dropout). Shift counts of 32 or more give 0.
  Value bit_and(const Value& a, const Value& b);
  Value bit_or(const Value& a, const Value& b);
  Value bit_xor(const Value& a, const Value& b);
  Value shift_left(const Value& x, const Value& count);
  Value shift_right_logical(const Value& x, const Value& count);
  // Rows of x[V, rest...] picked by indices[N] (i32): [N, rest...]. An index outside [0, V) is
  // clamped into it (gather's rule).
  Value gather_rows(const Value& x, const Value& indices);
  // x[V, rest...] with updates[N, rest...] added at rows indices[N] (i32), repeats summed in an
  // order XLA chooses; indices outside [0, V) are skipped (scatter's rule).
  Value scatter_add_rows(const Value& x, const Value& indices, const Value& updates);

  // Result dims `dims`; operand dimension i becomes result dimension broadcast_dims[i] (its size
  // equal there, or 1 to repeat it).
  Value broadcast_in_dim(const Value& x, Dims dims, Dims broadcast_dims);
  Value reshape(const Value& x, Dims dims);  // same element count
  // The same bits as another element type. To a narrower type a last dimension of the width
  // ratio is added ([n] f32 -> [n, 4] u8); to a wider one the last dimension (the ratio) goes.
  Value bitcast_convert(const Value& x, DType to);
  Value transpose(const Value& x, Dims permutation);  // result dim i = x dim permutation[i]
  // Elements start[d], start[d] + stride[d], ... below limit[d] (stride defaults to 1).
  Value slice(const Value& x, Dims start, Dims limit, Dims stride = {});
  Value concatenate(const std::vector<Value>& xs, int64_t dim);
  // x with `low` and `high` zeros added before and after it in each dimension.
  Value pad_zeros(const Value& x, const Dims& low, const Dims& high);
  // Result dims: batch dims (in lhs order), then lhs's free dims, then rhs's free dims.
  // `result` is the result's element type (products accumulate in it): the operands' type, or
  // f32 for bf16/f16 operands (mixed precision: bf16 products summed in f32).
  Value dot_general(const Value& lhs, const Value& rhs, Dims lhs_batch, Dims rhs_batch,
                    Dims lhs_contract, Dims rhs_contract);
  Value dot_general(const Value& lhs, const Value& rhs, Dims lhs_batch, Dims rhs_batch,
                    Dims lhs_contract, Dims rhs_contract, DType result);
  // Sum or max over `dims` (removed from the result); init 0 or -inf (the dtype's lowest for i32).
  Value reduce_sum(const Value& x, Dims dims);
  Value reduce_max(const Value& x, Dims dims);
  // Several operands of one shape reduced together over `dims` (removed from the results), from
  // `init` (a scalar of each operand's type). combine(a, c) joins two partial results, each one
  // value per operand; XLA joins them in an order of its own choosing, so combine must not care
  // beyond rounding (the compensated sums of hlo/wide.cpp).
  using Combine = std::function<std::vector<Value>(StablehloBuilder&, const std::vector<Value>& a,
                                                   const std::vector<Value>& c)>;
  std::vector<Value> reduce_with(const std::vector<Value>& xs, const std::vector<Value>& init,
                                 const Dims& dims, const Combine& combine);
  Value compare(const Value& a, const Value& b, CompareDir dir);  // a pred tensor
  Value select(const Value& pred, const Value& on_true, const Value& on_false);
  Value iota(DType dtype, Dims dims, int64_t dim);  // element = its index along `dim`

  // Loops and indexed slices: what lets a program walk a long axis block by block instead of
  // holding it whole (blocked attention, attention_blocked.cpp).
  //
  // stablehlo.while: starting from `init`, while cond(values) (a pred scalar) holds, values =
  // body(values); returns the final values. cond and body build their ops into the loop's own
  // regions, whose block arguments are the Values they are given; they may also use any value
  // visible where while_loop is called. A value made inside a region is not visible outside it.
  using Cond = std::function<Value(StablehloBuilder&, const std::vector<Value>&)>;
  using Body = std::function<std::vector<Value>(StablehloBuilder&, const std::vector<Value>&)>;
  std::vector<Value> while_loop(const std::vector<Value>& init, const Cond& cond, const Body& body);
  // The block of `sizes` at `start` (i32 scalars, one per dimension), each start clamped so the
  // block lies inside x.
  Value dynamic_slice(const Value& x, const std::vector<Value>& start, Dims sizes);
  // x with `update` written at `start` (i32 scalars, clamped the same way).
  Value dynamic_update_slice(const Value& x, const Value& update, const std::vector<Value>& start);

  // The same values, which the compiler may neither look through nor move computations across:
  // what an activation checkpoint's recomputation starts from goes through one, so that XLA does
  // not merge the recomputation with the forward pass it repeats (keeping the forward's values
  // alive) and does not start it before the gradient that needs it exists.
  std::vector<Value> optimization_barrier(const std::vector<Value>& xs);

  // A call of a kernel the compiler's backend provides (cuDNN's fused attention on XLA's GPU
  // backend). result_types gives each result's type (its dtype and dims; its value is unused).
  struct CustomCall {
    std::string target;          // e.g. "__cudnn$fmhaSoftmax"
    std::string backend_config;  // as the target reads it (JSON for XLA's GPU kernels)
    std::vector<Dims> operand_layouts, result_layouts;  // minor-to-major; empty: default
  };
  std::vector<Value> custom_call(const CustomCall& c, const std::vector<Value>& operands,
                                 const std::vector<Value>& result_types);
  // A value of this type for custom_call's result_types (no op is emitted).
  static Value type_of(DType dtype, Dims dims) {
    Value v;
    v.dtype = dtype;
    v.dims = std::move(dims);
    return v;
  }

 private:
  Value next(DType dtype, Dims dims, bool pred = false);
  void check_type(DType t) const;
  std::string name(const Value& v) const;
  void check_mine(const Value& v) const;
  Value elementwise(const char* op, const Value& a, const Value& b);
  Value integer(const char* op, const Value& a, const Value& b);
  Value unary(const char* op, const Value& x, bool float_only);
  Value reduce(const char* op, double init, const Value& x, const Dims& dims);

  // Region nesting. Ops go to lines_, the lines of the innermost open region (the function body
  // when none is open); opening a region parks the enclosing one's lines in outer_lines_.
  // Numbering stays module-wide (ops_ for results, regions_ for block arguments), so a name never
  // shadows one visible from an enclosing region.
  std::vector<Value> open_region(const std::vector<Value>& block_args);
  std::vector<std::string> close_region();
  std::vector<Value> op_results(int op, const std::vector<Value>& like);
  // The ops emitted as written (the public reshape, slice, concatenate and dot_general fold first:
  // builder_fold.cpp).
  Value emit_reshape(const Value& x, Dims dims);
  Value emit_slice(const Value& x, const Dims& start, const Dims& limit, const Dims& stride);
  Value emit_concatenate(const std::vector<Value>& xs, int64_t dim);
  Value emit_dot(const Value& lhs, const Value& rhs, const Dims& lhs_batch, const Dims& rhs_batch,
                 const Dims& lhs_contract, const Dims& rhs_contract, DType result);
  // What made a value, for the ops folding looks through (the others: kind other).
  struct Def {
    enum Kind { other, reshape, slice, concatenate } kind = other;
    std::vector<Value> in;
    Dims start, limit;  // slice (stride 1)
    int64_t dim = 0;    // concatenate
  };
  const Def& def_of(const Value& v) const;
  // The data-movement ops (reshape, slice, concatenate) are emitted once per operand and form:
  // folding rebuilds the same piece from several reads. `op` is the op's text after "r = ".
  const Value* reuse(const std::string& op) const;
  void emit(const Value& r, const std::string& op, Def d);
  // The operands of v if it is a concatenation along `dim` (any dim: -1), else {}.
  const std::vector<Value>* pieces_of(const Value& v, int64_t dim = -1) const;
  Value fold_slice(const Value& x, const Dims& start, const Dims& limit);
  std::optional<Value> split_dot(const Value& lhs, const Value& rhs, const Dims& lhs_batch,
                                 const Dims& rhs_batch, const Dims& lhs_contract,
                                 const Dims& rhs_contract, DType result);
  std::vector<Def> defs_;                           // by op number
  std::unordered_map<std::string, Value> emitted_;  // data-movement op text -> its result
  bool split_ = false;
  bool refuse_f64_ = false;

  std::string sharding_attr(const TensorSharding& s, size_t rank) const;

  std::vector<Value> params_;
  std::vector<int> donate_to_;
  Mesh mesh_;
  std::vector<TensorSharding> param_shardings_, result_shardings_;
  std::vector<std::string> lines_;  // the current region's ops, one a line (or one text line)
  std::vector<std::vector<std::string>> outer_lines_;
  std::vector<int> open_scopes_{0};  // the regions whose values are visible, innermost last
  std::vector<Value> outputs_;
  bool returned_ = false;
  int ops_ = 0;
  int regions_ = 0;
  int id_;  // distinct per builder
};

// MLIR's spelling of a type: tensor<3x5xf32>, tensor<bf16>, tensor<4xi1>.
std::string mlir_tensor_type(const HloValue& v);

}  // namespace lmt

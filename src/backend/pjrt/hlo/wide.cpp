// The device scalars the host reads and writes as doubles (see lowering.h), in their two forms:
// an f64, or a pair of f32 (hi, lo) whose sum is the value. Pairs are added with error-free
// transformations (Knuth's two-sum, Dekker's fast two-sum) as Joldes, Muller and Popescu's
// "accurate double-word addition" does (algorithm 6 of "Tight and rigorous error bounds for basic
// building blocks of double-word arithmetic", 2017): a relative error below 3 u^2 (u = 2^-24)
// whatever the signs, so a sum of n elements is off by about n 2^-46 of the sum of their
// magnitudes at worst, where an f32 sum would be off by n 2^-24. They rely on the compiler
// evaluating f32 additions as written, without reassociating them: XLA:CPU does (a sum of a
// million elements is held to 1e-12 of its exact value by tests/pjrt/test_accelerator_statistics
// .cpp); XLA's GPU and TPU compilers are not known to reassociate either, not yet checked there.
#include <numeric>

#include "backend/pjrt/hlo/lowering_helpers.h"
#include "core/error.h"

namespace lmt::hlo {
namespace {

struct Pair {
  Value hi, lo;
};

// hi + lo == a + c exactly, hi the rounded sum (Knuth's two-sum).
Pair two_sum(StablehloBuilder& b, const Value& a, const Value& c) {
  const Value s = b.add(a, c);
  const Value v = b.subtract(s, a);
  const Value e = b.add(b.subtract(a, b.subtract(s, v)), b.subtract(c, v));
  return {s, e};
}

// The same for |a| >= |c| (or a == 0), in three operations (Dekker's fast two-sum).
Pair fast_two_sum(StablehloBuilder& b, const Value& a, const Value& c) {
  const Value s = b.add(a, c);
  return {s, b.subtract(c, b.subtract(s, a))};
}

Pair add_pairs(StablehloBuilder& b, const Pair& x, const Pair& y) {
  const Pair s = two_sum(b, x.hi, y.hi);
  const Pair t = two_sum(b, x.lo, y.lo);
  const Pair v = fast_two_sum(b, s.hi, b.add(s.lo, t.hi));
  return fast_two_sum(b, v.hi, b.add(t.lo, v.lo));
}

bool is_pair(const Value& w) {
  return w.dtype == DType::f32 && w.dims == std::vector<int64_t>{2};
}

Pair split(StablehloBuilder& b, const Value& w) {
  LMT_CHECK(is_pair(w), "wide scalar: an f32 pair is f32[2], not " + mlir_tensor_type(w));
  return {b.reshape(b.slice(w, {0}, {1}), {}), b.reshape(b.slice(w, {1}, {2}), {})};
}

Value join(StablehloBuilder& b, const Pair& p) {
  return b.concatenate({b.reshape(p.hi, {1}), b.reshape(p.lo, {1})}, 0);
}

}  // namespace

WideForm wide_form(const std::string& platform) {
  return platform == "cpu" ? WideForm::f64 : WideForm::f32_pair;
}

Value wide_zero(StablehloBuilder& b, WideForm form) {
  return form == WideForm::f64 ? b.constant(0.0, DType::f64) : b.constant(0.0, DType::f32, {2});
}

Value wide_sum(StablehloBuilder& b, const Value& x, WideForm form) {
  Dims all(x.dims.size());
  std::iota(all.begin(), all.end(), int64_t{0});
  if (form == WideForm::f64) return b.reduce_sum(to(b, x, DType::f64), all);
  const Value xf = to(b, x, DType::f32);
  const Value zero = b.constant(0.0, DType::f32);
  const std::vector<Value> s = b.reduce_with(
      {xf, b.constant(0.0, DType::f32, xf.dims)}, {zero, zero}, all,
      [](StablehloBuilder& lb, const std::vector<Value>& a, const std::vector<Value>& c) {
        const Pair r = add_pairs(lb, {a[0], a[1]}, {c[0], c[1]});
        return std::vector<Value>{r.hi, r.lo};
      });
  return join(b, {s[0], s[1]});
}

Value wide_add(StablehloBuilder& b, const Value& a, const Value& c) {
  if (a.dtype == DType::f64) return b.add(a, c);
  return join(b, add_pairs(b, split(b, a), split(b, c)));
}

Value wide_value(StablehloBuilder& b, const Value& w) {
  return w.dtype == DType::f64 ? w : split(b, w).hi;
}

Value as_wide(StablehloBuilder& b, const Value& v, WideForm form) {
  LMT_CHECK(v.rank() == 0, "as_wide: a scalar");
  if (form == WideForm::f64) return to(b, v, DType::f64);
  return join(b, {to(b, v, DType::f32), b.constant(0.0, DType::f32)});
}

}  // namespace lmt::hlo

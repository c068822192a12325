// The MLP activation section of backend.h as StableHLO (see lowering.h): SiLU, the
// tanh-approximated GELU, ReLU and ReLU^2, plain or gated (glu), their gradients, and ReLU's
// packed sign mask. Each follows its CPU kernel's formula.
#include <cmath>

#include "backend/pjrt/hlo/lowering_helpers.h"
#include "core/error.h"

namespace lmt::hlo {

namespace {

// act(g) and act'(g), elementwise.
struct Act {
  Value f, df;
};
Act activation(StablehloBuilder& b, Activation act, const Value& g) {
  if (act == Activation::relu || act == Activation::relu2) {  // as the CPU kernel: g > 0 ? g : 0
    const Value zero = scalar(b, 0.0, g);
    const Value pos = b.compare(g, zero, CompareDir::gt);
    const Value r = b.select(pos, g, zero);
    if (act == Activation::relu) return {r, b.select(pos, scalar(b, 1.0, g), zero)};
    return {b.multiply(r, r), b.multiply(scalar(b, 2.0, g), r)};
  }
  if (act == Activation::silu) {  // g s(g); s (1 + g (1 - s))
    const Value s = b.logistic(g);
    const Value one = scalar(b, 1.0, g);
    return {b.multiply(g, s), b.multiply(s, b.add(one, b.multiply(g, b.subtract(one, s))))};
  }
  // 0.5 g (1 + t), t = tanh(k (g + c g^3)); derivative 0.5 (1 + t) + 0.5 g (1 - t^2) k (1 + 3c g^2)
  const double k = std::sqrt(2.0 / M_PI), c = 0.044715;
  const Value g2 = b.multiply(g, g);
  const Value inner =
      b.multiply(scalar(b, k, g), b.add(g, b.multiply(scalar(b, c, g), b.multiply(g2, g))));
  const Value t = b.tanh(inner);
  const Value half = scalar(b, 0.5, g), one = scalar(b, 1.0, g);
  const Value one_t = b.add(one, t);
  const Value f = b.multiply(half, b.multiply(g, one_t));
  const Value dinner = b.multiply(scalar(b, k, g), b.add(one, b.multiply(scalar(b, 3 * c, g), g2)));
  const Value df =
      b.add(b.multiply(half, one_t),
            b.multiply(half, b.multiply(g, b.multiply(b.subtract(one, b.multiply(t, t)), dinner))));
  return {f, df};
}

}  // namespace

Value act_forward(StablehloBuilder& b, Activation act, const Value& x) {
  return activation(b, act, x).f;
}

Value act_backward(StablehloBuilder& b, Activation act, const Value& dout, const Value& x) {
  return b.multiply(dout, activation(b, act, x).df);
}

Value relu_mask(StablehloBuilder& b, const Value& x) {
  LMT_CHECK(x.rank() == 1, "relu_mask: x [n]");
  const int64_t n = x.dims[0], words = (n + 31) / 32;
  Value bits = b.convert(b.compare(x, scalar(b, 0.0, x), CompareDir::gt), DType::i32);
  if (words * 32 > n) bits = b.concatenate({bits, b.constant(0, DType::i32, {words * 32 - n})}, 0);
  const Dims wd = {words, 32};
  // Distinct bits: their wrapping i32 sum is their or.
  return b.reduce_sum(b.shift_left(b.reshape(bits, wd), b.iota(DType::i32, wd, 1)), {1});
}

Value relu_backward_masked(StablehloBuilder& b, const Value& dout, const Value& mask) {
  LMT_CHECK(dout.rank() == 1 && mask.rank() == 1 && mask.dtype == DType::i32 &&
                mask.dims[0] == (dout.dims[0] + 31) / 32,
            "relu_backward_masked: dout [n], mask [ceil(n / 32)] i32");
  const int64_t n = dout.dims[0], words = mask.dims[0];
  const Dims wd = {words, 32};
  const Value bits =
      b.bit_and(b.shift_right_logical(b.broadcast_in_dim(mask, wd, {0}), b.iota(DType::i32, wd, 1)),
                b.constant(1, DType::i32, wd));
  const Value on = b.compare(b.slice(b.reshape(bits, {words * 32}), {0}, {n}),
                             b.constant(0, DType::i32, {n}), CompareDir::ne);
  return b.multiply(dout, b.select(on, scalar(b, 1.0, dout), scalar(b, 0.0, dout)));
}

Value relu2_backward_from_output(StablehloBuilder& b, const Value& dout, const Value& y,
                                 DType stored) {
  Value r = b.sqrt(y);
  if (stored != r.dtype) r = b.convert(b.convert(r, stored), r.dtype);
  return b.multiply(dout, b.multiply(scalar(b, 2.0, r), r));
}

Value glu_forward(StablehloBuilder& b, Activation act, const Value& gate_up) {
  const int64_t N = gate_up.dims[0], F = gate_up.dims[1] / 2;
  LMT_CHECK(gate_up.rank() == 2 && gate_up.dims[1] == 2 * F, "glu: gate_up [N, 2F]");
  const Value gate = b.slice(gate_up, {0, 0}, {N, F});
  const Value up = b.slice(gate_up, {0, F}, {N, 2 * F});
  return b.multiply(activation(b, act, gate).f, up);
}

Value glu_backward(StablehloBuilder& b, Activation act, const Value& dout, const Value& gate_up) {
  const int64_t N = gate_up.dims[0], F = gate_up.dims[1] / 2;
  const Value gate = b.slice(gate_up, {0, 0}, {N, F});
  const Value up = b.slice(gate_up, {0, F}, {N, 2 * F});
  const Act a = activation(b, act, gate);
  return b.concatenate({b.multiply(b.multiply(dout, up), a.df), b.multiply(dout, a.f)}, 1);
}

}  // namespace lmt::hlo

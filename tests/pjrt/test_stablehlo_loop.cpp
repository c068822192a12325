// StablehloBuilder's loops and indexed slices (while_loop, dynamic_slice, dynamic_update_slice):
// the text of a small loop, the type and scope checks, and loops run on XLA's CPU plugin against
// C++ in double: a blockwise prefix sum that reads a value from outside the loop, and nested
// loops whose inner trip count depends on the outer counter.
#include <gtest/gtest.h>

#include <vector>

#include "backend/pjrt/hlo/builder.h"
#include "pjrt_test_util.h"

namespace lmt {
namespace {

using Dims = std::vector<int64_t>;
using Values = std::vector<HloValue>;

HloValue i32(StablehloBuilder& b, int v) {
  return b.constant(v, DType::i32);
}

TEST(StablehloLoopText, WhileRegionsAndNames) {
  StablehloBuilder b;
  auto x = b.param(DType::f32, {4});
  auto out = b.while_loop(
      {i32(b, 0), x},
      [](StablehloBuilder& r, const Values& v) {
        return r.compare(v[0], r.constant(3, DType::i32), CompareDir::lt);
      },
      [&](StablehloBuilder& r, const Values& v) {
        return Values{r.add(v[0], r.constant(1, DType::i32)), r.add(v[1], x)};
      });
  b.ret({out[1]});
  EXPECT_EQ(b.text(), R"(module {
  func.func @main(%arg0: tensor<4xf32>) -> (tensor<4xf32>) {
    %0 = stablehlo.constant dense<0> : tensor<i32>
    %1:2 = "stablehlo.while"(%0, %arg0) ({
    ^bb0(%r0_0: tensor<i32>, %r0_1: tensor<4xf32>):
      %2 = stablehlo.constant dense<3> : tensor<i32>
      %3 = stablehlo.compare LT, %r0_0, %2 : (tensor<i32>, tensor<i32>) -> tensor<i1>
      stablehlo.return %3 : tensor<i1>
    }, {
    ^bb0(%r1_0: tensor<i32>, %r1_1: tensor<4xf32>):
      %4 = stablehlo.constant dense<1> : tensor<i32>
      %5 = stablehlo.add %r1_0, %4 : tensor<i32>
      %6 = stablehlo.add %r1_1, %arg0 : tensor<4xf32>
      stablehlo.return %5, %6 : tensor<i32>, tensor<4xf32>
    }) : (tensor<i32>, tensor<4xf32>) -> (tensor<i32>, tensor<4xf32>)
    return %1#1 : tensor<4xf32>
  }
}
)");
}

TEST(StablehloLoopText, ChecksTypesAndScopes) {
  StablehloBuilder b;
  auto x = b.param(DType::f32, {6, 4});
  auto i = i32(b, 1);
  EXPECT_EQ(b.dynamic_slice(x, {i, i}, {2, 4}).dims, (Dims{2, 4}));
  EXPECT_THROW(b.dynamic_slice(x, {i}, {2, 4}), InternalError);     // one start per dim
  EXPECT_THROW(b.dynamic_slice(x, {i, i}, {7, 4}), InternalError);  // larger than x
  EXPECT_THROW(b.dynamic_slice(x, {x, i}, {2, 4}), InternalError);  // start not an i32 scalar
  EXPECT_THROW(b.dynamic_update_slice(x, b.param(DType::f32, {8, 1}), {i, i}), InternalError);
  HloValue inner;
  StablehloBuilder c;
  auto y = c.param(DType::f32, {3});
  auto cond = [](StablehloBuilder& r, const Values& v) {
    return r.compare(v[0], v[0], CompareDir::ne);
  };
  c.while_loop({i32(c, 0), y}, cond, [&](StablehloBuilder& r, const Values& v) {
    inner = r.negate(v[1]);
    return Values{v[0], inner};
  });
  EXPECT_THROW(c.negate(inner), InternalError);  // made inside the body, used after the loop
  StablehloBuilder d;
  auto z = d.param(DType::f32, {3});
  EXPECT_THROW(d.while_loop({i32(d, 0), z}, cond,  // the body changes a loop value's type
                            [](StablehloBuilder& r, const Values& v) {
                              return Values{v[0], r.convert(v[1], DType::f64)};
                            }),
               InternalError);
  StablehloBuilder e;
  auto w = e.param(DType::f32, {3});
  EXPECT_THROW(e.while_loop({w}, cond,  // cond gives a pred vector
                            [](StablehloBuilder&, const Values& v) { return v; }),
               InternalError);
}

class StablehloLoopTest : public test::PjrtTest {};

// out[i] = x[0] + ... + x[i] over rows of x[R, C], R = nb * rows_per_block, one block of rows a
// trip: the block read by dynamic_slice, its running sums added to a carry, the result written by
// dynamic_update_slice, and a scale from outside the loop applied inside it. A single loop value
// (the buffer carries the counter in its last column) checks the one-result form.
TEST_F(StablehloLoopTest, BlockwisePrefixSum) {
  const int64_t nb = 5, rb = 3, R = nb * rb, C = 7;
  const std::vector<float> x = uniform(R * C);
  StablehloBuilder b;
  auto px = b.param(DType::f32, {R, C});
  auto scale = b.constant(0.5, DType::f32, {rb, C});
  auto zero = i32(b, 0);
  auto res = b.while_loop(
      {zero, b.constant(0.0, DType::f32, {C}), b.constant(0.0, DType::f32, {R, C})},
      [&](StablehloBuilder& r, const Values& v) {
        return r.compare(v[0], r.constant(nb, DType::i32), CompareDir::lt);
      },
      [&](StablehloBuilder& r, const Values& v) {
        auto row0 = r.multiply(v[0], r.constant(rb, DType::i32));
        auto blk = r.multiply(r.dynamic_slice(px, {row0, zero}, {rb, C}), scale);
        // Inclusive prefix sum over the block's rows: a lower-triangular ones matrix times blk.
        auto tri = r.convert(r.compare(r.iota(DType::i32, {rb, rb}, 1),
                                       r.iota(DType::i32, {rb, rb}, 0), CompareDir::le),
                             DType::f32);
        auto sums = r.add(r.dot_general(tri, blk, {}, {}, {1}, {0}),
                          r.broadcast_in_dim(v[1], {rb, C}, {1}));
        auto carry = r.reshape(r.slice(sums, {rb - 1, 0}, {rb, C}), {C});
        return Values{r.add(v[0], r.constant(1, DType::i32)), carry,
                      r.dynamic_update_slice(v[2], sums, {row0, zero})};
      });
  auto single = b.while_loop(
      {b.constant(0.0, DType::f32, {2})},
      [](StablehloBuilder& r, const Values& v) {
        auto first = r.reshape(r.slice(v[0], {0}, {1}), {});
        return r.compare(first, r.constant(4.0, DType::f32), CompareDir::lt);
      },
      [](StablehloBuilder& r, const Values& v) {
        return Values{r.add(v[0], r.constant(1.5, DType::f32, {2}))};
      });
  b.ret({res[2], res[1], single[0]});
  PjrtBuffer bx = client_->to_device(x.data(), DType::f32, {R, C});
  auto out = client_->compile(b.text()).execute(std::vector<PjrtBuffer*>{&bx});
  std::vector<double> want(R * C), acc(C, 0.0);
  for (int64_t i = 0; i < R; ++i)
    for (int64_t c = 0; c < C; ++c) want[i * C + c] = acc[c] += 0.5 * x[i * C + c];
  test::expect_near_all(out[0].template to_host<float>(), want, std::vector<double>(R * C, 1.0),
                        1e-5, "prefix sums, " + seed_note());
  test::expect_near_all(out[1].template to_host<float>(), acc, std::vector<double>(C, 1.0), 1e-5,
                        "carry, " + seed_note());
  EXPECT_EQ(out[2].template to_host<float>(), (std::vector<float>{4.5f, 4.5f}));
}

// count = sum over i < n of (number of j in [i, n)) = n (n + 1) / 2, with the inner loop's bound
// the outer counter; dynamic_slice's clamping: a start past the end reads the last block.
TEST_F(StablehloLoopTest, NestedLoopsAndClampedStart) {
  const int n = 9;
  StablehloBuilder b;
  auto lt = [](StablehloBuilder& r, const HloValue& a, const HloValue& c) {
    return r.compare(a, c, CompareDir::lt);
  };
  auto one = [](StablehloBuilder& r) { return r.constant(1, DType::i32); };
  auto res = b.while_loop(
      {i32(b, 0), i32(b, 0)},
      [&](StablehloBuilder& r, const Values& v) { return lt(r, v[0], r.constant(n, DType::i32)); },
      [&](StablehloBuilder& r, const Values& v) {
        auto inner = r.while_loop(
            {v[0], v[1]},
            [&](StablehloBuilder& s, const Values& w) {
              return lt(s, w[0], s.constant(n, DType::i32));
            },
            [&](StablehloBuilder& s, const Values& w) {
              return Values{s.add(w[0], one(s)), s.add(w[1], one(s))};
            });
        return Values{r.add(v[0], one(r)), inner[1]};
      });
  auto data = b.iota(DType::i32, {10}, 0);
  auto clamped = b.dynamic_slice(data, {i32(b, 8)}, {4});
  b.ret({res[1], clamped});
  auto out = client_->compile(b.text()).execute(std::vector<PjrtBuffer*>{});
  EXPECT_EQ(out[0].to_host<int32_t>(), (std::vector<int32_t>{n * (n + 1) / 2}));
  EXPECT_EQ(out[1].to_host<int32_t>(), (std::vector<int32_t>{6, 7, 8, 9}));
}

}  // namespace
}  // namespace lmt

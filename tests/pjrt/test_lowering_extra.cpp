// Dropout, the per-head RMSNorm and the embedding as StableHLO (backend/pjrt/hlo/lowering.h), run on
// XLA's CPU plugin against the CPU backend's kernels on fresh random inputs; and the builder's
// integer, gather and scatter ops they rest on, against naive C++. Dropout must match bit for bit
// (its mask is integer arithmetic, its scale one rounded multiply); the rest within 2e-5 of the
// largest element in f32, as in lowering_test.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/pjrt/hlo/lowering.h"
#include "core/rng.h"
#include "pjrt_test_util.h"

namespace lmt {
namespace {

using Dims = std::vector<int64_t>;

class LoweringExtraTest : public test::LoweringFixture {
 protected:
  std::vector<PjrtBuffer> run(const StablehloBuilder& b, std::vector<PjrtBuffer*> args) {
    return client_->compile(b.text()).execute(args);
  }
  // Runs exe (x, key) -> dropout(x) on fresh x and compares its bits with the CPU kernel's.
  template <class T>
  void check_dropout(PjrtExecutable& exe, const Dims& dims, double p, uint64_t seed,
                     uint64_t stream, const std::string& what);
};

// The key tensor: the 64-bit seed and stream as four 32-bit halves, each as i32 bits.
std::vector<int32_t> key_of(uint64_t seed, uint64_t stream) {
  auto i32 = [](uint64_t v) { return static_cast<int32_t>(static_cast<uint32_t>(v)); };
  return {i32(seed), i32(seed >> 32), i32(stream), i32(stream >> 32)};
}

template <class T>
void LoweringExtraTest::check_dropout(PjrtExecutable& exe, const Dims& dims, double p,
                                      uint64_t seed, uint64_t stream, const std::string& what) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  const std::vector<float> xf = uniform(static_cast<size_t>(n));
  const std::vector<T> x(xf.begin(), xf.end());
  const DType dt = sizeof(T) == 4 ? DType::f32 : DType::f64;
  PjrtBuffer bx = client_->to_device(x.data(), dt, dims), bk = dev_i32(key_of(seed, stream), {4});
  const std::vector<T> got = exe.execute(std::vector<PjrtBuffer*>{&bx, &bk})[0].to_host<T>();
  std::vector<T> want(static_cast<size_t>(n));
  const uint64_t key[2] = {seed, stream};
  cpu_.dropout(dt, want.data(), x.data(), n, p, key, 0);
  ASSERT_EQ(got.size(), want.size()) << what;
  int64_t bad = 0, dropped = 0;
  for (int64_t i = 0; i < n; ++i) {
    bad += std::memcmp(&got[i], &want[i], sizeof(T)) != 0;
    dropped += want[i] == 0;
  }
  EXPECT_EQ(bad, 0) << what;
  EXPECT_GT(dropped, 0) << what;  // both outcomes occur: a constant mask cannot pass
  EXPECT_LT(dropped, n) << what;
}

// Bit-exact against the CPU kernel, one compiled program per shape, dtype and p serving several
// keys, some with every high bit set (the unsigned arithmetic's edge). Odd sizes leave the last
// Philox counter partly used.
TEST_F(LoweringExtraTest, DropoutMatchesCpuBitForBit) {
  struct Case {
    Dims dims;
    double p;
    DType dt;
  };
  const uint64_t r = (uint64_t{rng_()} << 32) | rng_();
  const std::vector<std::pair<uint64_t, uint64_t>> keys = {
      {r, 0}, {0x9E3779B97F4A7C15ull, 7}, {~0ull, ~0ull}, {r ^ 0xFFFFFFFF00000000ull, r >> 7}};
  // Sizes such that both outcomes occur with certainty in practice (none dropped at p 0.1 over
  // 153 elements: 1e-7).
  for (const Case& c : {Case{{17, 9}, 0.1, DType::f32}, Case{{1001}, 0.5, DType::f32},
                        Case{{3, 5, 6}, 0.37, DType::f32}, Case{{13, 15}, 0.1, DType::f64}}) {
    StablehloBuilder b;
    const auto px = b.param(c.dt, c.dims), pk = b.param(DType::i32, {4});
    b.ret({hlo::dropout(b, px, c.p, pk)});
    PjrtExecutable exe = client_->compile(b.text());
    for (const auto& [seed, stream] : keys) {
      const std::string what = std::string(dtype_name(c.dt)) + ", p " + std::to_string(c.p) +
                               ", seed " + std::to_string(seed) + ", stream " +
                               std::to_string(stream) + ", " + seed_note();
      if (c.dt == DType::f32)
        check_dropout<float>(exe, c.dims, c.p, seed, stream, what);
      else
        check_dropout<double>(exe, c.dims, c.p, seed, stream, what);
    }
  }
}

TEST_F(LoweringExtraTest, HeadRmsNormForwardAndBackward) {
  for (double offset : {0.0, 1.0}) {
    const int64_t N = 5, H = 3, D = 11;
    const std::vector<float> x = uniform(N * H * D), w = uniform(D), dout = uniform(N * H * D);
    StablehloBuilder b;
    const auto px = b.param(DType::f32, {N, H, D}), pw = b.param(DType::f32, {D}),
               pd = b.param(DType::f32, {N, H, D});
    const hlo::NormOut f = hlo::head_rmsnorm_forward(b, px, pw, 1e-6, offset);
    const hlo::NormGrads g = hlo::head_rmsnorm_backward(b, pd, px, pw, f.rstd, offset);
    b.ret({f.out, f.rstd, g.dx, g.dw});
    PjrtBuffer bx = dev(x, {N, H, D}), bw = dev(w, {D}), bd = dev(dout, {N, H, D});
    const auto got = run(b, {&bx, &bw, &bd});
    std::vector<float> out(N * H * D), rstd(N * H), dx(N * H * D, 7.f), dw(D, 0.f);
    cpu_.head_rmsnorm_forward(DType::f32, out.data(), rstd.data(), x.data(), w.data(), N, H * D,
                              int(H), int(D), 1e-6, offset);
    cpu_.head_rmsnorm_backward(DType::f32, dx.data(), dw.data(), dout.data(), x.data(), w.data(),
                               rstd.data(), N, H * D, int(H), int(D), offset);
    expect_match(got[0].to_host<float>(), out, "out");
    expect_match(got[1].to_host<float>(), rstd, "rstd");
    expect_match(got[2].to_host<float>(), dx, "dx");
    expect_match(got[3].to_host<float>(), dw, "dw");
  }
}

// Repeated ids (token 2 three times) must sum in backward; an unused row stays 0.
TEST_F(LoweringExtraTest, EmbeddingForwardAndBackward) {
  const int64_t V = 13, C = 9, N = 11;
  std::vector<int32_t> ids(N);
  for (int32_t& id : ids) id = static_cast<int32_t>(rng_() % (V - 1));  // row V - 1 unused
  ids[1] = ids[4] = ids[9] = 2;
  const std::vector<float> table = uniform(V * C), dout = uniform(N * C);
  StablehloBuilder b;
  const auto pi = b.param(DType::i32, {N}), pt = b.param(DType::f32, {V, C}),
             pd = b.param(DType::f32, {N, C});
  b.ret({hlo::embedding_forward(b, pi, pt), hlo::embedding_backward(b, pd, pi, V)});
  PjrtBuffer bi = dev_i32(ids, {N}), bt = dev(table, {V, C}), bd = dev(dout, {N, C});
  const auto got = run(b, {&bi, &bt, &bd});
  std::vector<float> out(N * C), dtable(V * C, 0.f);
  cpu_.embedding_forward(DType::f32, out.data(), ids.data(), table.data(), N, C, V);
  cpu_.embedding_backward(DType::f32, dtable.data(), dout.data(), ids.data(), N, C, V);
  expect_match(got[0].to_host<float>(), out, "embedding out");
  expect_match(got[1].to_host<float>(), dtable, "embedding dtable");
}

// The integer ops as u32 arithmetic, on values with the sign bit set, against C++'s uint32_t.
TEST_F(LoweringExtraTest, StablehloIntegerOps) {
  const int64_t n = 37;
  std::vector<int32_t> a(n), s(n);
  for (int64_t i = 0; i < n; ++i) {
    a[i] = static_cast<int32_t>(rng_() | (i % 2 ? 0x80000000u : 0u));
    s[i] = static_cast<int32_t>(i % 32);
  }
  StablehloBuilder b;
  const auto pa = b.param(DType::i32, {n}), ps = b.param(DType::i32, {n});
  const auto k = b.constant(-0x2DAEE0AD, DType::i32, {n});  // 0xD2511F53
  b.ret({b.bit_and(pa, k), b.bit_or(pa, k), b.bit_xor(pa, k), b.shift_left(pa, ps),
         b.shift_right_logical(pa, ps), b.multiply(pa, k), b.add(pa, k)});
  PjrtBuffer ba = dev_i32(a, {n}), bs = dev_i32(s, {n});
  const auto got = run(b, {&ba, &bs});
  const uint32_t kk = 0xD2511F53u;
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t x = static_cast<uint32_t>(a[i]), sh = static_cast<uint32_t>(s[i]);
    const uint32_t want[] = {x & kk, x | kk, x ^ kk, x << sh, x >> sh, x * kk, x + kk};
    for (size_t op = 0; op < got.size(); ++op)
      EXPECT_EQ(static_cast<uint32_t>(got[op].to_host<int32_t>()[i]), want[op])
          << "op " << op << ", element " << i << ", " << seed_note();
  }
}

// Rows of a rank-3 tensor gathered and scattered back with repeats, against naive loops.
TEST_F(LoweringExtraTest, StablehloGatherAndScatterRows) {
  const int64_t V = 6, A = 2, B = 3, N = 8;
  std::vector<int32_t> idx(N);
  for (int32_t& i : idx) i = static_cast<int32_t>(rng_() % V);
  idx[0] = idx[5] = idx[6] = 4;
  const std::vector<float> x = uniform(V * A * B), u = uniform(N * A * B);
  StablehloBuilder b;
  const auto px = b.param(DType::f32, {V, A, B}), pi = b.param(DType::i32, {N}),
             pu = b.param(DType::f32, {N, A, B});
  const auto g = b.gather_rows(px, pi);
  const auto s = b.scatter_add_rows(px, pi, pu);
  EXPECT_EQ(g.dims, (Dims{N, A, B}));
  b.ret({g, s});
  PjrtBuffer bx = dev(x, {V, A, B}), bi = dev_i32(idx, {N}), bu = dev(u, {N, A, B});
  const auto got = run(b, {&bx, &bi, &bu});
  const int64_t R = A * B;
  std::vector<float> gather(N * R), scatter = x;
  for (int64_t i = 0; i < N; ++i)
    for (int64_t j = 0; j < R; ++j) {
      gather[i * R + j] = x[idx[i] * R + j];
      scatter[idx[i] * R + j] += u[i * R + j];
    }
  expect_match(got[0].to_host<float>(), gather, "gather_rows");
  expect_match(got[1].to_host<float>(), scatter, "scatter_add_rows");
  StablehloBuilder bad;
  const auto bx2 = bad.param(DType::f32, {V, A}), bi2 = bad.param(DType::i32, {N}),
             bu2 = bad.param(DType::f32, {N, A + 1});
  EXPECT_THROW(bad.scatter_add_rows(bx2, bi2, bu2), InternalError);
  EXPECT_THROW(bad.bit_xor(bx2, bx2), InternalError);  // float operands
}

}  // namespace
}  // namespace lmt

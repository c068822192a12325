// The StableHLO forms of the kernels (backend/pjrt/hlo/lowering.h), run on XLA's CPU plugin, against
// the CPU backend's kernels on the same fresh random inputs, in float32: outputs and gradients
// within 2e-5 of the largest element (float32 rounding of different but equivalent orders).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/pjrt/hlo/lowering.h"
#include "pjrt_test_util.h"

namespace lmt {
namespace {

using Dims = std::vector<int64_t>;

class LoweringTest : public test::LoweringFixture {
 protected:
  // Runs b's program on args; returns every output as floats.
  std::vector<std::vector<float>> run(const StablehloBuilder& b, std::vector<PjrtBuffer*> args) {
    std::vector<std::vector<float>> out;
    for (PjrtBuffer& o : client_->compile(b.text()).execute(args))
      out.push_back(o.to_host<float>());
    return out;
  }
};

TEST_F(LoweringTest, RmsNormForwardAndBackward) {
  for (double offset : {0.0, 1.0}) {
    const int64_t N = 7, C = 37;
    const std::vector<float> x = uniform(N * C), w = uniform(C), dout = uniform(N * C);
    StablehloBuilder b;
    const auto px = b.param(DType::f32, {N, C}), pw = b.param(DType::f32, {C}),
               pd = b.param(DType::f32, {N, C});
    const hlo::NormOut f = hlo::rmsnorm_forward(b, px, pw, 1e-6, offset);
    const hlo::NormGrads g = hlo::rmsnorm_backward(b, pd, px, pw, f.rstd, offset);
    b.ret({f.out, f.rstd, g.dx, g.dw});
    PjrtBuffer bx = dev(x, {N, C}), bw = dev(w, {C}), bd = dev(dout, {N, C});
    const auto got = run(b, {&bx, &bw, &bd});
    std::vector<float> out(N * C), rstd(N), dx(N * C, 0.f), dw(C, 0.f);
    cpu_.rmsnorm_forward(DType::f32, out.data(), rstd.data(), x.data(), w.data(), N, C, 1e-6,
                         offset);
    cpu_.rmsnorm_backward(DType::f32, dx.data(), dw.data(), dout.data(), x.data(), w.data(),
                          rstd.data(), N, C, offset);
    expect_match(got[0], out, "out");
    expect_match(got[1], rstd, "rstd");
    expect_match(got[2], dx, "dx");
    expect_match(got[3], dw, "dw");
  }
}

TEST_F(LoweringTest, GluForwardAndBackward) {
  for (Activation act : {Activation::silu, Activation::gelu_tanh}) {
    const int64_t N = 5, F = 19;
    std::vector<float> gu = uniform(N * 2 * F), dout = uniform(N * F);
    for (float& v : gu) v *= 3;  // past the activations' bends
    StablehloBuilder b;
    const auto pg = b.param(DType::f32, {N, 2 * F}), pd = b.param(DType::f32, {N, F});
    b.ret({hlo::glu_forward(b, act, pg), hlo::glu_backward(b, act, pd, pg)});
    PjrtBuffer bg = dev(gu, {N, 2 * F}), bd = dev(dout, {N, F});
    const auto got = run(b, {&bg, &bd});
    std::vector<float> out(N * F), dgu(N * 2 * F);
    cpu_.glu_forward(DType::f32, act, out.data(), gu.data(), N, F);
    cpu_.glu_backward(DType::f32, act, dgu.data(), dout.data(), gu.data(), N, F);
    const std::string name = act == Activation::silu ? "silu" : "gelu";
    expect_match(got[0], out, name + " out");
    expect_match(got[1], dgu, name + " dgate_up");
  }
}

TEST_F(LoweringTest, CrossEntropyWithAndWithoutSoftcap) {
  for (double cap : {0.0, 3.0}) {
    const int64_t N = 9, V = 31;
    std::vector<float> logits = uniform(N * V);
    for (float& v : logits) v *= 4;
    std::vector<int32_t> labels(N);
    for (int64_t i = 0; i < N; ++i) labels[i] = static_cast<int32_t>((rng_() % V));
    labels[3] = -100;  // no loss, no gradient
    StablehloBuilder b;
    const auto pl = b.param(DType::f32, {N, V}), pt = b.param(DType::i32, {N});
    const hlo::CrossEntropy ce = hlo::cross_entropy(b, pl, pt, -100, 0.25, cap);
    b.ret({ce.losses, ce.dlogits});
    PjrtBuffer bl = dev(logits, {N, V});
    PjrtBuffer bt = client_->to_device(labels.data(), DType::i32, {N});
    const auto got = run(b, {&bl, &bt});
    std::vector<float> grad = logits, losses(N);
    cpu_.cross_entropy(DType::f32, grad.data(), losses.data(), labels.data(), N, V, -100, 0.25,
                       cap);
    expect_match(got[0], losses, "losses");
    expect_match(got[1], grad, "dlogits");
    EXPECT_EQ(got[0][3], 0.0f);
  }
}

TEST_F(LoweringTest, LayerNormAndPlainActivations) {
  const int64_t N = 6, C = 23;
  const std::vector<float> x = uniform(N * C), w = uniform(C), bias = uniform(C),
                           dout = uniform(N * C);
  StablehloBuilder b;
  const auto px = b.param(DType::f32, {N, C}), pw = b.param(DType::f32, {C}),
             pb = b.param(DType::f32, {C}), pd = b.param(DType::f32, {N, C});
  const hlo::LayerNormOut f = hlo::layernorm_forward(b, px, pw, pb, 1e-5);
  const hlo::LayerNormGrads g = hlo::layernorm_backward(b, pd, px, pw, f.mean, f.rstd);
  const auto px3 = b.multiply(px, b.constant(3.0, DType::f32, {N, C}));
  b.ret({f.out, g.dx, g.dw, g.db, hlo::act_forward(b, Activation::gelu_tanh, px3),
         hlo::act_backward(b, Activation::gelu_tanh, pd, px3),
         hlo::act_backward(b, Activation::silu, pd, px3)});
  PjrtBuffer bx = dev(x, {N, C}), bw = dev(w, {C}), bb = dev(bias, {C}), bd = dev(dout, {N, C});
  const auto got = run(b, {&bx, &bw, &bb, &bd});
  std::vector<float> out(N * C), mean(N), rstd(N), dx(N * C, 0.f), dw(C, 0.f), db(C, 0.f);
  cpu_.layernorm_forward(DType::f32, out.data(), mean.data(), rstd.data(), x.data(), w.data(),
                         bias.data(), N, C, 1e-5);
  cpu_.layernorm_backward(DType::f32, dx.data(), dw.data(), db.data(), dout.data(), x.data(),
                          w.data(), mean.data(), rstd.data(), N, C);
  expect_match(got[0], out, "layernorm out");
  expect_match(got[1], dx, "layernorm dx");
  expect_match(got[2], dw, "layernorm dw");
  expect_match(got[3], db, "layernorm db");
  std::vector<float> x3(x), a(N * C), da(N * C), ds(N * C);
  for (float& v : x3) v *= 3;
  cpu_.act_forward(DType::f32, Activation::gelu_tanh, a.data(), x3.data(), N * C);
  cpu_.act_backward(DType::f32, Activation::gelu_tanh, da.data(), dout.data(), x3.data(), N * C);
  cpu_.act_backward(DType::f32, Activation::silu, ds.data(), dout.data(), x3.data(), N * C);
  expect_match(got[4], a, "gelu");
  expect_match(got[5], da, "gelu backward");
  expect_match(got[6], ds, "silu backward");
}

// RoPE forward and inverse, a partial rotary dim and an attention factor, positions up to 4000.
TEST_F(LoweringTest, RopeForwardAndInverse) {
  const int64_t N = 7, H = 3, D = 10, rot = 8;
  const std::vector<float> x = uniform(N * H * D);
  std::vector<float> inv(rot / 2);
  for (int64_t i = 0; i < rot / 2; ++i) inv[i] = static_cast<float>(std::pow(1e4, -2.0 * i / rot));
  std::vector<int32_t> pos(N);
  for (int64_t i = 0; i < N; ++i) pos[i] = static_cast<int32_t>(rng_() % 4000);
  for (bool inverse : {false, true}) {
    StablehloBuilder b;
    const auto px = b.param(DType::f32, {N, H, D}), pp = b.param(DType::i32, {N}),
               pf = b.param(DType::f32, {rot / 2});
    b.ret({hlo::rope(b, px, pp, pf, rot, 1.25, inverse)});
    PjrtBuffer bx = dev(x, {N, H, D}), bf = dev(inv, {rot / 2});
    PjrtBuffer bp = client_->to_device(pos.data(), DType::i32, {N});
    const auto got = run(b, {&bx, &bp, &bf});
    std::vector<float> want = x;
    cpu_.rope(DType::f32, want.data(), pos.data(), inv.data(), N, H * D, H, D, rot, 1.25, inverse);
    expect_match(got[0], want, inverse ? "rope inverse" : "rope");
  }
}

// Attention, dense: grouped-query heads, a window with a soft-cap, and document masking, forward
// (out and lse) and backward against the CPU backend's blockwise kernel.
TEST_F(LoweringTest, AttentionForwardAndBackward) {
  struct Case {
    int64_t B, T, Hq, Hkv, D, window;
    double softcap;
    bool docs;
  };
  for (const Case& c : {Case{2, 9, 4, 2, 8, 0, 0.0, false}, Case{1, 11, 2, 1, 6, 3, 2.0, false},
                        Case{2, 10, 2, 2, 4, 0, 0.0, true}}) {
    std::vector<int32_t> starts(c.B * c.T, 0);
    for (int64_t i = 0; i < c.B * c.T; ++i) starts[i] = (i % c.T) >= c.T / 3 ? int32_t(c.T / 3) : 0;
    check_attention(
        c.B, c.T, c.Hq, c.Hkv, c.D, c.softcap, c.window, c.docs ? &starts : nullptr,
        [](StablehloBuilder& b, const hlo::AttentionArgsHlo& a, const HloValue& q,
           const HloValue& k, const HloValue& v, const HloValue& d, const HloValue* doc) {
          const hlo::AttentionOut f = hlo::attention_forward(b, a, q, k, v, doc);
          const hlo::AttentionGrads g = hlo::attention_backward(b, a, d, q, k, v, doc);
          return std::vector<HloValue>{f.out, f.lse, g.dq, g.dk, g.dv};
        },
        "attention T " + std::to_string(c.T) + ": ");
  }
}

// Clipping and AdamW: three steps against the CPU backend's kernels (the clip scale from a
// device sum of squares, the per-step factors as scalar arguments), then a non-finite norm that
// must leave p, m and v as they were.
TEST_F(LoweringTest, ClipScaleAndAdamW) {
  const int64_t n = 301;
  const double b1 = 0.9, b2 = 0.95, eps = 1e-8, lr = 1e-2, wd = 0.1, max_norm = 5.0;
  StablehloBuilder b;
  const auto pp = b.param(DType::f32, {n}), pg = b.param(DType::f32, {n}),
             pm = b.param(DType::f32, {n}), pv = b.param(DType::f32, {n}),
             pss = b.param(DType::f32, {}), pdecay = b.param(DType::f32, {}),
             pstep = b.param(DType::f32, {}), pbc2 = b.param(DType::f32, {});
  const auto scale = hlo::clip_scale(b, pss, max_norm);
  const hlo::AdamWOut o =
      hlo::adamw_step(b, pp, pg, pm, pv, b1, b2, eps, pdecay, pstep, pbc2, scale);
  b.ret({o.p, o.m, o.v, scale});
  PjrtExecutable exe = client_->compile(b.text());
  std::vector<float> p = uniform(n), m(n, 0.f), v(n, 0.f), cp = p, cm = m, cv = v;
  for (int t = 1; t <= 4; ++t) {
    std::vector<float> g = uniform(n);
    for (float& x : g) x *= 2;
    double ss = 0;
    for (float x : g) ss += double{x} * x;
    if (t == 4) g[7] = NAN, ss = NAN;
    const std::array<float, 3> f = adamw_factors(lr, b1, b2, wd, t);
    const float decay = f[0], step_size = f[1], bc2 = f[2];
    const float ssf = static_cast<float>(ss);
    PjrtBuffer bp = dev(p, {n}), bg = dev(g, {n}), bm = dev(m, {n}), bv = dev(v, {n});
    PjrtBuffer bs = client_->to_device(&ssf, DType::f32, {}),
               bd = client_->to_device(&decay, DType::f32, {}),
               bt = client_->to_device(&step_size, DType::f32, {}),
               bc = client_->to_device(&bc2, DType::f32, {});
    auto out = exe.execute(std::vector<PjrtBuffer*>{&bp, &bg, &bm, &bv, &bs, &bd, &bt, &bc});
    p = out[0].to_host<float>(), m = out[1].to_host<float>(), v = out[2].to_host<float>();
    const float got_scale = out[3].to_host<float>()[0];
    double want_scale = 0;
    cpu_.clip_scale(&want_scale, &ss, max_norm);
    cpu_.adamw_step(cp.data(), g.data(), cm.data(), cv.data(), n, f.data(), b1, b2, eps, true,
                    &want_scale);
    if (t < 4) {
      EXPECT_NEAR(got_scale, want_scale, 1e-6 * want_scale) << seed_note();
      EXPECT_LT(want_scale, 1.0);  // the norm (about 20) is clipped to 5
    } else {
      EXPECT_TRUE(std::isnan(got_scale));
    }
    expect_match(p, cp, "p, step " + std::to_string(t));
    expect_match(m, cm, "m, step " + std::to_string(t));
    expect_match(v, cv, "v, step " + std::to_string(t));
  }
}

}  // namespace
}  // namespace lmt

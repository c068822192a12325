// AdamW: the CPU kernel against a double-precision transcription of torch.optim.AdamW, decay
// choices per parameter kind, global-norm clipping, non-finite gradients, state views.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "core/error.h"
#include "core/rng.h"
#include "optim/adamw.h"
#include "optim_test_util.h"
#include "train/run_config.h"

namespace lmt {
namespace {

// torch.optim.AdamW, single-tensor path, in double (grad_scale applied to the gradient first).
struct RefAdamW {
  std::vector<double> p, m, v;
  void step(const std::vector<float>& g, double lr, double b1, double b2, double eps, double wd,
            int64_t t, double grad_scale) {
    const double bc1 = 1 - std::pow(b1, t), bc2 = 1 - std::pow(b2, t);
    for (size_t i = 0; i < p.size(); ++i) {
      const double gi = g[i] * grad_scale;
      p[i] *= 1 - lr * wd;
      m[i] = b1 * m[i] + (1 - b1) * gi;
      v[i] = b2 * v[i] + (1 - b2) * gi * gi;
      p[i] -= (lr / bc1) * m[i] / (std::sqrt(v[i]) / std::sqrt(bc2) + eps);
    }
  }
};

std::vector<float> randn(int64_t n, uint64_t stream, double std = 1.0) {
  std::vector<float> x(static_cast<size_t>(n));
  fill_normal(x.data(), n, 0.0, std, 7, stream);
  return x;
}

using test::expect_close_rms;

constexpr double kOne = 1.0;  // an unclipped step's scale (a device scalar: host memory here)

// The kernel with the factors an AdamW forms from these numbers (adamw_factors).
void adamw(CpuBackend& be, float* p, const float* g, float* m, float* v, int64_t n, double lr,
           double b1, double b2, double eps, double wd, int64_t t, const double* gs) {
  const std::array<float, 3> f = adamw_factors(lr, b1, b2, wd, t);
  be.adamw_step(p, g, m, v, n, f.data(), b1, b2, eps, wd != 0, gs);
}

TEST(AdamWKernel, MatchesTorchReference) {
  CpuBackend be;
  for (int64_t n : {1, 7, 1001, 40001}) {  // 40001 takes the OpenMP path
    std::vector<float> p = randn(n, 1), m(n, 0.f), v(n, 0.f);
    RefAdamW ref{{p.begin(), p.end()}, std::vector<double>(n), std::vector<double>(n)};
    const double lr = 1e-2, b1 = 0.9, b2 = 0.95, eps = 1e-8, wd = 0.1;
    for (int64_t t = 1; t <= 6; ++t) {
      std::vector<float> g = randn(n, 100 + t, 0.5 * t);
      const double gs = t % 2 ? 1.0 : 0.37;
      adamw(be, p.data(), g.data(), m.data(), v.data(), n, lr, b1, b2, eps, wd, t, &gs);
      ref.step(g, lr, b1, b2, eps, wd, t, gs);
    }
    expect_close_rms(p, ref.p, 1e-6, "p");
    expect_close_rms(m, ref.m, 1e-6, "m");
    expect_close_rms(v, ref.v, 1e-6, "v");
  }
}

// The kernel runs vectorised (AVX2 or AVX-512 clones, chunks over threads); each lane computes the
// scalar formula's operations in its order, correctly rounded and uncontracted, so the result is
// the scalar f32 loop's bit for bit, tails and chunk edges included.
TEST(AdamWKernel, VectorisedStepHasTheScalarLoopsBits) {
  CpuBackend be;
  const int64_t n = 3 * 16384 + 77;
  std::vector<float> p = randn(n, 1), m = randn(n, 2, 0.01), v = randn(n, 3, 0.01);
  for (float& x : v) x = x * x;
  const std::vector<float> g = randn(n, 4, 0.5);
  std::vector<float> wp = p, wm = m, wv = v;
  const double lr = 3e-3, b1 = 0.9, b2 = 0.95, eps = 1e-8, wd = 0.1, gs = 0.37;
  const int64_t t = 5;
  adamw(be, p.data(), g.data(), m.data(), v.data(), n, lr, b1, b2, eps, wd, t, &gs);
  const float decay = static_cast<float>(1.0 - lr * wd), fb1 = static_cast<float>(b1),
              fb2 = static_cast<float>(b2), omb1 = static_cast<float>(1.0 - b1),
              omb2 = static_cast<float>(1.0 - b2),
              step = static_cast<float>(lr / (1.0 - std::pow(b1, 5.0))),
              ibc2 = static_cast<float>(1.0 / std::sqrt(1.0 - std::pow(b2, 5.0))),
              fgs = static_cast<float>(gs), feps = static_cast<float>(eps);
  int64_t differ = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float gi = g[i] * fgs;
    const float mi = fb1 * wm[i] + omb1 * gi;
    const float vi = fb2 * wv[i] + omb2 * gi * gi;
    const float pi = wp[i] * decay - step * mi / (std::sqrt(vi) * ibc2 + feps);
    differ += std::memcmp(&pi, &p[i], 4) != 0 || std::memcmp(&mi, &m[i], 4) != 0 ||
              std::memcmp(&vi, &v[i], 4) != 0;
  }
  EXPECT_EQ(differ, 0) << "of " << n << " elements";
}

// Clipping on the device: the scale as torch's clip_grad_norm_ forms it, 1 without clipping, NaN
// for a norm that is not finite, and a NaN scale leaves the step undone.
TEST(AdamWKernel, ClipScaleAndNonFiniteSkip) {
  CpuBackend be;
  double scale = 0;
  const double ss = 16.0;  // norm 4
  be.clip_scale(&scale, &ss, 1.0);
  EXPECT_DOUBLE_EQ(scale, 1.0 / (4.0 + 1e-6));
  be.clip_scale(&scale, &ss, 10.0);
  EXPECT_EQ(scale, 1.0);
  be.clip_scale(&scale, &ss, 0.0);
  EXPECT_EQ(scale, 1.0);
  for (double bad : {std::numeric_limits<double>::infinity(), std::nan("")}) {
    be.clip_scale(&scale, &bad, 1.0);
    EXPECT_TRUE(std::isnan(scale));
    std::vector<float> p{1.f, 2.f}, g{0.5f, 0.5f}, m{0.1f, 0.1f}, v{0.2f, 0.2f};
    adamw(be, p.data(), g.data(), m.data(), v.data(), 2, 0.1, 0.9, 0.95, 1e-8, 0.1, 3, &scale);
    EXPECT_EQ(p, (std::vector<float>{1.f, 2.f}));
    EXPECT_EQ(m, (std::vector<float>{0.1f, 0.1f}));
    EXPECT_EQ(v, (std::vector<float>{0.2f, 0.2f}));
  }
}

TEST(AdamWKernel, FirstStepIsSignedLrPlusDecay) {
  // Step 1: m_hat = g, v_hat = g^2, so p1 = p0 (1 - lr wd) - lr g / (|g| + eps).
  CpuBackend be;
  std::vector<float> p{1.f, -2.f, 0.5f}, g{3.f, -0.25f, 0.f}, m(3), v(3);
  const double one = 1.0;
  adamw(be, p.data(), g.data(), m.data(), v.data(), 3, 0.1, 0.9, 0.999, 1e-8, 0.5, 1, &one);
  EXPECT_NEAR(p[0], 1.0 * 0.95 - 0.1, 1e-6);
  EXPECT_NEAR(p[1], -2.0 * 0.95 + 0.1, 1e-6);
  EXPECT_NEAR(p[2], 0.5 * 0.95, 1e-7);
  EXPECT_NEAR(m[0], 0.3, 1e-7);
  EXPECT_NEAR(v[0], 0.009, 1e-8);
}

// The model-like layout of the tests below: kinds in flat-buffer order, sizes odd.
std::vector<ParamInfo> layout() {
  return {
      {"model.embed_tokens.weight", Shape{5, 3}, 0, ParamKind::embedding},
      {"model.layers.0.input_layernorm.weight", Shape{3}, 15, ParamKind::norm},
      {"model.layers.0.self_attn.q_proj.weight", Shape{3, 3}, 18, ParamKind::matrix},
      {"model.layers.0.self_attn.q_proj.bias", Shape{3}, 27, ParamKind::bias},
      {"model.layers.0.mlp.up_proj.weight", Shape{7, 3}, 30, ParamKind::matrix},
      {"model.layers.0.mlp.down_proj.weight", Shape{3, 7}, 51, ParamKind::matrix},
      // 3 elements of padding at [72, 75)
      {"model.norm.weight", Shape{3}, 75, ParamKind::norm},
  };
}
constexpr int64_t kTotal = 78;

TEST(AdamW, DecayRangesFollowParamKinds) {
  CpuBackend be;
  auto params = layout();
  std::swap(params[0], params[4]);  // any order in, offset order out
  AdamWConfig cfg;
  cfg.weight_decay = 0.1;
  AdamW plain(&be, params, kTotal, cfg);
  EXPECT_EQ(plain.decay_ranges(),
            (std::vector<ParamRange>{
                {0, 18, false}, {18, 27, true}, {27, 30, false}, {30, 72, true}, {75, 78, false}}));
  cfg.decay_norms_and_biases = true;
  EXPECT_EQ(AdamW(&be, params, kTotal, cfg).decay_ranges(),
            (std::vector<ParamRange>{{0, 15, false}, {15, 72, true}, {75, 78, true}}));
  cfg.decay_embeddings = true;
  EXPECT_EQ(AdamW(&be, params, kTotal, cfg).decay_ranges(),
            (std::vector<ParamRange>{{0, 72, true}, {75, 78, true}}));
  cfg.decay_norms_and_biases = false;
  EXPECT_EQ(AdamW(&be, params, kTotal, cfg).decay_ranges(),
            (std::vector<ParamRange>{{0, 15, true},
                                     {15, 18, false},
                                     {18, 27, true},
                                     {27, 30, false},
                                     {30, 72, true},
                                     {75, 78, false}}));
  // From the optimizer section and train.weight_decay beside it.
  OptimizerSpec oc;
  oc.beta2 = 0.99;
  oc.decay_embeddings = true;
  AdamW from_cfg(&be, params, kTotal, oc, 0.25);
  EXPECT_EQ(from_cfg.config().beta2, 0.99);
  EXPECT_EQ(from_cfg.config().weight_decay, 0.25);
  EXPECT_EQ(from_cfg.decay_ranges().front(), (ParamRange{0, 15, true}));
}

// A filled flat buffer for layout(): parameters random, padding a sentinel the optimizer must keep.
std::vector<float> flat(uint64_t stream, double std, float padding) {
  std::vector<float> x = randn(kTotal, stream, std);
  for (int64_t i = 72; i < 75; ++i) x[i] = padding;
  return x;
}

double sum_sq(const std::vector<float>& g, int64_t begin, int64_t end) {
  double s = 0;
  for (int64_t i = begin; i < end; ++i) s += static_cast<double>(g[i]) * g[i];
  return s;
}

TEST(AdamW, StepMatchesKernelPerRangeWithDecayOnlyWhereChosen) {
  CpuBackend be;
  AdamWConfig cfg;
  cfg.weight_decay = 0.5;
  AdamW opt(&be, layout(), kTotal, cfg);
  std::vector<float> p = flat(1, 1.0, 7.f), g = flat(2, 1e-3, 99.f);
  std::vector<float> want = p, m(kTotal), v(kTotal);
  const double norm = opt.clip_and_step(p.data(), g.data(), 0.1, 0.0);
  EXPECT_NEAR(norm, std::sqrt(sum_sq(g, 0, 72) + sum_sq(g, 75, 78)), 1e-12);  // padding excluded
  EXPECT_EQ(opt.step_count(), 1);
  for (const ParamRange& r : opt.decay_ranges())
    adamw(be, want.data() + r.begin, g.data() + r.begin, m.data() + r.begin, v.data() + r.begin,
          r.end - r.begin, 0.1, cfg.beta1, cfg.beta2, cfg.eps, r.decay ? 0.5 : 0.0, 1, &kOne);
  EXPECT_EQ(p, want);
  for (int64_t i = 72; i < 75; ++i) EXPECT_EQ(p[i], 7.f);
  // With zero gradients only decay moves parameters: matrices shrink by 1 - lr wd, the rest stay.
  std::vector<float> before = p, zero(kTotal, 0.f);
  AdamW fresh(&be, layout(), kTotal, cfg);
  fresh.clip_and_step(p.data(), zero.data(), 0.1, 1.0);
  for (const ParamInfo& info : layout())
    for (int64_t i = info.offset; i < info.offset + info.numel(); ++i)
      EXPECT_FLOAT_EQ(p[i], info.kind == ParamKind::matrix ? before[i] * 0.95f : before[i])
          << info.name;
}

TEST(AdamW, ClippedStepEqualsUnclippedStepOnScaledGradients) {
  CpuBackend be;
  AdamWConfig cfg;
  cfg.weight_decay = 0.1;
  std::vector<float> p0 = flat(3, 1.0, 0.f), g = flat(4, 1.0, 0.f);
  const double norm = std::sqrt(sum_sq(g, 0, kTotal));
  const double clip = norm / 4;
  AdamW clipped(&be, layout(), kTotal, cfg), unclipped(&be, layout(), kTotal, cfg),
      loose(&be, layout(), kTotal, cfg), off(&be, layout(), kTotal, cfg);
  std::vector<float> pc = p0, pu = p0, pl = p0, po = p0, gs = g;
  for (float& x : gs) x = static_cast<float>(x * (clip / (norm + 1e-6)));
  for (int step = 0; step < 3; ++step) {
    EXPECT_NEAR(clipped.clip_and_step(pc.data(), g.data(), 0.01, clip), norm, 1e-9 * norm);
    unclipped.clip_and_step(pu.data(), gs.data(), 0.01, 0.0);
    loose.clip_and_step(pl.data(), g.data(), 0.01, 2 * norm);  // above the norm: no scaling
    off.clip_and_step(po.data(), g.data(), 0.01, 0.0);
  }
  for (int64_t i = 0; i < kTotal; ++i) {
    EXPECT_NEAR(pc[i], pu[i], 1e-6 * (std::abs(pu[i]) + 1)) << i;
    EXPECT_NEAR(clipped.m_data()[i], unclipped.m_data()[i], 1e-6 * std::abs(gs[i]) + 1e-9) << i;
    EXPECT_EQ(pl[i], po[i]) << i;
  }
  EXPECT_NEAR(grad_norm(&be, g.data(), {{0, 10, false}, {10, kTotal, true}}), norm, 1e-12 * norm);
}

TEST(AdamW, NonFiniteGradientChangesNothing) {
  CpuBackend be;
  AdamWConfig cfg;
  cfg.weight_decay = 0.1;
  AdamW opt(&be, layout(), kTotal, cfg);
  std::vector<float> p = flat(5, 1.0, 0.f), g = flat(6, 1.0, 0.f);
  opt.clip_and_step(p.data(), g.data(), 0.01, 1.0);
  const std::vector<float> p1 = p, m1(opt.m_data(), opt.m_data() + kTotal),
                           v1(opt.v_data(), opt.v_data() + kTotal);
  for (float bad :
       {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    std::vector<float> gb = g;
    gb[40] = bad;
    const double norm = opt.clip_and_step(p.data(), gb.data(), 0.01, 1.0);
    EXPECT_FALSE(std::isfinite(norm));
    EXPECT_EQ(opt.step_count(), 1);
    EXPECT_EQ(p, p1);
    EXPECT_EQ(std::vector<float>(opt.m_data(), opt.m_data() + kTotal), m1);
    EXPECT_EQ(std::vector<float>(opt.v_data(), opt.v_data() + kTotal), v1);
  }
}

TEST(AdamW, RestoredStepCountDrivesBiasCorrection) {
  CpuBackend be;
  AdamWConfig cfg;
  std::vector<float> p = flat(7, 1.0, 0.f), g = flat(8, 1.0, 0.f), want = p;
  std::vector<float> m = flat(9, 0.1, 0.f), v(kTotal);
  for (int64_t i = 0; i < kTotal; ++i) v[i] = 0.01f * (1 + i % 5);
  AdamW opt(&be, layout(), kTotal, cfg);
  be.copy(opt.m_data(), m.data(), kTotal * sizeof(float));  // as load_checkpoint does
  be.copy(opt.v_data(), v.data(), kTotal * sizeof(float));
  opt.set_step_count(10);
  opt.clip_and_step(p.data(), g.data(), 0.01, 0.0);
  EXPECT_EQ(opt.step_count(), 11);
  for (const ParamRange& r : opt.decay_ranges())
    adamw(be, want.data() + r.begin, g.data() + r.begin, m.data() + r.begin, v.data() + r.begin,
          r.end - r.begin, 0.01, cfg.beta1, cfg.beta2, cfg.eps, 0.0, 11, &kOne);
  EXPECT_EQ(p, want);
}

TEST(AdamW, StateViewsNameEveryParameter) {
  CpuBackend be;
  AdamW opt(&be, layout(), kTotal, AdamWConfig{});
  auto views = opt.state_views();
  ASSERT_EQ(views.size(), 14u);
  EXPECT_EQ(views[2].name, "exp_avg.model.layers.0.self_attn.q_proj.weight");
  EXPECT_EQ(views[2].tensor.data, opt.m_data() + 18);
  EXPECT_EQ(views[2].tensor.shape, (Shape{3, 3}));
  EXPECT_EQ(views[7].name, "exp_avg_sq.model.embed_tokens.weight");
  EXPECT_EQ(views[7].tensor.data, opt.v_data());
  EXPECT_EQ(views[13].tensor.dtype, DType::f32);
}

}  // namespace
}  // namespace lmt

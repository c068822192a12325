// Lion, SGD with momentum and Muon on the CPU backend against naive double-precision
// transcriptions (Lion: Chen et al.; SGD: torch.optim.SGD; Muon: Keller Jordan's reference with
// the RMS-matching scale), over several steps of random tensors with clipping scales; the
// Newton-Schulz result's singular values; decay only where AdamW decays; the non-finite skip; the
// state buffers' names and layouts.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "core/error.h"
#include "core/rng.h"
#include "model/model_config.h"
#include "model/transformer.h"
#include "optim/adamw.h"
#include "optim/muon.h"
#include "optim/optimizer.h"
#include "optim_test_util.h"

namespace lmt {
namespace {

std::vector<float> normal_floats(int64_t n, uint64_t stream, double std = 1.0) {
  std::vector<float> x(static_cast<size_t>(n));
  fill_normal(x.data(), n, 0.0, std, 17, stream);
  return x;
}

using test::expect_close_rms;

TEST(LionKernel, MatchesTheDoubleReference) {
  CpuBackend be;
  for (int64_t n : {1, 9, 40001}) {  // 40001 takes the OpenMP path
    std::vector<float> p = normal_floats(n, 1), m(static_cast<size_t>(n), 0.f);
    std::vector<double> rp(p.begin(), p.end()), rm(static_cast<size_t>(n), 0.0);
    const double lr = 3e-3, b1 = 0.9, b2 = 0.99, wd = 0.5;
    for (int t = 1; t <= 5; ++t) {
      const std::vector<float> g = normal_floats(n, 10 + t, 0.1 * t);
      const double gs = t % 2 ? 1.0 : 0.4;
      be.lion_step(p.data(), g.data(), m.data(), n, decay_factors(lr, wd).data(), b1, b2, true,
                   &gs);
      for (int64_t i = 0; i < n; ++i) {
        const double gi = g[i] * gs, c = b1 * rm[i] + (1 - b1) * gi;
        rp[i] = rp[i] * (1 - lr * wd) - lr * ((c > 0) - (c < 0));
        rm[i] = b2 * rm[i] + (1 - b2) * gi;
      }
    }
    expect_close_rms(p, rp, 1e-6, "p");
    expect_close_rms(m, rm, 1e-6, "m");
  }
}

TEST(SgdKernel, MatchesTorchSgdInDouble) {
  CpuBackend be;
  for (const bool nesterov : {false, true}) {
    const int64_t n = 1001;
    std::vector<float> p = normal_floats(n, 2), buf(static_cast<size_t>(n), 0.f);
    std::vector<double> rp(p.begin(), p.end()), rb(static_cast<size_t>(n), 0.0);
    const double lr = 0.05, mu = 0.9, wd = 0.01;
    for (int t = 1; t <= 5; ++t) {
      const std::vector<float> g = normal_floats(n, 20 + t);
      const double gs = t == 3 ? 0.25 : 1.0;
      const float rate = static_cast<float>(lr);
      be.sgd_step(p.data(), g.data(), buf.data(), n, &rate, mu, nesterov, wd, &gs);
      for (int64_t i = 0; i < n; ++i) {  // torch: d = g + wd p; buf = d (t = 1) or mu buf + d
        const double d = g[i] * gs + wd * rp[i];
        rb[i] = t == 1 ? d : mu * rb[i] + d;
        rp[i] -= lr * (nesterov ? d + mu * rb[i] : rb[i]);
      }
    }
    expect_close_rms(p, rp, 1e-6, nesterov ? "p (Nesterov)" : "p");
    expect_close_rms(buf, rb, 1e-6, "momentum buffer");
  }
}

TEST(OptimizerKernels, NonFiniteScaleWritesNothing) {
  CpuBackend be;
  const double nan = std::nan("");
  std::vector<float> p{1.f, -2.f}, g{0.5f, 0.25f}, s{0.1f, 0.2f}, u(2);
  const std::array<float, 2> f = decay_factors(0.1, 0.1);
  be.lion_step(p.data(), g.data(), s.data(), 2, f.data(), 0.9, 0.99, true, &nan);
  be.sgd_step(p.data(), g.data(), s.data(), 2, &f[1], 0.9, true, 0.1, &nan);
  be.muon_momentum(u.data(), s.data(), g.data(), 2, 0.95, true, &nan);
  be.muon_apply(p.data(), 2, g.data(), 1, 2, f.data(), true, &nan);
  EXPECT_EQ(p, (std::vector<float>{1.f, -2.f}));
  EXPECT_EQ(s, (std::vector<float>{0.1f, 0.2f}));
}

// ---- Muon ----

using Mat = std::vector<double>;  // row-major

Mat matmul(const Mat& a, const Mat& b, int64_t n, int64_t k, int64_t m) {  // [n,k] x [k,m]
  Mat c(static_cast<size_t>(n * m), 0.0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t l = 0; l < k; ++l)
      for (int64_t j = 0; j < m; ++j) c[i * m + j] += a[i * k + l] * b[l * m + j];
  return c;
}
Mat transpose(const Mat& a, int64_t r, int64_t c) {
  Mat t(a.size());
  for (int64_t i = 0; i < r; ++i)
    for (int64_t j = 0; j < c; ++j) t[j * r + i] = a[i * c + j];
  return t;
}

// Keller Jordan's zeropower_via_newtonschulz5, in double.
Mat newton_schulz_ref(Mat x, int64_t r, int64_t c, int steps) {
  const bool tall = r > c;
  if (tall) x = transpose(x, r, c), std::swap(r, c);
  double ss = 0;
  for (double v : x) ss += v * v;
  for (double& v : x) v /= std::sqrt(ss) + 1e-7;
  for (int s = 0; s < steps; ++s) {
    const Mat a = matmul(x, transpose(x, r, c), r, c, r);
    Mat b = matmul(a, a, r, r, r);
    for (size_t i = 0; i < b.size(); ++i) b[i] = Muon::kB * a[i] + Muon::kC * b[i];
    const Mat bx = matmul(b, x, r, r, c);
    for (size_t i = 0; i < x.size(); ++i) x[i] = Muon::kA * x[i] + bx[i];
  }
  return tall ? transpose(x, r, c) : x;
}

// Eigenvalues of a symmetric matrix (cyclic Jacobi), for singular values as sqrt(eig(X X^T)).
std::vector<double> sym_eigenvalues(Mat a, int64_t n) {
  for (int sweep = 0; sweep < 100; ++sweep) {
    double off = 0;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = i + 1; j < n; ++j) off += a[i * n + j] * a[i * n + j];
    if (off < 1e-24) break;
    for (int64_t p = 0; p < n; ++p)
      for (int64_t q = p + 1; q < n; ++q) {
        if (std::abs(a[p * n + q]) < 1e-300) continue;
        const double theta = (a[q * n + q] - a[p * n + p]) / (2 * a[p * n + q]);
        const double t = (theta >= 0 ? 1 : -1) / (std::abs(theta) + std::sqrt(theta * theta + 1));
        const double c = 1 / std::sqrt(t * t + 1), s = t * c;
        for (int64_t k = 0; k < n; ++k) {  // columns p, q
          const double akp = a[k * n + p], akq = a[k * n + q];
          a[k * n + p] = c * akp - s * akq;
          a[k * n + q] = s * akp + c * akq;
        }
        for (int64_t k = 0; k < n; ++k) {  // rows p, q
          const double apk = a[p * n + k], aqk = a[q * n + k];
          a[p * n + k] = c * apk - s * aqk;
          a[q * n + k] = s * apk + c * aqk;
        }
      }
  }
  std::vector<double> e;
  for (int64_t i = 0; i < n; ++i) e.push_back(a[i * n + i]);
  return e;
}

TEST(Muon, NewtonSchulzMatchesTheReferenceAndOrthogonalises) {
  CpuBackend be;
  for (auto [r, c] : {std::pair<int64_t, int64_t>{12, 20}, {20, 12}, {16, 16}}) {
    SCOPED_TRACE(std::to_string(r) + "x" + std::to_string(c));
    std::vector<float> u = normal_floats(r * c, 30 + r), x(static_cast<size_t>(r * c));
    const Mat want = newton_schulz_ref(Mat(u.begin(), u.end()), r, c, 5);
    const int64_t k = std::min(r, c);
    std::vector<float> a(static_cast<size_t>(k * k)), b(a.size());
    double norm = 0;
    Muon::newton_schulz(&be, u.data(), x.data(), a.data(), b.data(), &norm, r, c, 5);
    expect_close_rms(x, want, 1e-4, "X");
    // Singular values: sqrt of the eigenvalues of X X^T (or X^T X), all near 1.
    const Mat xd(x.begin(), x.end());
    const Mat g = r <= c ? matmul(xd, transpose(xd, r, c), r, c, r)
                         : matmul(transpose(xd, r, c), xd, c, r, c);
    const std::vector<double> e = sym_eigenvalues(g, k);
    for (double ev : e) {
      EXPECT_GT(std::sqrt(ev), 0.6);
      EXPECT_LT(std::sqrt(ev), 1.25);
    }
  }
}

// The Muon test's parameters: an embedding, a norm, a plain hidden matrix, gpt2's fused c_attn
// (3 column blocks), a bias and an untied head, with padding between some of them.
std::vector<ParamInfo> muon_layout(int64_t* total) {
  std::vector<ParamInfo> p = {
      {"model.embed_tokens.weight", Shape{6, 4}, 0, ParamKind::embedding},
      {"model.layers.0.input_layernorm.weight", Shape{4}, 24, ParamKind::norm},
      {"model.layers.0.mlp.down_proj.weight", Shape{4, 10}, 32, ParamKind::matrix},
      {"transformer.h.0.attn.c_attn.weight", Shape{4, 12}, 72, ParamKind::matrix},
      {"transformer.h.0.attn.c_attn.bias", Shape{12}, 120, ParamKind::bias},
      {"lm_head.weight", Shape{6, 4}, 136, ParamKind::matrix},
  };
  p[3].column_blocks = {4, 4, 4};
  *total = 160;
  return p;
}

TEST(Muon, StepsMatchTheDoubleReferenceWithAdamWForTheRest) {
  CpuBackend be;
  int64_t total = 0;
  const std::vector<ParamInfo> params = muon_layout(&total);
  OptimizerSpec spec;
  spec.name = "muon";
  spec.momentum = 0.95;
  spec.nesterov = true;
  const double weight_decay = 0.1;
  auto opt = make_optimizer(&be, params, total, spec, weight_decay);
  EXPECT_STREQ(opt->name(), "muon");
  std::vector<float> p = normal_floats(total, 40, 0.5);
  const std::vector<float> p0 = p;
  std::vector<double> rp(p.begin(), p.end()), mom(static_cast<size_t>(total), 0.0);
  // The AdamW part through the AdamW class itself (tested against torch's transcription).
  std::vector<ParamInfo> rest;
  for (const ParamInfo& q : params)
    if (q.kind != ParamKind::matrix || q.name == "lm_head.weight") rest.push_back(q);
  AdamW adamw(&be, rest, total,
              AdamWConfig{spec.beta1, spec.beta2, spec.eps, weight_decay, false, false});
  std::vector<float> pa = p;
  const double lr = 0.02;
  for (int t = 1; t <= 3; ++t) {
    const std::vector<float> g = normal_floats(total, 50 + t);
    opt->clip_and_step(p.data(), g.data(), lr, 0.0);
    adamw.clip_and_step(pa.data(), g.data(), lr, 0.0);
    for (const ParamInfo& q : params) {
      if (q.kind != ParamKind::matrix || q.name == "lm_head.weight") continue;
      const int64_t rows = q.shape[0], cols = q.shape[1];
      const std::vector<int64_t> widths =
          q.column_blocks.empty() ? std::vector<int64_t>{cols} : q.column_blocks;
      for (int64_t i = 0; i < q.numel(); ++i) {
        const int64_t at = q.offset + i;
        mom[at] = 0.95 * mom[at] + 0.05 * g[at];
      }
      int64_t col = 0;
      for (int64_t w : widths) {  // each projection of a fused matrix on its own
        Mat u(static_cast<size_t>(rows * w));
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t c = 0; c < w; ++c) {
            const int64_t at = q.offset + r * cols + col + c;
            u[r * w + c] = 0.05 * g[at] + 0.95 * mom[at];
          }
        const Mat x = newton_schulz_ref(u, rows, w, 5);
        const double scale = 0.2 * std::sqrt(static_cast<double>(std::max(rows, w)));
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t c = 0; c < w; ++c) {
            const int64_t at = q.offset + r * cols + col + c;
            rp[at] = rp[at] * (1 - lr * 0.1) - lr * scale * x[r * w + c];
          }
        col += w;
      }
    }
  }
  // Hidden matrices: Muon; everything else (and padding): as AdamW alone leaves it.
  std::vector<float> got_m, got_rest, want_rest;
  std::vector<double> want_m;
  for (int64_t i = 0; i < total; ++i) {
    const bool hidden = (i >= 32 && i < 72) || (i >= 72 && i < 120);
    if (hidden) {
      got_m.push_back(p[i]);
      want_m.push_back(rp[i]);
    } else {
      got_rest.push_back(p[i]);
      want_rest.push_back(pa[i]);
    }
  }
  expect_close_rms(got_m, want_m, 1e-5, "hidden matrices");
  EXPECT_EQ(got_rest, want_rest) << "embedding, norm, bias and head: AdamW's";
  EXPECT_NE(p, p0);
  // Its state: momentum for the 2 hidden matrices, AdamW moments for the 4 others, compact.
  const std::vector<StateBuffer> st = opt->state();
  ASSERT_EQ(st.size(), 3u);
  EXPECT_EQ(st[0].prefix, "momentum_buffer.");
  EXPECT_EQ(st[0].params.size(), 2u);
  EXPECT_EQ(st[0].size, 40 + 48);
  EXPECT_EQ(st[1].prefix, "exp_avg.");
  EXPECT_EQ(st[1].params.size(), 4u);
  EXPECT_EQ(st[1].size, 24 + 4 + 12 + 24);
  EXPECT_NE(opt->assignment().find("muon for 2 hidden matrices (4 blocks"), std::string::npos)
      << opt->assignment();
}

// With zero gradients only weight decay moves parameters, and only where AdamW decays: matrices
// (Muon's hidden ones included), not embeddings, norms or biases.
TEST(Optimizers, DecayOnlyWhereAdamWDecays) {
  CpuBackend be;
  int64_t total = 0;
  const std::vector<ParamInfo> params = muon_layout(&total);
  for (const char* name : {"lion", "sgd", "muon"}) {
    SCOPED_TRACE(name);
    OptimizerSpec spec;
    spec.name = name;
    auto opt = make_optimizer(&be, params, total, spec, 0.5);
    std::vector<float> p = normal_floats(total, 60);
    const std::vector<float> before = p, zero(static_cast<size_t>(total), 0.f);
    opt->clip_and_step(p.data(), zero.data(), 0.1, 1.0);
    for (const ParamInfo& q : params)
      for (int64_t i = q.offset; i < q.offset + q.numel(); ++i) {
        if (q.kind == ParamKind::matrix)
          EXPECT_NEAR(p[i], before[i] * (std::string(name) == "sgd" ? 1 - 0.1 * 0.5 : 0.95), 1e-6)
              << q.name;
        else
          EXPECT_EQ(p[i], before[i]) << q.name;
      }
  }
}

TEST(Optimizers, NonFiniteGradientChangesNothingAndStateIsNamed) {
  CpuBackend be;
  int64_t total = 0;
  const std::vector<ParamInfo> params = muon_layout(&total);
  for (const char* name : {"lion", "sgd", "muon"}) {
    SCOPED_TRACE(name);
    OptimizerSpec spec;
    spec.name = name;
    auto opt = make_optimizer(&be, params, total, spec, 0.0);
    std::vector<float> p = normal_floats(total, 70), g = normal_floats(total, 71);
    opt->clip_and_step(p.data(), g.data(), 0.01, 1.0);
    const std::vector<float> p1 = p;
    std::vector<std::vector<float>> s1;
    for (const StateBuffer& s : opt->state()) s1.emplace_back(s.data, s.data + s.size);
    g[80] = std::numeric_limits<float>::quiet_NaN();
    EXPECT_FALSE(std::isfinite(opt->clip_and_step(p.data(), g.data(), 0.01, 1.0)));
    EXPECT_EQ(opt->step_count(), 1);
    EXPECT_EQ(p, p1);
    const std::vector<StateBuffer> st = opt->state();
    for (size_t i = 0; i < st.size(); ++i)
      EXPECT_EQ(std::vector<float>(st[i].data, st[i].data + st[i].size), s1[i]) << st[i].prefix;
    EXPECT_EQ(st.front().prefix, std::string(name) == "lion"  ? "exp_avg."
                                 : std::string(name) == "sgd" ? "momentum_buffer."
                                                              : "momentum_buffer.");
  }
}

// optimizer_bytes (lmtrain info, train's memory check) is what each optimizer allocates: on the
// test layout and on gpt2's, whose fused c_attn Muon orthogonalises in three blocks.
TEST(Optimizers, OptimizerBytesIsWhatTheOptimizerHolds) {
  CpuBackend be;
  ModelConfig gpt2 = family_defaults("gpt2");
  gpt2.vocab_size = 50;
  gpt2.hidden_size = 24;
  gpt2.intermediate_size = 40;
  gpt2.num_hidden_layers = 2;
  gpt2.num_attention_heads = 3;
  gpt2.max_position_embeddings = 16;
  int64_t test_total = 0, gpt2_total = 0;
  const std::vector<ParamInfo> test_params = muon_layout(&test_total);
  const std::vector<ParamInfo> gpt2_params = param_layout(gpt2, &gpt2_total);
  for (const char* name : {"adamw", "lion", "sgd", "muon"}) {
    OptimizerSpec spec;
    spec.name = name;
    for (const auto& [params, total] :
         {std::pair{test_params, test_total}, std::pair{gpt2_params, gpt2_total}}) {
      SCOPED_TRACE(std::string(name) + " over " + params.front().name);
      const uint64_t held = make_optimizer(&be, params, total, spec, 0.0)->bytes();
      EXPECT_EQ(optimizer_bytes(spec, params, total), held);
      const uint64_t f32 = static_cast<uint64_t>(total) * 4;
      const std::string n = name;
      if (n == "adamw") EXPECT_EQ(held, 2 * f32);
      if (n == "lion" || n == "sgd") EXPECT_EQ(held, f32);
      // Muon: a momentum and its step's output, or AdamW's two moments, per element, and
      // Newton-Schulz's scratch (large beside the 200 elements of the test layout).
      if (n == "muon") EXPECT_GE(held, 2 * f32);
      if (n == "muon" && total == gpt2_total) EXPECT_LT(held, 2 * f32 + f32 / 2);
    }
  }
}

TEST(Optimizers, UnknownNameAndMuonWithoutMatricesAreUserErrors) {
  CpuBackend be;
  const std::vector<ParamInfo> norms = {{"model.norm.weight", Shape{4}, 0, ParamKind::norm}};
  OptimizerSpec spec;
  spec.name = "adafactor";
  EXPECT_THROW(make_optimizer(&be, norms, 4, spec, 0.0), UserError);
  spec.name = "muon";
  EXPECT_THROW(make_optimizer(&be, norms, 4, spec, 0.0), UserError);
}

}  // namespace
}  // namespace lmt

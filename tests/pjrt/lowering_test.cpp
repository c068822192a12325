// The StableHLO forms of the kernels (backend/pjrt/lowering.h), run on XLA's CPU plugin, against
// the CPU backend's kernels on the same fresh random inputs, in float32: outputs and gradients
// within 2e-5 of the largest element (float32 rounding of different but equivalent orders).
#include "backend/pjrt/lowering.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "pjrt_test_util.h"

namespace lmt {
namespace {

using Dims = std::vector<int64_t>;

class LoweringTest : public test::PjrtTest {
 protected:
  PjrtBuffer dev(const std::vector<float>& v, Dims dims) {
    return client_->to_device(v.data(), DType::f32, std::move(dims));
  }
  // Runs b's program on args; returns every output as floats.
  std::vector<std::vector<float>> run(const StablehloBuilder& b, std::vector<PjrtBuffer*> args) {
    std::vector<std::vector<float>> out;
    for (PjrtBuffer& o : client_->compile(b.text()).execute(args))
      out.push_back(o.to_host<float>());
    return out;
  }
  void expect_match(const std::vector<float>& got, const std::vector<float>& want,
                    const std::string& what) {
    double scale = 1;
    for (float w : want) scale = std::max(scale, std::fabs(double{w}));
    test::expect_near_all(got, std::vector<double>(want.begin(), want.end()),
                          std::vector<double>(want.size(), scale), 2e-5, what + ", " + seed_note());
  }
  CpuBackend cpu_;
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

}  // namespace
}  // namespace lmt

// The forms the pjrt backend gives a step for a GPU compute what its XLA:CPU forms compute: on the
// test plugin playing the "cuda" platform (XLA:CPU running the programs lmtrain sends a CUDA
// plugin; f32, so attention is XLA's, not cuDNN's) the attention gradients are written as the
// sum of q's, k's and v's gradients each padded to its place (not concatenated), a fused
// product's gradient is assembled behind an optimization barrier, and the fused groups (q|k|v,
// gate|up) are one tensor each, converted, reduced and updated whole. Gradients and one AdamW
// step against the CPU backend, on fresh random weights and tokens.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/pjrt/backend.h"
#include "../model/model_test_util.h"
#include "model/transformer.h"
#include "optim/optimizer.h"
#include "pjrt_test_util.h"

namespace lmt {
namespace {

struct Stepped {
  double loss = 0;
  std::vector<float> grads, weights;  // the gradients, then the weights after one AdamW step
};

Stepped step(Backend* be, const ModelConfig& cfg, const std::vector<float>& w,
             const std::vector<int32_t>& ids, const std::vector<int32_t>& labels, int64_t B,
             int64_t T) {
  Transformer m(be, cfg, DType::f32);
  EXPECT_EQ(static_cast<size_t>(m.flat_size()), w.size());
  be->from_host(m.params_data(), w.data(), w.size() * sizeof(float));
  // AdamW's first step is lr * g / (|g| + eps): with eps near the gradients' size it follows
  // them smoothly, so f32 sums in another order move the weights by as little as they move g.
  OptimizerSpec adamw;
  adamw.eps = 1e-2;
  auto opt = make_optimizer(be, m.trainable_params(), m.trainable_flat_size(), adamw, 0.1);
  m.zero_grads();
  LossSums sums = m.make_loss_sums();
  sums.zero();
  Stepped s;
  const int64_t tokens =
      m.forward_backward(ids.data(), labels.data(), B, T, 1.0 / double(B * T), sums);
  s.loss = sums.read(tokens).sum;
  s.grads.resize(w.size()), s.weights.resize(w.size());
  be->to_host(s.grads.data(), m.grads_data(), w.size() * sizeof(float));
  opt->clip_and_step(static_cast<float*>(m.params_data()), static_cast<float*>(m.grads_data()),
                     1e-2, 1.0);
  be->to_host(s.weights.data(), m.params_data(), w.size() * sizeof(float));
  return s;
}

// The largest difference of two arrays relative to the largest magnitude of the first.
double relative_difference(const std::vector<float>& want, const std::vector<float>& got) {
  double diff = 0, scale = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    diff = std::max(diff, std::fabs(double(want[i]) - double(got[i])));
    scale = std::max(scale, std::fabs(double(want[i])));
  }
  return diff / scale;
}

class GpuForms : public testing::TestWithParam<test::Variant> {};

TEST_P(GpuForms, TheCudaPlatformsStepComputesTheCpuBackendsStep) {
  const ModelConfig& cfg = GetParam().cfg;
  const int64_t B = 2, T = 7;
  const uint32_t seed = testing::UnitTest::GetInstance()->random_seed() + 11;
  const std::vector<int32_t> ids = test::random_ids(B * T, cfg.vocab_size, seed);
  const std::vector<int32_t> labels = test::random_ids(B * T, cfg.vocab_size, seed + 1);
  auto cpu = make_backend("cpu");
  std::vector<float> w;
  {
    Transformer m(cpu.get(), cfg, DType::f32);
    w = test::random_floats(m.flat_size(), seed + 2, 0.2);
    for (const ParamInfo& p : m.params())
      if (p.kind == ParamKind::norm)
        for (int64_t i = 0; i < p.numel(); ++i) w[p.offset + i] += float(m.norm_init());
  }
  const Stepped want = step(cpu.get(), cfg, w, ids, labels, B, T);

  test::ScopedEnv platform("LMT_TEST_PLUGIN_PLATFORM", "cuda");
  auto gpu = make_pjrt_backend(LMT_TEST_PJRT_PLUGIN, PjrtOptions{});
  ASSERT_EQ(gpu->device().platform, "cuda");
  ASSERT_TRUE(gpu->fused_groups_whole());
  const Stepped got = step(gpu.get(), cfg, w, ids, labels, B, T);
  EXPECT_NEAR(got.loss, want.loss, 1e-5 * want.loss);
  // f32 sums in another order: a few units of f32's last place of the largest gradient.
  EXPECT_LT(relative_difference(want.grads, got.grads), 1e-5);
  std::vector<float> want_step(w.size()), got_step(w.size());
  for (size_t i = 0; i < w.size(); ++i)
    want_step[i] = want.weights[i] - w[i], got_step[i] = got.weights[i] - w[i];
  EXPECT_LT(relative_difference(want_step, got_step), 1e-4);
}

// gpt2's fused c_attn (the padded sum meets the bias gradient), llama's q|k|v and gate|up
// groups after RoPE, qwen2's fused q|k|v biases, qwen3's q/k norms.
std::vector<test::Variant> forms() {
  std::vector<test::Variant> v;
  for (const test::Variant& x : test::variants())
    if (x.name == "gpt2" || x.name == "llama" || x.name == "qwen2" || x.name == "qwen3")
      v.push_back(x);
  return v;
}

INSTANTIATE_TEST_SUITE_P(Variants, GpuForms, testing::ValuesIn(forms()),
                         [](const testing::TestParamInfo<test::Variant>& i) { return i.param.name; });

}  // namespace
}  // namespace lmt

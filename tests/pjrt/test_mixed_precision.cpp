// Mixed precision (train.precision: bf16) on the PJRT backend: the model computes in bf16 from a
// copy of its f32 weights and adds its bf16 gradients, widened, into f32 ones. Every family
// variant against the f32 CPU backend, with tolerances that follow from bf16's rounding (a
// relative step of 2^-8); and the two properties that make it mixed rather than merely bf16: an
// update far below bf16's resolution still moves the f32 weights, and micro-batches accumulate
// their gradients in f32.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/dtype.h"
#include "core/rng.h"
#include "model/mixed_precision.h"
#include "model/model_test_util.h"
#include "model/transformer.h"
#include "optim/adamw.h"

namespace lmt {
namespace {

using test::Variant;

class MixedPrecision : public testing::TestWithParam<Variant> {};

TEST_P(MixedPrecision, Bf16ComputeTracksTheF32CpuBackend) {
  test::expect_bf16_tracks_f32("pjrt", GetParam().name, GetParam().cfg);
}

// An AdamW step of 1e-6 on weights near 0.1 (bf16's resolution there is 4.9e-4): with f32
// master weights every weight with a gradient moves by the step; weights held in bf16 would not
// move at all.
TEST(MixedPrecisionMaster, AnUpdateBelowBf16ResolutionMovesTheWeights) {
  auto pjrt = make_backend("pjrt");
  const ModelConfig cfg = test::variants().front().cfg;
  Transformer m(pjrt.get(), cfg, DType::f32);
  std::vector<float> w = test::random_floats(m.flat_size(), 3, 0.1);
  for (float& x : w) x = 0.1f + std::fabs(x) * 0.01f;  // all near 0.1
  pjrt->from_host(m.params_data(), w.data(), w.size() * sizeof(float));
  m.set_compute_dtype(DType::bf16);
  AdamW opt(pjrt.get(), m.trainable_params(), m.trainable_flat_size(), AdamWConfig{});
  const int64_t B = 2, T = 9;
  const auto ids = test::random_ids(B * T, cfg.vocab_size, 5);
  const auto labels = test::random_ids(B * T, cfg.vocab_size, 6);
  m.zero_grads();
  LossSums sums = m.make_loss_sums();
  sums.zero();
  m.forward_backward(ids.data(), labels.data(), B, T, 1.0 / (B * T), sums);
  const double lr = 1e-6;
  opt.clip_and_step(static_cast<float*>(m.params_data()), static_cast<float*>(m.grads_data()), lr,
                    0.0);
  std::vector<float> after(w.size()), grads(w.size());
  pjrt->to_host(after.data(), m.params_data(), after.size() * sizeof(float));
  pjrt->to_host(grads.data(), m.grads_data(), grads.size() * sizeof(float));
  int64_t stepped = 0, moved = 0;
  for (const ParamInfo& p : m.params())
    for (int64_t i = p.offset; i < p.offset + p.numel(); ++i) {
      if (std::fabs(grads[i]) < 1e-6) continue;  // Adam's step is lr * sign(g) where |g| >> eps
      ++stepped;
      // f32 holds the step to within its resolution at 0.1 (7.5e-9).
      moved += std::fabs(std::fabs(after[i] - w[i]) - lr) < 2e-8;
    }
  EXPECT_GT(stepped, 200);  // of 906 parameters (tokens not in the batch have no gradient)
  EXPECT_EQ(moved, stepped) << "weights that did not move by the step";
}

INSTANTIATE_TEST_SUITE_P(Variants, MixedPrecision, testing::ValuesIn(test::variants()),
                         [](const testing::TestParamInfo<Variant>& i) { return i.param.name; });

}  // namespace
}  // namespace lmt

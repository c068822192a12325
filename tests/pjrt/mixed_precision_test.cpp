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

#include "../model/model_test_util.h"
#include "backend/backend.h"
#include "core/dtype.h"
#include "core/rng.h"
#include "model/transformer.h"
#include "optim/adamw.h"

namespace lmt {
namespace {

using test::Variant;

// bf16 keeps 8 significant bits: one rounding moves a value by up to 2^-9 of itself.
constexpr double kBf16Eps = 1.0 / 256;

std::vector<float> random_floats(int64_t n, uint64_t seed, double std) {
  std::vector<float> w(static_cast<size_t>(n));
  fill_normal(w.data(), n, 0.0, std, seed, 11);
  return w;
}

// |got - want| / |want| in the L2 sense over n elements.
double rel_l2(const float* got, const float* want, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; ++i) {
    num += (static_cast<double>(got[i]) - want[i]) * (static_cast<double>(got[i]) - want[i]);
    den += static_cast<double>(want[i]) * want[i];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}
double rel_l2(const std::vector<double>& got, const std::vector<double>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    num += (got[i] - want[i]) * (got[i] - want[i]);
    den += want[i] * want[i];
  }
  return std::sqrt(num / den);
}

LoraSpec adapters() {
  LoraSpec spec;
  spec.rank = 2;
  spec.alpha = 4;
  spec.target_modules = {"all-linear"};
  return spec;
}

struct Outputs {
  LossSum loss;
  std::vector<float> grads;
  std::vector<double> logits;
};

// One forward_backward over two micro-batches (accumulated) and the logits of the first row.
// round_weights: the f32 run's weights (and adapters) rounded to bf16 first, the perturbation
// the compute copy makes: how sensitive each output is to one bf16 rounding.
Outputs run(Backend& be, const ModelConfig& cfg, bool bf16, bool lora, bool checkpointing,
            bool round_weights = false) {
  auto round = [&](std::vector<float>& v) {
    if (round_weights)
      for (float& x : v) x = bf16_to_f32(f32_to_bf16(x));
  };
  Transformer m(&be, cfg, DType::f32);
  m.set_activation_checkpointing(checkpointing);
  m.set_loss_chunk_tokens(5);
  std::vector<float> w = random_floats(m.flat_size(), 3, 0.1);
  for (const ParamInfo& p : m.params())
    if (p.kind == ParamKind::norm)
      for (int64_t i = 0; i < p.numel(); ++i) w[p.offset + i] += static_cast<float>(m.norm_init());
  round(w);
  be.from_host(m.params_data(), w.data(), w.size() * sizeof(float));
  if (lora) {
    m.add_lora(adapters(), 5);
    std::vector<float> a = random_floats(m.lora_flat_size(), 4, 0.1);
    round(a);
    be.from_host(m.lora_data(), a.data(), a.size() * sizeof(float));
  }
  if (bf16) m.set_compute_dtype(DType::bf16);
  const int64_t B = 2, T = 9;
  const auto ids = test::random_ids(2 * B * T, cfg.vocab_size, 5);
  const auto labels = test::random_ids(2 * B * T, cfg.vocab_size, 6);
  m.zero_grads();
  Outputs o;
  for (int64_t mb = 0; mb < 2; ++mb)
    o.loss.tokens += m.forward_backward(&ids[mb * B * T], &labels[mb * B * T], B, T,
                                        1.0 / (2 * B * T), nullptr, false)
                         .tokens;
  o.loss.sum = m.take_loss_sum();
  o.grads.resize(static_cast<size_t>(m.trainable_flat_size()));
  be.to_host(o.grads.data(), m.trainable_grads_data(), o.grads.size() * sizeof(float));
  o.logits = m.forward_logits(ids.data(), 1, T, nullptr);
  return o;
}

class MixedPrecision : public testing::TestWithParam<Variant> {};

TEST_P(MixedPrecision, Bf16ComputeTracksTheF32CpuBackend) {
  const ModelConfig& cfg = GetParam().cfg;
  const std::string name = GetParam().name;
  auto cpu = make_backend("cpu");
  auto pjrt = make_backend("pjrt");
  for (const bool lora : {false, true}) {
    if (lora && name != "llama" && name != "gpt2") continue;
    SCOPED_TRACE(lora ? "LoRA" : "full");
    const Outputs want = run(*cpu, cfg, false, lora, false);
    const Outputs got = run(*pjrt, cfg, true, lora, !lora);
    const Outputs rounded = run(*cpu, cfg, false, lora, false, true);
    EXPECT_EQ(got.loss.tokens, want.loss.tokens);
    // Each output's error against how far one bf16 rounding of the weights moves it: the
    // compute copy rounds once, and every kernel's output rounds again, so the error is a few
    // such steps (2 to 5 here); a fault (a statistic read at the wrong offset, a gradient not
    // widened) is tens to thousands.
    double worst = 0;
    std::string worst_what;
    auto check = [&](const std::string& what, double err, double sens,
                     double floor = kBf16Eps / 4) {
      EXPECT_LT(err, std::max(10 * sens, floor))
          << what << ": one rounding of the weights moves it " << sens;
      if (err / sens > worst) worst = err / sens, worst_what = what;
    };
    auto rel = [](double got, double want) { return std::fabs(got - want) / std::fabs(want); };
    // The loss is one number, its sensitivity one sample: it may also err by one rounding of
    // the logits it is computed from.
    check("loss", rel(got.loss.sum, want.loss.sum), rel(rounded.loss.sum, want.loss.sum),
          kBf16Eps / 2);
    Transformer shape(cpu.get(), cfg, DType::f32);
    if (lora) shape.add_lora(adapters(), 5);
    for (const ParamInfo& p : shape.trainable_params())
      check(p.name, rel_l2(&got.grads[p.offset], &want.grads[p.offset], p.numel()),
            rel_l2(&rounded.grads[p.offset], &want.grads[p.offset], p.numel()));
    check("logits", rel_l2(got.logits, want.logits), rel_l2(rounded.logits, want.logits));
    std::printf("%s%s: loss error %.1e; largest error %.1f roundings' worth (%s)\n", name.c_str(),
                lora ? " LoRA" : "", rel(got.loss.sum, want.loss.sum), worst, worst_what.c_str());
  }
}

// An AdamW step of 1e-6 on weights near 0.1 (bf16's resolution there is 4.9e-4): with f32
// master weights every weight with a gradient moves by the step; weights held in bf16 would not
// move at all.
TEST(MixedPrecisionMaster, AnUpdateBelowBf16ResolutionMovesTheWeights) {
  auto pjrt = make_backend("pjrt");
  const ModelConfig cfg = test::variants().front().cfg;
  Transformer m(pjrt.get(), cfg, DType::f32);
  std::vector<float> w = random_floats(m.flat_size(), 3, 0.1);
  for (float& x : w) x = 0.1f + std::fabs(x) * 0.01f;  // all near 0.1
  pjrt->from_host(m.params_data(), w.data(), w.size() * sizeof(float));
  m.set_compute_dtype(DType::bf16);
  AdamW opt(pjrt.get(), m.trainable_params(), m.trainable_flat_size(), AdamWConfig{});
  const int64_t B = 2, T = 9;
  const auto ids = test::random_ids(B * T, cfg.vocab_size, 5);
  const auto labels = test::random_ids(B * T, cfg.vocab_size, 6);
  m.zero_grads();
  m.forward_backward(ids.data(), labels.data(), B, T, 1.0 / (B * T), nullptr, false);
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

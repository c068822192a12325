// Mixed precision (train.precision: bf16) against the f32 CPU backend, for any backend that
// computes in bf16 (pjrt, and the CPU backend itself): the model computes in bf16 from a copy of
// its f32 weights and adds its bf16 gradients, widened, into f32 ones. Tolerances follow from
// bf16's rounding (a relative step of 2^-8).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/dtype.h"
#include "core/rng.h"
#include "model/model_test_util.h"
#include "model/transformer.h"

namespace lmt::test {

// bf16 keeps 8 significant bits: one rounding moves a value by up to 2^-9 of itself.
constexpr double kBf16Eps = 1.0 / 256;

// |got - want| / |want| in the L2 sense over n elements.
inline double rel_l2(const float* got, const float* want, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; ++i) {
    num += (static_cast<double>(got[i]) - want[i]) * (static_cast<double>(got[i]) - want[i]);
    den += static_cast<double>(want[i]) * want[i];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}
inline double rel_l2(const std::vector<double>& got, const std::vector<double>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    num += (got[i] - want[i]) * (got[i] - want[i]);
    den += want[i] * want[i];
  }
  return std::sqrt(num / den);
}

inline LoraSpec adapters() {
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
inline Outputs run(Backend& be, const ModelConfig& cfg, bool bf16, bool lora, bool checkpointing,
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
  const auto ids = random_ids(2 * B * T, cfg.vocab_size, 5);
  const auto labels = random_ids(2 * B * T, cfg.vocab_size, 6);
  m.zero_grads();
  LossSums sums = m.make_loss_sums();
  sums.zero();
  Outputs o;
  for (int64_t mb = 0; mb < 2; ++mb)
    o.loss.tokens += m.forward_backward(&ids[mb * B * T], &labels[mb * B * T], B, T,
                                        1.0 / (2 * B * T), sums, nullptr);
  o.loss.sum = sums.read(o.loss.tokens).sum;
  o.grads.resize(static_cast<size_t>(m.trainable_flat_size()));
  be.to_host(o.grads.data(), m.trainable_grads_data(), o.grads.size() * sizeof(float));
  o.logits = m.forward_logits(ids.data(), 1, T, nullptr);
  return o;
}

// Every output of a bf16 run on `backend` (full and, for llama and gpt2, LoRA) against the f32
// CPU backend, each error measured in how far one bf16 rounding of the weights moves the output.
inline void expect_bf16_tracks_f32(const std::string& backend, const std::string& name,
                                   const ModelConfig& cfg) {
  auto cpu = make_backend("cpu");
  auto other = make_backend(backend);
  for (const bool lora : {false, true}) {
    if (lora && name != "llama" && name != "gpt2") continue;
    SCOPED_TRACE(lora ? "LoRA" : "full");
    const Outputs want = run(*cpu, cfg, false, lora, false);
    const Outputs got = run(*other, cfg, true, lora, !lora);
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

}  // namespace lmt::test

// Whole models on the PJRT backend (XLA's CPU plugin) against the CPU backend, for every family
// variant of the model tests: the loss, every parameter's gradient and the logits, in float32,
// from the same random weights and tokens. Full training with and without activation
// checkpointing and with packed documents; LoRA with dropout and a saved norm. The PJRT run is
// the same Transformer code on another backend, so this is the whole-model check of the
// lowerings and of the backend's address and byte-range bookkeeping.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "../model/model_test_util.h"
#include "backend/backend.h"
#include "backend/pjrt/backend.h"
#include "core/rng.h"
#include "model/transformer.h"
#include "pjrt_test_util.h"
#include "model_passes.h"

namespace lmt {
namespace {

using test::Variant;

struct Mode {
  bool checkpointing = false;
  bool packed = false;
  bool lora = false;
  int activation_bits = 0;
  bool bf16 = false;  // train.precision: bf16
};

struct Outputs {
  LossSum loss;
  std::vector<float> grads;    // the trainable gradient buffer
  std::vector<double> logits;  // of the first row
};

Outputs run(Backend& be, const ModelConfig& cfg, const Mode& s) {
  Transformer m(&be, cfg, DType::f32);
  m.set_activation_checkpointing(s.checkpointing);
  m.set_activation_bits(s.activation_bits);
  if (s.bf16) m.set_compute_dtype(DType::bf16);
  m.set_loss_chunk_tokens(5);
  std::vector<float> w = test::random_floats(m.flat_size(), 3, 0.3);
  for (const ParamInfo& p : m.params())
    if (p.kind == ParamKind::norm)
      for (int64_t i = 0; i < p.numel(); ++i) w[p.offset + i] += static_cast<float>(m.norm_init());
  be.from_host(m.params_data(), w.data(), w.size() * sizeof(float));
  if (s.lora) {
    LoraSpec spec;
    spec.rank = 2;
    spec.alpha = 4;
    spec.target_modules = {"all-linear"};
    spec.dropout = 0.2;
    spec.modules_to_save = {cfg.family == "gpt2" ? "ln_2" : "post_attention_layernorm"};
    m.add_lora(spec, 5);
    // B is zero at initialisation, which would leave A's gradient zero: all random instead.
    const std::vector<float> a = test::random_floats(m.lora_flat_size(), 4, 0.3);
    be.from_host(m.lora_data(), a.data(), a.size() * sizeof(float));
    m.set_dropout(9, 2);
  }
  const int64_t B = 2, T = 7;
  const auto ids = test::random_ids(B * T, cfg.vocab_size, 5);
  auto labels = test::random_ids(B * T, cfg.vocab_size, 6);
  labels[4] = Transformer::kIgnoreIndex;
  // Packed: row 0 holds documents at 0 and 3, row 1 at 0, 2 and 6.
  const std::vector<int32_t> doc_start = {0, 0, 0, 3, 3, 3, 3, 0, 0, 2, 2, 2, 2, 6},
                             positions = {0, 1, 2, 0, 1, 2, 3, 0, 1, 0, 1, 2, 3, 0};
  const Transformer::Packing packing{positions.data(), doc_start.data()};
  m.zero_grads();
  Outputs o;
  o.loss =
      lmt::test::train_batch(m, ids.data(), labels.data(), B, T, 1.0 / 13, s.packed ? &packing : nullptr);
  o.grads.resize(static_cast<size_t>(m.trainable_flat_size()));
  be.to_host(o.grads.data(), m.trainable_grads_data(), o.grads.size() * sizeof(float));
  o.logits = m.forward_logits(ids.data(), 1, T, nullptr);
  return o;
}

class ModelParity : public testing::TestWithParam<Variant> {};

TEST_P(ModelParity, LossGradientsAndLogitsMatchTheCpuBackend) {
  const ModelConfig& cfg = GetParam().cfg;
  // LoRA's programs take longest to compile (a Philox mask per adapter): three families cover
  // its three kinds of layer (plain, q/k-normed with sandwich norms, GPT-2's Conv1D).
  const std::string name = GetParam().name;
  const bool lora = name == "llama" || name == "gemma3" || name == "gpt2";
  for (Mode s : {Mode{false, false, false}, Mode{true, true, false}, Mode{false, true, true}}) {
    if (s.lora && !lora) continue;
    SCOPED_TRACE(std::string(s.checkpointing ? "checkpointing" : "no checkpointing") +
                 (s.packed ? ", packed" : "") + (s.lora ? ", LoRA" : ""));
    auto cpu = make_backend("cpu");
    auto pjrt = make_backend("pjrt");
    const Outputs want = run(*cpu, cfg, s);
    const Outputs got = run(*pjrt, cfg, s);
    EXPECT_EQ(got.loss.tokens, want.loss.tokens);
    EXPECT_NEAR(got.loss.sum, want.loss.sum, 1e-5 * std::fabs(want.loss.sum));
    Transformer shape(cpu.get(), cfg, DType::f32);
    if (s.lora) {
      EXPECT_LT(test::max_rel_diff(got.grads.data(), want.grads.data(), got.grads.size()), 1e-5)
          << "LoRA gradients";
    } else {
      for (const ParamInfo& p : shape.params())
        EXPECT_LT(test::max_rel_diff(&got.grads[p.offset], &want.grads[p.offset],
                                     static_cast<size_t>(p.numel())),
                  1e-5)
            << p.name;
    }
    ASSERT_EQ(got.logits.size(), want.logits.size());
    EXPECT_LT(test::max_rel_diff(got.logits.data(), want.logits.data(), want.logits.size()), 1e-5)
        << "logits";
    const ProgramReport st = pjrt->device().programs;
    EXPECT_GT(st.run, 0);
    std::printf("%s: %lld programs run, %lld compiled in %.2f s\n", name.c_str(),
                static_cast<long long>(st.run), static_cast<long long>(st.compiled),
                st.compile_seconds);
  }
}

// train.activation_bits: 1 on pjrt (gpt2 with ReLU's 1-bit mask and ReLU^2 from its output):
// the same bits as the pre-activation kept, in f32 and in bf16, and the CPU backend's values.
TEST(ModelParityActivationBits, SameGradientsAsThePreActivationKept) {
  auto cpu = make_backend("cpu");
  auto pjrt = make_backend("pjrt");
  for (const char* act : {"relu", "relu2"}) {
    ModelConfig cfg = test::tiny("gpt2");
    cfg.hidden_act = act;
    cfg.intermediate_size = 13;  // N F = 182: a partial last mask word
    // Each run compiles its programs (about 2 s): checkpointing with packed rows, and LoRA
    // (with dropout) for ReLU's mask.
    for (Mode s : {Mode{true, true, false}, Mode{false, false, true}}) {
      for (bool bf16 : {false, true}) {
        if (s.lora && (bf16 || std::string(act) == "relu2")) continue;
        SCOPED_TRACE(std::string(act) + (s.checkpointing ? " checkpointing" : "") +
                     (s.lora ? " LoRA" : "") + (bf16 ? " bf16" : " f32"));
        s.bf16 = bf16;
        s.activation_bits = 0;
        const Outputs kept = run(*pjrt, cfg, s);
        s.activation_bits = 1;
        const Outputs bits = run(*pjrt, cfg, s);
        EXPECT_EQ(bits.loss.sum, kept.loss.sum);
        EXPECT_EQ(bits.grads, kept.grads);
        if (bf16) continue;
        const Outputs want = run(*cpu, cfg, s);
        EXPECT_NEAR(bits.loss.sum, want.loss.sum, 1e-5 * std::fabs(want.loss.sum));
        EXPECT_LT(test::max_rel_diff(bits.grads.data(), want.grads.data(), want.grads.size()),
                  1e-5);
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Variants, ModelParity, testing::ValuesIn(test::variants()),
                         [](const testing::TestParamInfo<Variant>& i) { return i.param.name; });

}  // namespace
}  // namespace lmt

// Every family variant on a mesh of fsdp 2 x tensor 2 (XLA's CPU plugin, four devices): the loss
// and every parameter's gradient of one step, with activation checkpointing on the mesh, equal
// the one-device step's; and in bf16 for a llama and a gpt2. Each family's layers (fused q|k|v
// or Conv1D, q/k norms, sandwich norms, soft-caps, sliding windows, tied or untied heads) pass
// through the sharding plan and XLA's partitioner here.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "../model/model_test_util.h"
#include "backend/pjrt/backend.h"
#include "model/sharding_plan.h"
#include "model/transformer.h"
#include "pjrt_test_util.h"
#include "model_passes.h"

namespace lmt {
namespace {

struct Outputs {
  LossSum loss;
  std::vector<float> grads;
};

Outputs step(const Mesh& mesh, const ModelConfig& cfg, bool checkpointing, bool bf16) {
  PjrtOptions o;
  o.mesh = mesh;
  o.sharding = plan_sharding;
  auto be = make_pjrt_backend("", o);
  Transformer m(be.get(), cfg, DType::f32);
  m.set_activation_checkpointing(checkpointing);
  if (bf16) m.set_compute_dtype(DType::bf16);
  m.set_loss_chunk_tokens(8);
  std::vector<float> w = test::random_floats(m.flat_size(), 3, 0.3);
  for (const ParamInfo& p : m.params())
    if (p.kind == ParamKind::norm)
      for (int64_t i = 0; i < p.numel(); ++i) w[p.offset + i] += static_cast<float>(m.norm_init());
  be->from_host(m.params_data(), w.data(), w.size() * sizeof(float));
  const int64_t B = 4, T = 8;
  const auto ids = test::random_ids(B * T, cfg.vocab_size, 5);
  const auto labels = test::random_ids(B * T, cfg.vocab_size, 6);
  m.zero_grads();
  Outputs out;
  out.loss = lmt::test::train_batch(m, ids.data(), labels.data(), B, T, 1.0 / (B * T), nullptr);
  out.grads.resize(static_cast<size_t>(m.flat_size()));
  be->to_host(out.grads.data(), m.grads_data(), out.grads.size() * sizeof(float));
  return out;
}

// The variant's switches at sizes every split divides: 4 heads, 2 kv heads (gpt2: 4), hidden 16.
ModelConfig divisible(ModelConfig c) {
  c.vocab_size = 32, c.hidden_size = 16, c.intermediate_size = 16;
  c.num_attention_heads = 4;
  c.num_key_value_heads = c.family == "gpt2" ? 0 : 2;
  c.head_dim = c.family == "gpt2" ? 0 : 4;
  c.max_position_embeddings = std::max<int64_t>(c.max_position_embeddings, 8);
  return c;
}

class MeshFamilies : public testing::TestWithParam<test::Variant> {};

TEST_P(MeshFamilies, StepOnFsdp2Tensor2MatchesOneDevice) {
  const ModelConfig cfg = divisible(GetParam().cfg);
  const Mesh mesh{{{"fsdp", 2}, {"tensor", 2}}};
  const std::string name = GetParam().name;
  const bool bf16_too = name == "llama" || name == "gpt2";
  for (bool bf16 : {false, true}) {
    if (bf16 && !bf16_too) continue;
    SCOPED_TRACE(bf16 ? "bf16" : "f32");
    const Outputs want = step(Mesh{}, cfg, false, bf16);
    const Outputs got = step(mesh, cfg, true, bf16);
    // f32: reassociation only. bf16: the partial sums of split products are rounded to bf16 on
    // each device before they are added, where one device rounds once.
    const double tol = bf16 ? 2e-2 : 1e-5;
    EXPECT_EQ(got.loss.tokens, want.loss.tokens);
    EXPECT_NEAR(got.loss.sum, want.loss.sum, tol * std::fabs(want.loss.sum));
    auto be = make_backend("cpu");
    Transformer shape(be.get(), cfg, DType::f32);
    for (const ParamInfo& p : shape.params())
      EXPECT_LT(test::max_rel_diff(&got.grads[p.offset], &want.grads[p.offset],
                                   static_cast<size_t>(p.numel())),
                tol)
          << p.name;
  }
}

INSTANTIATE_TEST_SUITE_P(Families, MeshFamilies, testing::ValuesIn(test::variants()),
                         [](const testing::TestParamInfo<test::Variant>& i) {
                           return std::string(i.param.name);
                         });

}  // namespace
}  // namespace lmt

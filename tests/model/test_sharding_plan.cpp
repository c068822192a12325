// The sharding plan (model/sharding_plan.h) and the mesh arithmetic under it (backend/mesh.h): the
// table gives each family's parameters, their gradients, moments and LoRA adapters the axes the
// plan promises; a device's piece of a tensor is where the mesh coordinates say, and cutting a
// tensor into every device's piece and putting the pieces back gives the tensor again.
#include <gtest/gtest.h>

#include <numeric>
#include <random>

#include "backend/mesh.h"
#include "model/sharding_plan.h"
#include "model/transformer.h"

namespace lmt {
namespace {

using S = TensorSharding;
const S kRowsTensorColsFsdp = {{"tensor"}, {"fsdp"}};
const S kRowsFsdpColsTensor = {{"fsdp"}, {"tensor"}};

TEST(ShardingPlan, LlamaParametersGradientsAndMoments) {
  const std::string l = "model.layers.3.";
  for (const std::string& prefix : {"", "grad.", "exp_avg.", "exp_avg_sq.", "momentum_buffer."}) {
    SCOPED_TRACE(prefix);
    for (const char* m : {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
                          "mlp.gate_proj", "mlp.up_proj"})
      EXPECT_EQ(plan_sharding(prefix + l + m + ".weight", {64, 32}), kRowsTensorColsFsdp) << m;
    for (const char* m : {"self_attn.o_proj", "mlp.down_proj"})
      EXPECT_EQ(plan_sharding(prefix + l + m + ".weight", {32, 64}), kRowsFsdpColsTensor) << m;
    EXPECT_EQ(plan_sharding(prefix + l + "self_attn.q_proj.bias", {64}), S{{"tensor"}});
    EXPECT_EQ(plan_sharding(prefix + "model.embed_tokens.weight", {100, 32}), kRowsTensorColsFsdp);
    EXPECT_EQ(plan_sharding(prefix + "lm_head.weight", {100, 32}), kRowsTensorColsFsdp);
    for (const char* norm :
         {"input_layernorm.weight", "post_attention_layernorm.weight", "self_attn.q_norm.weight"})
      EXPECT_EQ(plan_sharding(prefix + l + norm, {32}), S{}) << norm;
    EXPECT_EQ(plan_sharding(prefix + "model.norm.weight", {32}), S{});
  }
}

// gpt2's Conv1D weights are [in, out]: c_attn and c_fc split their columns over tensor, the
// c_proj's their rows.
TEST(ShardingPlan, Gpt2Conv1DIsTransposed) {
  const std::string h = "transformer.h.0.";
  EXPECT_EQ(plan_sharding(h + "attn.c_attn.weight", {32, 96}), kRowsFsdpColsTensor);
  EXPECT_EQ(plan_sharding(h + "mlp.c_fc.weight", {32, 128}), kRowsFsdpColsTensor);
  EXPECT_EQ(plan_sharding(h + "attn.c_proj.weight", {32, 32}), kRowsTensorColsFsdp);
  EXPECT_EQ(plan_sharding(h + "mlp.c_proj.weight", {128, 32}), kRowsTensorColsFsdp);
  EXPECT_EQ(plan_sharding(h + "attn.c_attn.bias", {96}), S{{"tensor"}});
  EXPECT_EQ(plan_sharding(h + "attn.c_proj.bias", {32}), S{{"fsdp"}});
  EXPECT_EQ(plan_sharding(h + "ln_1.bias", {32}), S{});
  EXPECT_EQ(plan_sharding("transformer.wte.weight", {100, 32}), kRowsTensorColsFsdp);
  EXPECT_EQ(plan_sharding("transformer.wpe.weight", {64, 32}), (S{{}, {"fsdp"}}));
}

// A: [r, in] splits `in` as its base does; B: [out, r] splits `out`; the rank stays whole.
TEST(ShardingPlan, LoraAdaptersFollowTheirBase) {
  const std::string q = "base_model.model.model.layers.0.self_attn.q_proj.";
  EXPECT_EQ(plan_sharding(q + "lora_A.weight", {8, 32}), (S{{}, {"fsdp"}}));
  EXPECT_EQ(plan_sharding(q + "lora_B.weight", {64, 8}), (S{{"tensor"}, {}}));
  const std::string o = "base_model.model.model.layers.0.self_attn.o_proj.";
  EXPECT_EQ(plan_sharding(o + "lora_A.weight", {8, 64}), (S{{}, {"tensor"}}));
  EXPECT_EQ(plan_sharding(o + "lora_B.weight", {32, 8}), (S{{"fsdp"}, {}}));
  EXPECT_EQ(plan_sharding("grad." + o + "lora_B.weight", {32, 8}), (S{{"fsdp"}, {}}));
}

TEST(ShardingPlan, BatchOverDataAndFsdpScalarsWhole) {
  EXPECT_EQ(plan_sharding("batch.ids", {8, 64}), (S{{"data", "fsdp"}, {}}));
  EXPECT_EQ(plan_sharding("batch.labels", {8, 64}), (S{{"data", "fsdp"}, {}}));
  EXPECT_EQ(plan_sharding("loss_sum", {}), S{});
  EXPECT_EQ(plan_sharding("rope.inv_freq", {16}), S{});
  EXPECT_EQ(plan_sharding("grad_sum_squares", {}), S{});
}

// Every parameter of every family has an entry or is a norm, bias or table the plan keeps whole
// on purpose: nothing 2-D is left whole by accident.
TEST(ShardingPlan, EveryFamilysMatricesAreSplit) {
  for (const char* family :
       {"llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "gemma3", "gpt2"}) {
    SCOPED_TRACE(family);
    ModelConfig c = family_defaults(family);
    c.vocab_size = 64, c.hidden_size = 32, c.intermediate_size = 64, c.num_hidden_layers = 1;
    c.num_attention_heads = 4, c.num_key_value_heads = c.family == "gpt2" ? 0 : 2;
    c.head_dim = c.family == "gpt2" ? 0 : 8;
    c.max_position_embeddings = 64;
    for (const ParamInfo& p : param_layout(c, nullptr)) {
      const S s = plan_sharding(p.name, p.shape.dims());
      if (p.shape.dims().size() == 2)
        EXPECT_FALSE(is_replicated(s)) << p.name;
      else if (p.kind == ParamKind::norm)
        EXPECT_TRUE(is_replicated(s)) << p.name;
    }
  }
}

Mesh mesh_2x2x2() {
  return Mesh{{{"data", 2}, {"fsdp", 2}, {"tensor", 2}}};
}

TEST(Mesh, CoordinatesAreRowMajorOverTheAxes) {
  const Mesh m = mesh_2x2x2();
  EXPECT_EQ(m.size(), 8);
  // device 6 = (data 1, fsdp 1, tensor 0)
  EXPECT_EQ(m.coordinate(6, "data"), 1);
  EXPECT_EQ(m.coordinate(6, "fsdp"), 1);
  EXPECT_EQ(m.coordinate(6, "tensor"), 0);
  EXPECT_EQ(m.coordinate(6, "pipeline"), 0);
  const S batch = {{"data", "fsdp"}, {}};
  EXPECT_EQ(shard_count(m, batch, 0), 4);
  EXPECT_EQ(shard_count(m, batch, 1), 1);
  EXPECT_EQ(shard_index(m, batch, 0, 6), 3);  // data major, fsdp minor
  EXPECT_EQ(shard_index(m, batch, 0, 5), 2);
  EXPECT_EQ(shard_dims(m, batch, {8, 5}), (std::vector<int64_t>{2, 5}));
  EXPECT_EQ(shard_offset(m, batch, {8, 5}, 6), (std::vector<int64_t>{6, 0}));
}

// Pieces cut out of a random 3-D tensor hold exactly its elements at their offsets, and every
// device's piece put back into an empty tensor rebuilds it.
TEST(Mesh, PiecesCutAndPutBackGiveTheTensor) {
  const Mesh m = mesh_2x2x2();
  const std::vector<int64_t> dims = {4, 6, 8};
  const S s = {{"tensor"}, {}, {"data", "fsdp"}};
  std::vector<float> whole(4 * 6 * 8);
  std::mt19937 rng(7);
  for (float& x : whole) x = std::uniform_real_distribution<float>(-1, 1)(rng);
  const std::vector<int64_t> piece_dims = shard_dims(m, s, dims);
  ASSERT_EQ(piece_dims, (std::vector<int64_t>{2, 6, 2}));
  std::vector<float> rebuilt(whole.size(), 0), piece(2 * 6 * 2);
  for (int64_t d = 0; d < m.size(); ++d) {
    extract_shard(m, s, dims, sizeof(float), d, whole.data(), piece.data());
    const std::vector<int64_t> at = shard_offset(m, s, dims, d);
    for (int64_t i = 0; i < 2; ++i)
      for (int64_t j = 0; j < 6; ++j)
        for (int64_t k = 0; k < 2; ++k)
          ASSERT_EQ(piece[(i * 6 + j) * 2 + k],
                    whole[((at[0] + i) * 6 + at[1] + j) * 8 + at[2] + k])
              << "device " << d;
    insert_shard(m, s, dims, sizeof(float), d, piece.data(), rebuilt.data());
  }
  EXPECT_EQ(rebuilt, whole);
}

}  // namespace
}  // namespace lmt

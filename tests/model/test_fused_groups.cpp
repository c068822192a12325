// fused_groups: the q|k|v and gate|up groups of the layout as one tensor each (what a backend
// that takes the groups whole holds and updates as one array), every other parameter as it is.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "model/model_config.h"
#include "model/param_layout.h"

namespace lmt {
namespace {

ModelConfig grouped_config(const std::string& family) {
  ModelConfig c = family_defaults(family);
  c.vocab_size = 301, c.hidden_size = 24, c.intermediate_size = 40, c.num_hidden_layers = 2;
  c.num_attention_heads = 4, c.num_key_value_heads = family == "gpt2" ? 0 : 2;
  c.head_dim = family == "gpt2" ? 0 : 8, c.max_position_embeddings = 32;
  return c;
}

TEST(FusedGroups, QkvAndGateUpAreOneTensorEachWithTheFirstOnesName) {
  const ModelConfig c = grouped_config("qwen2");  // q|k|v weights and biases, gate|up
  const std::vector<ParamInfo> params = param_layout(c);
  const std::vector<ParamInfo> groups = fused_groups(params);
  const int64_t Q = 4 * 8, KV = 2 * 8, C = 24, F = 40;
  // Per layer: k, v (weights), k, v (biases) and up join the one before them.
  EXPECT_EQ(groups.size(), params.size() - 5 * 2);
  int64_t numel = 0, group_numel = 0;
  for (const ParamInfo& p : params) numel += p.numel();
  for (const ParamInfo& g : groups) {
    group_numel += g.numel();
    EXPECT_FALSE(g.fused) << g.name;
    EXPECT_EQ(g.name.find("k_proj"), std::string::npos) << g.name;
    EXPECT_EQ(g.name.find("up_proj"), std::string::npos) << g.name;
  }
  EXPECT_EQ(group_numel, numel);
  auto find = [&](const std::string& name) -> const ParamInfo* {
    for (const ParamInfo& g : groups)
      if (g.name == name) return &g;
    return nullptr;
  };
  for (const ParamInfo& p : params) {
    if (p.name != "model.layers.1.self_attn.q_proj.weight") continue;
    const ParamInfo* g = find(p.name);
    ASSERT_NE(g, nullptr);
    EXPECT_EQ(g->offset, p.offset);
    EXPECT_EQ(g->shape.dims(), (std::vector<int64_t>{Q + 2 * KV, C}));
  }
  ASSERT_NE(find("model.layers.0.self_attn.q_proj.bias"), nullptr);
  EXPECT_EQ(find("model.layers.0.self_attn.q_proj.bias")->shape.dims(),
            (std::vector<int64_t>{Q + 2 * KV}));
  ASSERT_NE(find("model.layers.0.mlp.gate_proj.weight"), nullptr);
  EXPECT_EQ(find("model.layers.0.mlp.gate_proj.weight")->shape.dims(),
            (std::vector<int64_t>{2 * F, C}));
}

TEST(FusedGroups, Gpt2sLayoutHasNoGroupsToJoin) {  // its c_attn is one parameter already
  const std::vector<ParamInfo> params = param_layout(grouped_config("gpt2"));
  const std::vector<ParamInfo> groups = fused_groups(params);
  ASSERT_EQ(groups.size(), params.size());
  for (size_t i = 0; i < params.size(); ++i) {
    EXPECT_EQ(groups[i].name, params[i].name);
    EXPECT_EQ(groups[i].shape.dims(), params[i].shape.dims());
  }
}

}  // namespace
}  // namespace lmt

// The parameter layout of every family (see param_layout.h).
#include "model/param_layout.h"

#include <algorithm>
#include <charconv>
#include <climits>
#include <string_view>

namespace lmt {

std::vector<ParamInfo> param_layout(const ModelConfig& cfg, int64_t* flat_size) {
  const ModelConfig& c = cfg;
  c.validate();
  const ModelConfig::Traits t = c.traits();
  const int64_t C = c.hidden_size, F = c.intermediate_size, V = c.vocab_size;
  const int64_t D = c.head_size(), Q = c.num_attention_heads * D, KV = c.kv_heads() * D;
  std::vector<ParamInfo> params;
  int64_t off = 0;
  // `fused` keeps a tensor directly after the previous one (no alignment gap).
  auto add = [&](std::string name, Shape shape, ParamKind kind, bool fused = false) {
    if (!fused) off = align_param(off);
    params.push_back(ParamInfo{std::move(name), shape, off, kind, {}, fused});
    off += shape.numel();
  };
  if (t.conv1d) {  // gpt2
    add("transformer.wte.weight", {V, C}, ParamKind::embedding);
    add("transformer.wpe.weight", {c.max_position_embeddings, C}, ParamKind::embedding);
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
      const std::string p = "transformer.h." + std::to_string(l) + ".";
      add(p + "ln_1.weight", {C}, ParamKind::norm);
      add(p + "ln_1.bias", {C}, ParamKind::bias);
      add(p + "attn.c_attn.weight", {C, Q + 2 * KV}, ParamKind::matrix);
      params.back().column_blocks = {Q, KV, KV};
      add(p + "attn.c_attn.bias", {Q + 2 * KV}, ParamKind::bias);
      add(p + "attn.c_proj.weight", {Q, C}, ParamKind::matrix);
      add(p + "attn.c_proj.bias", {C}, ParamKind::bias);
      add(p + "ln_2.weight", {C}, ParamKind::norm);
      add(p + "ln_2.bias", {C}, ParamKind::bias);
      add(p + "mlp.c_fc.weight", {C, F}, ParamKind::matrix);
      add(p + "mlp.c_fc.bias", {F}, ParamKind::bias);
      add(p + "mlp.c_proj.weight", {F, C}, ParamKind::matrix);
      add(p + "mlp.c_proj.bias", {C}, ParamKind::bias);
    }
    add("transformer.ln_f.weight", {C}, ParamKind::norm);
    add("transformer.ln_f.bias", {C}, ParamKind::bias);
  } else {
    add("model.embed_tokens.weight", {V, C}, ParamKind::embedding);
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
      const std::string p = "model.layers." + std::to_string(l) + ".";
      add(p + "input_layernorm.weight", {C}, ParamKind::norm);
      add(p + "self_attn.q_proj.weight", {Q, C}, ParamKind::matrix);
      add(p + "self_attn.k_proj.weight", {KV, C}, ParamKind::matrix, true);
      add(p + "self_attn.v_proj.weight", {KV, C}, ParamKind::matrix, true);
      if (t.qkv_bias) {
        add(p + "self_attn.q_proj.bias", {Q}, ParamKind::bias);
        add(p + "self_attn.k_proj.bias", {KV}, ParamKind::bias, true);
        add(p + "self_attn.v_proj.bias", {KV}, ParamKind::bias, true);
      }
      if (t.qk_norm) {
        add(p + "self_attn.q_norm.weight", {D}, ParamKind::norm);
        add(p + "self_attn.k_norm.weight", {D}, ParamKind::norm);
      }
      add(p + "self_attn.o_proj.weight", {C, Q}, ParamKind::matrix);
      add(p + "post_attention_layernorm.weight", {C}, ParamKind::norm);
      if (t.sandwich_norms) add(p + "pre_feedforward_layernorm.weight", {C}, ParamKind::norm);
      add(p + "mlp.gate_proj.weight", {F, C}, ParamKind::matrix);
      add(p + "mlp.up_proj.weight", {F, C}, ParamKind::matrix, true);
      add(p + "mlp.down_proj.weight", {C, F}, ParamKind::matrix);
      if (t.sandwich_norms) add(p + "post_feedforward_layernorm.weight", {C}, ParamKind::norm);
    }
    add("model.norm.weight", {C}, ParamKind::norm);
  }
  if (!c.tie_word_embeddings) add("lm_head.weight", {V, C}, ParamKind::matrix);
  if (flat_size) *flat_size = align_param(off);
  return params;
}

std::vector<ParamInfo> fused_groups(const std::vector<ParamInfo>& params) {
  std::vector<ParamInfo> groups;
  for (const ParamInfo& p : params) {
    ParamInfo* g = groups.empty() ? nullptr : &groups.back();
    const bool joins = p.fused && g && g->offset + g->numel() == p.offset &&
                       g->shape.rank() == p.shape.rank() &&
                       (p.shape.rank() == 1 || (p.shape.rank() == 2 && g->shape[1] == p.shape[1]));
    if (!joins) {
      groups.push_back(p);
      groups.back().fused = false;
      continue;
    }
    std::vector<int64_t> dims = g->shape.dims();
    dims[0] += p.shape[0];
    g->shape = Shape(dims);
  }
  return groups;
}

std::vector<std::pair<int64_t, int64_t>> layer_ranges(const std::vector<ParamInfo>& params,
                                                      const ModelConfig& cfg) {
  std::vector<std::pair<int64_t, int64_t>> r(static_cast<size_t>(cfg.num_hidden_layers),
                                             {INT64_MAX, 0});
  // One pass over the parameters, each placed by the layer number in its name (a pass per layer
  // would grow with layers x parameters: hours for a deep config).
  const std::string_view blocks = cfg.traits().conv1d ? "transformer.h." : "model.layers.";
  for (const ParamInfo& p : params) {
    const std::string_view name = p.name;
    if (!name.starts_with(blocks)) continue;
    const std::string_view rest = name.substr(blocks.size());
    int64_t l = -1;
    const auto [after, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), l);
    if (ec != std::errc() || after == rest.data() + rest.size() || *after != '.' || l < 0 ||
        l >= cfg.num_hidden_layers)
      continue;
    auto& [begin, end] = r[static_cast<size_t>(l)];
    begin = std::min(begin, p.offset);
    end = std::max(end, p.offset + p.numel());
  }
  return r;
}

}  // namespace lmt

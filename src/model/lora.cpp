// The adapter layout: the projections of each family and the PEFT names of their adapters.
#include "model/lora.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace lmt {

namespace {

constexpr int64_t kAlignElems = 64;

bool matches(const std::string& path, const std::string& target) {
  return path == target ||
         (path.size() > target.size() && path.ends_with(target) &&
          path[path.size() - target.size() - 1] == '.');
}

// Appends the base parameters of spec.modules_to_save to `out` (each a copy, with its kind, so
// that weight decay treats it as full training would), after offset `off`.
void add_saved_modules(const ModelConfig& cfg, const LoraSpec& spec, LoraLayout& out,
                       int64_t& off) {
  const std::vector<ParamInfo> base = param_layout(cfg);
  auto module_of = [](const std::string& name) { return name.substr(0, name.rfind('.')); };
  std::vector<bool> chosen(base.size(), false);
  for (const std::string& target : spec.modules_to_save) {
    bool any = false;
    for (size_t i = 0; i < base.size(); ++i) {
      const std::string module = module_of(base[i].name);
      if (!module.ends_with(target)) continue;  // PEFT's test for modules_to_save
      const ParamKind kind = base[i].kind;
      const bool norm = kind == ParamKind::norm || (kind == ParamKind::bias && [&] {
                          for (const ParamInfo& p : base)
                            if (p.kind == ParamKind::norm && module_of(p.name) == module)
                              return true;
                          return false;
                        }());
      const bool head = module == "lm_head";
      if (!norm && !head && kind != ParamKind::embedding)
        throw UserError("lora.modules_to_save: '" + excerpt(target) + "' matches " + module +
                        ", a projection: adapt it with lora.target_modules (modules_to_save "
                        "trains norms, and the embeddings and head of an untied model)");
      if (!norm && cfg.tie_word_embeddings && (head || module.ends_with("embed_tokens") ||
                                               module.ends_with("wte")))
        throw UserError("lora.modules_to_save: '" + excerpt(target) + "' matches " + module +
                        ", which this model ties to its output head (tie_word_embeddings); "
                        "lmtrain does not untie it to train it beside adapters");
      chosen[i] = any = true;
    }
    if (!any)
      throw UserError("lora.modules_to_save: '" + excerpt(target) + "' matches no module of a " +
                      cfg.family + " model" +
                      (target.ends_with("lm_head") && cfg.tie_word_embeddings
                           ? " (its head is the token embedding: tie_word_embeddings)"
                           : " (norms, for example input_layernorm or norm; gpt2: ln_1, ln_2, "
                             "ln_f; an untied model's embeddings and lm_head)"));
  }
  for (size_t i = 0; i < base.size(); ++i) {
    if (!chosen[i]) continue;
    off = (off + kAlignElems - 1) / kAlignElems * kAlignElems;
    out.params.push_back(
        ParamInfo{"base_model.model." + base[i].name, base[i].shape, off, base[i].kind, base[i].column_blocks});
    out.saved.push_back(SavedParam{base[i].name, static_cast<int>(out.params.size() - 1)});
    off += base[i].shape.numel();
  }
}

}  // namespace

std::string block_prefix(const ModelConfig& cfg, int64_t layer) {
  return (cfg.traits().conv1d ? "transformer.h." : "model.layers.") + std::to_string(layer) + ".";
}

std::vector<LoraModule> lora_modules(const ModelConfig& cfg) {
  const int64_t C = cfg.hidden_size, F = cfg.intermediate_size;
  const int64_t D = cfg.head_size(), Q = cfg.num_attention_heads * D, KV = cfg.kv_heads() * D;
  if (cfg.traits().conv1d)
    return {{"attn.c_attn", LoraGroup::qkv, 0, C, Q + 2 * KV},
            {"attn.c_proj", LoraGroup::o, 0, Q, C},
            {"mlp.c_fc", LoraGroup::up, 0, C, F},
            {"mlp.c_proj", LoraGroup::down, 0, F, C}};
  return {{"self_attn.q_proj", LoraGroup::qkv, 0, C, Q},
          {"self_attn.k_proj", LoraGroup::qkv, Q, C, KV},
          {"self_attn.v_proj", LoraGroup::qkv, Q + KV, C, KV},
          {"self_attn.o_proj", LoraGroup::o, 0, Q, C},
          {"mlp.gate_proj", LoraGroup::up, 0, C, F},
          {"mlp.up_proj", LoraGroup::up, F, C, F},
          {"mlp.down_proj", LoraGroup::down, 0, F, C}};
}

LoraLayout lora_layout(const ModelConfig& cfg, const LoraSpec& spec) {
  if (spec.rank <= 0)
    throw UserError("lora.rank must be > 0 (got " + std::to_string(spec.rank) + ")");
  if (!std::isfinite(spec.alpha) || spec.alpha <= 0)
    throw UserError("lora.alpha must be a finite number > 0");
  if (spec.target_modules.empty())
    throw UserError("lora.target_modules is empty: name the projections to adapt, or all-linear");
  const std::vector<LoraModule> modules = lora_modules(cfg);
  // A rank above a projection's smaller side adds nothing; above the widest side it is a mistake
  // (or an absurd adapter_config.json) whose buffers would be rank x width per target.
  int64_t widest = 0;
  for (const LoraModule& m : modules) widest = std::max({widest, m.in, m.out});
  if (spec.rank > widest)
    throw UserError("lora.rank (" + std::to_string(spec.rank) +
                    ") is larger than the widest projection of the model (" +
                    std::to_string(widest) +
                    "); a rank above a projection's smaller side adds "
                    "nothing");
  std::string names;
  for (const LoraModule& m : modules) names += (names.empty() ? "" : ", ") + m.path;
  const bool all = spec.target_modules.size() == 1 && spec.target_modules[0] == "all-linear";
  std::vector<bool> chosen(modules.size(), all);
  if (!all) {
    for (const std::string& t : spec.target_modules) {
      bool any = false;
      for (size_t i = 0; i < modules.size(); ++i)
        if (matches(modules[i].path, t)) chosen[i] = any = true;
      if (!any)
        throw UserError("lora.target_modules: '" + excerpt(t) + "' is not a projection of a " +
                        cfg.family + " model (it has " + names + ", or all-linear)");
    }
  }
  LoraLayout out;
  int64_t off = 0;
  auto add = [&](const std::string& name, Shape shape) {
    off = (off + kAlignElems - 1) / kAlignElems * kAlignElems;
    out.params.push_back(ParamInfo{name, shape, off, ParamKind::matrix, {}});
    off += shape.numel();
    return static_cast<int>(out.params.size() - 1);
  };
  for (int64_t l = 0; l < cfg.num_hidden_layers; ++l) {
    for (size_t i = 0; i < modules.size(); ++i) {
      if (!chosen[i]) continue;
      const LoraModule& m = modules[i];
      const std::string base = "base_model.model." + block_prefix(cfg, l) + m.path;
      LoraTarget t{l, m};
      t.a = add(base + ".lora_A.weight", {spec.rank, m.in});
      t.b = add(base + ".lora_B.weight", {m.out, spec.rank});
      out.targets.push_back(t);
    }
  }
  add_saved_modules(cfg, spec, out, off);
  out.flat_size = (off + kAlignElems - 1) / kAlignElems * kAlignElems;
  return out;
}

}  // namespace lmt

// The adapter layout: the projections of each family and the PEFT names of their adapters.
#include "model/lora.h"

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

}  // namespace

double LoraSpec::scaling() const {
  const double r = static_cast<double>(rank);
  return use_rslora ? alpha / std::sqrt(r) : alpha / r;
}

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
    out.params.push_back(ParamInfo{name, shape, off, ParamKind::matrix});
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
  out.flat_size = (off + kAlignElems - 1) / kAlignElems * kAlignElems;
  return out;
}

}  // namespace lmt

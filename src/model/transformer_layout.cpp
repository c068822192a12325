// The parameter layout of every family: Hugging Face names and shapes in one flat buffer, and
// the per-layer index of each role (first norm, q|k|v, ...), so the layer code is family-blind.
// gpt2 keeps its Conv1D weights as Hugging Face stores them ([in, out]); linear() knows.
#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <climits>
#include <cmath>
#include <string_view>
#include <unordered_map>

#include "core/error.h"
#include "core/host_memory.h"
#include "core/rng.h"
#include "model/transformer.h"

namespace lmt {

namespace {

constexpr int64_t kAlignElems = 64;

int64_t align_up(int64_t x, int64_t a) {
  return (x + a - 1) / a * a;
}

}  // namespace

Transformer::Dims Transformer::dims_of(const ModelConfig& c) {
  const int Hq = static_cast<int>(c.num_attention_heads), Hkv = static_cast<int>(c.kv_heads());
  const int D = static_cast<int>(c.head_size());
  const int64_t G = c.traits().gated_mlp ? 2 * c.intermediate_size : c.intermediate_size;
  return Dims{c.hidden_size,
              c.intermediate_size,
              c.vocab_size,
              int64_t{Hq} * D,
              int64_t{Hkv} * D,
              (int64_t{Hq} + 2 * int64_t{Hkv}) * D,
              G,
              Hq,
              Hkv,
              D};
}

std::vector<ParamInfo> Transformer::param_layout(const ModelConfig& cfg, int64_t* flat_size) {
  const ModelConfig& c = cfg;
  c.validate();
  const ModelConfig::Traits t = c.traits();
  const Dims d = dims_of(c);
  const int64_t C = d.C, F = d.F, V = d.V, Q = d.Q, KV = d.KV, D = d.D;
  std::vector<ParamInfo> params;
  int64_t off = 0;
  // `fused` keeps a tensor directly after the previous one (no alignment gap).
  auto add = [&](std::string name, Shape shape, ParamKind kind, bool fused = false) {
    if (!fused) off = align_up(off, kAlignElems);
    params.push_back(ParamInfo{std::move(name), shape, off, kind, {}});
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
  if (flat_size) *flat_size = align_up(off, kAlignElems);
  return params;
}

void Transformer::build_layout() {
  params_ = param_layout(cfg_, &flat_size_);
  std::unordered_map<std::string, int> index;
  for (size_t i = 0; i < params_.size(); ++i) index[params_[i].name] = static_cast<int>(i);
  auto find = [&](const std::string& name) {
    auto it = index.find(name);
    return it == index.end() ? -1 : it->second;
  };
  const bool gpt2 = tr_.conv1d;
  for (int64_t l = 0; l < cfg_.num_hidden_layers; ++l) {
    LayerIndex x;
    if (gpt2) {
      const std::string p = "transformer.h." + std::to_string(l) + ".";
      x.ln1 = find(p + "ln_1.weight"), x.ln1_b = find(p + "ln_1.bias");
      x.qkv = find(p + "attn.c_attn.weight"), x.qkv_b = find(p + "attn.c_attn.bias");
      x.o = find(p + "attn.c_proj.weight"), x.o_b = find(p + "attn.c_proj.bias");
      x.ln2 = find(p + "ln_2.weight"), x.ln2_b = find(p + "ln_2.bias");
      x.up = find(p + "mlp.c_fc.weight"), x.up_b = find(p + "mlp.c_fc.bias");
      x.down = find(p + "mlp.c_proj.weight"), x.down_b = find(p + "mlp.c_proj.bias");
    } else {
      const std::string p = "model.layers." + std::to_string(l) + ".";
      x.ln1 = find(p + "input_layernorm.weight");
      x.qkv = find(p + "self_attn.q_proj.weight");
      x.qkv_b = find(p + "self_attn.q_proj.bias");
      x.q_norm = find(p + "self_attn.q_norm.weight");
      x.k_norm = find(p + "self_attn.k_norm.weight");
      x.o = find(p + "self_attn.o_proj.weight");
      if (tr_.sandwich_norms) {
        x.post_attn = find(p + "post_attention_layernorm.weight");
        x.ln2 = find(p + "pre_feedforward_layernorm.weight");
        x.post_ffw = find(p + "post_feedforward_layernorm.weight");
      } else {
        x.ln2 = find(p + "post_attention_layernorm.weight");
      }
      x.up = find(p + "mlp.gate_proj.weight");
      x.down = find(p + "mlp.down_proj.weight");
    }
    LMT_CHECK(x.ln1 >= 0 && x.qkv >= 0 && x.o >= 0 && x.ln2 >= 0 && x.up >= 0 && x.down >= 0,
              "layer layout incomplete");
    layers_.push_back(x);
  }
  embed_ = find(gpt2 ? "transformer.wte.weight" : "model.embed_tokens.weight");
  pos_embed_ = find("transformer.wpe.weight");
  norm_ = find(gpt2 ? "transformer.ln_f.weight" : "model.norm.weight");
  norm_b_ = find("transformer.ln_f.bias");
  head_ = cfg_.tie_word_embeddings ? embed_ : find("lm_head.weight");
  LMT_CHECK(embed_ >= 0 && norm_ >= 0 && head_ >= 0, "model layout incomplete");
  layer_range_ = layer_ranges(params_, cfg_);
}

void* Transformer::param_ptr(int index, bool grads) const {
  void* base = grads ? run_grads() : run_weights();
  if (saved(index))
    return at(grads ? run_lora_grads() : run_lora(), saved_at_[static_cast<size_t>(index)]);
  if (index < 0 || !base) return nullptr;  // no such parameter, or a frozen base's gradient
  if (!grads && base_staged()) {  // a bf16 base: only the f32 copies are addressed directly
    const int64_t off = small_at_[static_cast<size_t>(index)];
    LMT_CHECK(off >= 0, "param_ptr: " + params_[static_cast<size_t>(index)].name +
                            " of a bf16 base is read through staging");
    return at(small_.data(), off);
  }
  return at(base, params_[static_cast<size_t>(index)].offset);
}

const void* Transformer::base_at(int64_t offset) const {
  return static_cast<const char*>(weights_.data()) +
         static_cast<size_t>(offset) * dtype_size(base_dt_);
}

std::vector<std::pair<int64_t, int64_t>> Transformer::layer_ranges(
    const std::vector<ParamInfo>& params, const ModelConfig& cfg) {
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

namespace {

constexpr int64_t kHeadBlockElems = int64_t{1} << 22;  // 16 MiB of f32 head rows

// Head rows converted at a time and the staging buffer's elements, for a bf16 base.
std::pair<int64_t, int64_t> staging_shape(const ModelConfig& cfg,
                                          const std::vector<std::pair<int64_t, int64_t>>& layers,
                                          int64_t head_rows) {
  const int64_t C = cfg.hidden_size, V = cfg.vocab_size;
  if (head_rows <= 0) head_rows = std::clamp<int64_t>(kHeadBlockElems / C, 1, V);
  int64_t elems = std::min(head_rows, V) * C;
  for (const auto& [begin, end] : layers) elems = std::max(elems, end - begin);
  return {std::min(head_rows, V), elems};
}

// The parameters of a bf16 base kept in f32: those outside the blocks (staged per layer) but
// the token embedding and the head (the final norm, its bias, gpt2's position table).
bool kept_f32(const std::string& name, const ModelConfig& cfg) {
  const bool gpt2 = cfg.traits().conv1d;
  if (name.starts_with(gpt2 ? "transformer.h." : "model.layers.")) return false;
  return name != (gpt2 ? "transformer.wte.weight" : "model.embed_tokens.weight") &&
         name != "lm_head.weight";
}

}  // namespace

size_t Transformer::base_bytes(const ModelConfig& cfg, DType base_dt) {
  int64_t flat = 0;
  const std::vector<ParamInfo> params = param_layout(cfg, &flat);
  if (base_dt != DType::bf16) return static_cast<size_t>(flat) * dtype_size(base_dt);
  const auto [rows, staging] = staging_shape(cfg, layer_ranges(params, cfg), 0);
  int64_t small = 0;
  for (const ParamInfo& p : params)
    if (kept_f32(p.name, cfg)) small += align_up(p.numel(), kAlignElems);
  return static_cast<size_t>(flat) * 2 + static_cast<size_t>(staging + small) * sizeof(float);
}

void Transformer::check_weights_fit(const ModelConfig& cfg, DType dt, uint64_t available) {
  const int64_t n = cfg.parameter_count();  // at most kMaxParameters: the product fits
  const uint64_t bytes = static_cast<uint64_t>(n) * dtype_size(dt);
  if (available == 0 || bytes <= available) return;
  throw UserError(fmt::format(
      "the model's {} parameters need {} of {} weights but this machine has {} of memory: lower "
      "model.num_hidden_layers, model.hidden_size, model.intermediate_size or model.vocab_size "
      "(config.json: num_hidden_layers, hidden_size, intermediate_size, vocab_size)",
      n, gib_text(bytes), dtype_name(dt), gib_text(available)));
}

void Transformer::set_base_dtype(DType dt, int64_t head_block_rows) {
  if (dt == base_dt_) return;
  LMT_CHECK(dt == DType::bf16 && dt_ == DType::f32 && sdt_ == DType::f32 && has_lora(),
            "set_base_dtype: a bf16 base needs an f32 model (not mixed precision) with adapters "
            "(a frozen base)");
  int64_t small = 0;
  small_at_.assign(params_.size(), -1);
  for (size_t i = 0; i < params_.size(); ++i)
    if (kept_f32(params_[i].name, cfg_)) {
      small_at_[i] = small;
      small += align_up(params_[i].numel(), kAlignElems);
    }
  small_ = Buffer(be_, static_cast<size_t>(small) * es_);
  for (size_t i = 0; i < params_.size(); ++i)
    if (small_at_[i] >= 0) {
      void* dst = at(small_.data(), small_at_[i]);
      be_->describe(dst, TensorDesc{params_[i].name, dt_, params_[i].shape.dims()});
      be_->copy(dst, at(weights_.data(), params_[i].offset),
                static_cast<size_t>(params_[i].numel()) * es_);
    }
  Buffer half(be_, static_cast<size_t>(flat_size_) * dtype_size(dt));
  describe_flat(half.data(), params_, dt, "");
  for (const ParamInfo& p : params_)  // per tensor, as the parts of `half` are
    be_->convert(dt, static_cast<char*>(half.data()) + p.offset * dtype_size(dt), dt_,
                 at(weights_.data(), p.offset), p.numel());
  weights_ = std::move(half);
  base_dt_ = dt;
  const auto [rows, elems] = staging_shape(cfg_, layer_range_, head_block_rows);
  head_rows_ = rows;
  staging_ = Buffer(be_, static_cast<size_t>(elems) * es_);
}

std::unique_ptr<Transformer> Transformer::clone(Backend* be) const {
  auto m = std::make_unique<Transformer>(be, cfg_, sdt_);
  if (has_lora()) m->add_lora(lora_spec_, 0);
  if (base_staged()) m->set_base_dtype(base_dt_, head_rows_);
  auto copy = [&](void* dst, const void* src, size_t bytes) {
    if (bytes == 0) return;
    std::vector<uint8_t> host(bytes);
    be_->to_host(host.data(), src, bytes);
    be->from_host(dst, host.data(), bytes);
  };
  copy(m->weights_.data(), weights_.data(), weights_.bytes());
  copy(m->small_.data(), small_.data(), small_.bytes());
  copy(m->lora_weights_.data(), lora_weights_.data(), lora_weights_.bytes());
  return m;
}

void Transformer::add_lora(const LoraSpec& spec, uint64_t seed) {
  LMT_CHECK(!has_lora(), "add_lora: the model has adapters already");
  lora_ = lora_layout(cfg_, spec);
  lora_spec_ = spec;
  layer_lora_.assign(static_cast<size_t>(cfg_.num_hidden_layers), LayerLora{});
  for (size_t i = 0; i < lora_.targets.size(); ++i) {
    const LoraTarget& t = lora_.targets[i];
    LayerLora& l = layer_lora_[static_cast<size_t>(t.layer)];
    std::vector<int>& group = t.module.group == LoraGroup::qkv  ? l.qkv
                              : t.module.group == LoraGroup::o  ? l.o
                              : t.module.group == LoraGroup::up ? l.up
                                                                : l.down;
    group.push_back(static_cast<int>(i));
  }
  const size_t bytes = static_cast<size_t>(lora_.flat_size) * ses_;
  lora_weights_ = Buffer(be_, bytes);
  lora_grads_ = Buffer(be_, bytes);
  describe_flat(lora_weights_.data(), lora_.params, sdt_, "");
  describe_flat(lora_grads_.data(), lora_.params, sdt_, "grad.");
  grads_ = Buffer(), cg_ = Buffer();  // the base is frozen
  if (mixed()) {
    clw_ = Buffer(be_, static_cast<size_t>(lora_.flat_size) * es_);
    clg_ = Buffer(be_, static_cast<size_t>(lora_.flat_size) * es_);
  }
  saved_at_.assign(params_.size(), -1);
  for (const SavedParam& sp : lora_.saved) {  // trained copies start as the base's values
    const ParamInfo& copy = lora_.params[static_cast<size_t>(sp.index)];
    const auto it = std::find_if(params_.begin(), params_.end(),
                                 [&](const ParamInfo& p) { return p.name == sp.base_name; });
    LMT_CHECK(it != params_.end(), "add_lora: no base parameter " + sp.base_name);
    saved_at_[static_cast<size_t>(it - params_.begin())] = copy.offset;
    be_->copy(sat(lora_weights_.data(), copy.offset), sat(weights_.data(), it->offset),
              static_cast<size_t>(copy.numel()) * ses_);
  }
  // Sized for f64, the widest compute dtype, so that set_compute_dtype() may come later.
  grad_sink_ = Buffer(be_, static_cast<size_t>(2 * std::max<int64_t>(dims_.C, dims_.D)) * 8);
  // PEFT: kaiming_uniform_(A, a=sqrt(5)), a bound of 1/sqrt(fan_in); B = 0.
  for (const LoraTarget& t : lora_.targets) {
    const ParamInfo& p = lora_.params[static_cast<size_t>(t.a)];
    const double bound = 1.0 / std::sqrt(static_cast<double>(p.shape[1]));
    std::vector<double> host(static_cast<size_t>(p.numel()));
    const uint64_t stream = (uint64_t{1} << 32) + static_cast<uint64_t>(t.a);
    for (size_t k = 0; k < host.size(); ++k)
      host[k] = (2.0 * uniform01(seed, stream, k) - 1.0) * bound;
    void* dst = sat(lora_weights_.data(), p.offset);
    if (sdt_ == DType::f64) {
      be_->from_host(dst, host.data(), host.size() * sizeof(double));
    } else {
      std::vector<float> f(host.begin(), host.end());
      be_->from_host(dst, f.data(), f.size() * sizeof(float));
    }
  }
}

Transformer::LayerWeights Transformer::layer_weights(int64_t l, bool grads) {
  const LayerIndex& x = layers_[static_cast<size_t>(l)];
  const bool staged = !grads && base_staged();
  const int64_t begin = layer_range_[static_cast<size_t>(l)].first;
  if (staged)
    be_->convert(dt_, staging_.data(), base_dt_, base_at(begin),
                 layer_range_[static_cast<size_t>(l)].second - begin);
  auto p = [&](int i) -> void* {
    if (!staged || i < 0 || saved(i)) return param_ptr(i, grads);
    return at(staging_.data(), params_[static_cast<size_t>(i)].offset - begin);
  };
  LayerWeights w{p(x.ln1),  p(x.ln1_b), p(x.qkv),       p(x.qkv_b),   p(x.q_norm), p(x.k_norm),
                 p(x.o),    p(x.o_b),   p(x.post_attn), p(x.ln2),     p(x.ln2_b),  p(x.up),
                 p(x.up_b), p(x.down),  p(x.down_b),    p(x.post_ffw)};
  if (has_lora()) w.lora = &layer_lora_[static_cast<size_t>(l)];
  return w;
}

void Transformer::init_weights(uint64_t seed) {
  const int64_t L = cfg_.num_hidden_layers;
  const double std = cfg_.initializer_range;
  const double resid_std = std / std::sqrt(2.0 * static_cast<double>(L));
  // A chunk at a time (the same numbers: element k of stream i is a function of (seed, i, k)),
  // so that a large embedding never has a host copy as large as itself.
  constexpr int64_t kChunk = int64_t{1} << 20;
  std::vector<double> host;
  std::vector<float> host_f;
  for (size_t i = 0; i < params_.size(); ++i) {
    const ParamInfo& p = params_[i];
    const bool random = p.kind == ParamKind::matrix || p.kind == ParamKind::embedding;
    const bool resid = p.name.ends_with("o_proj.weight") || p.name.ends_with("down_proj.weight") ||
                       p.name.ends_with("c_proj.weight");
    for (int64_t k = 0; k < p.numel(); k += kChunk) {
      const int64_t n = std::min(kChunk, p.numel() - k);
      host.assign(static_cast<size_t>(n), p.kind == ParamKind::norm ? norm_init() : 0.0);
      if (random)
        fill_normal(host.data(), n, 0.0, resid ? resid_std : std, seed, /*stream=*/i,
                    static_cast<uint64_t>(k));
      void* dst = sat(weights_.data(), p.offset + k);
      if (sdt_ == DType::f64) {
        be_->from_host(dst, host.data(), host.size() * sizeof(double));
      } else {
        host_f.assign(host.begin(), host.end());
        be_->from_host(dst, host_f.data(), host_f.size() * sizeof(float));
      }
    }
  }
}

}  // namespace lmt

// ModelWeights (see model_weights.h): the flat buffers, their compute copies and a bf16 base.
#include "model/model_weights.h"

#include <fmt/format.h>

#include <cmath>

#include "core/error.h"
#include "core/host_memory.h"
#include "core/rng.h"

namespace lmt {

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

ModelWeights::ModelWeights(Backend* be, const ModelConfig& cfg, DType held)
    : be_(be), cfg_(cfg), held_dt_(held), compute_dt_(held), base_dt_(held) {
  LMT_CHECK(held == DType::f32 || held == DType::f64, "Transformer: dtype must be f32 or f64");
  params_ = param_layout(cfg_, &flat_size_);
  layer_range_ = layer_ranges(params_, cfg_);
  weights_ = Buffer(be_, static_cast<size_t>(flat_size_) * dtype_size(held_dt_));
  describe_flat(weights_.data(), params_, held_dt_, "");
}

void* ModelWeights::compute_at(void* base, int64_t elems) const {
  return static_cast<char*>(base) + static_cast<size_t>(elems) * dtype_size(compute_dt_);
}

void* ModelWeights::held_at(void* base, int64_t elems) const {
  return static_cast<char*>(base) + static_cast<size_t>(elems) * dtype_size(held_dt_);
}

void ModelWeights::describe_flat(const void* base, const std::vector<ParamInfo>& params, DType dt,
                                 const std::string& prefix) const {
  // A fused group as one tensor where the backend takes the groups whole: its GEMMs, its bf16
  // copy and its optimizer's update then read one array, not a concatenation of its pieces.
  for (const ParamInfo& p : be_->fused_groups_whole() ? fused_groups(params) : params)
    if (p.numel() > 0)
      be_->describe(static_cast<const char*>(base) + static_cast<size_t>(p.offset) * dtype_size(dt),
                    TensorDesc{prefix + p.name, dt, p.shape.dims()});
}

// ---- mixed precision ----

void ModelWeights::set_compute_dtype(DType dt) {
  if (dt == compute_dt_) return;
  compute_weights_ = Buffer(), compute_grads_ = Buffer(), compute_adapters_ = Buffer(),
  compute_adapter_grads_ = Buffer();
  LMT_CHECK(dt == held_dt_ || (dt == DType::bf16 && held_dt_ == DType::f32 && !base_staged()),
            "set_compute_dtype: mixed precision computes in bf16 from an f32 model whose base is "
            "not held in bf16");
  compute_dt_ = dt;
  if (!mixed()) return;
  const size_t es = dtype_size(dt);
  compute_weights_ = Buffer(be_, static_cast<size_t>(flat_size_) * es);
  if (grads_.data()) compute_grads_ = Buffer(be_, static_cast<size_t>(flat_size_) * es);
  if (has_adapters()) {
    compute_adapters_ = Buffer(be_, static_cast<size_t>(adapters_.flat_size) * es);
    compute_adapter_grads_ = Buffer(be_, static_cast<size_t>(adapters_.flat_size) * es);
  }
}

// Per matrix the layers multiply by, so that a compiling backend converts each on its own (one
// whole-buffer conversion would be one array of every parameter, concatenated and cut apart
// again): each parameter, but the fused groups (q|k|v, gate|up) as one where the backend takes
// them whole, so the GEMM reads the one array it is (converted apart, their copies would be
// concatenated at every read).
void ModelWeights::to_compute() {
  if (!mixed()) return;
  for (const ParamInfo& p : be_->fused_groups_whole() ? fused_groups(params_) : params_)
    if (p.numel() > 0)
      be_->convert(compute_dt_, compute_at(compute_weights_.data(), p.offset), held_dt_,
                   held_at(weights_.data(), p.offset), p.numel());
  for (const ParamInfo& p : adapters_.params)
    be_->convert(compute_dt_, compute_at(compute_adapters_.data(), p.offset), held_dt_,
                 held_at(adapter_weights_.data(), p.offset), p.numel());
}

void ModelWeights::zero_compute_grads() {
  if (!mixed()) return;
  const int64_t n = has_adapters() ? adapters_.flat_size : flat_size_;
  be_->zero(has_adapters() ? compute_adapter_grads_.data() : compute_grads_.data(),
            static_cast<size_t>(n) * dtype_size(compute_dt_));
}

void ModelWeights::fold_compute_grads() {
  if (!mixed()) return;
  const bool lora = has_adapters();
  void* wide = lora ? adapter_grads_.data() : grads_.data();
  void* narrow = lora ? compute_adapter_grads_.data() : compute_grads_.data();
  const std::vector<ParamInfo>& params = lora ? adapters_.params : params_;
  int64_t largest = 0;
  for (const ParamInfo& p : params) largest = std::max(largest, p.numel());
  const Buffer scratch(be_, static_cast<size_t>(largest) * dtype_size(held_dt_));
  for (const ParamInfo& p : params) {
    be_->convert(held_dt_, scratch.data(), compute_dt_, compute_at(narrow, p.offset), p.numel());
    be_->accumulate(held_dt_, held_at(wide, p.offset), scratch.data(), p.numel());
  }
  be_->discard(scratch.data());
}

// ---- gradients and scratch ----

void ModelWeights::ensure_grads() {
  if (has_adapters()) return;
  if (!grads_.data()) {
    grads_ = Buffer(be_, static_cast<size_t>(flat_size_) * dtype_size(held_dt_));
    describe_flat(grads_.data(), params_, held_dt_, "grad.");
  }
  if (mixed() && !compute_grads_.data())
    compute_grads_ = Buffer(be_, static_cast<size_t>(flat_size_) * dtype_size(compute_dt_));
}

void ModelWeights::zero_grads() {
  ensure_grads();
  if (has_adapters()) {
    be_->zero(adapter_grads_.data(),
              static_cast<size_t>(adapters_.flat_size) * dtype_size(held_dt_));
    be_->zero(grad_sink_.data(), grad_sink_.bytes());
  } else {
    be_->zero(grads_.data(), static_cast<size_t>(flat_size_) * dtype_size(held_dt_));
  }
}

void ModelWeights::discard_grads() {
  if (void* g = has_adapters() ? adapter_grads_.data() : grads_.data()) be_->discard(g);
}

void ModelWeights::discard_scratch() {
  for (const Buffer* b : {&staging_, &grad_sink_, &compute_weights_, &compute_grads_,
                          &compute_adapters_, &compute_adapter_grads_})
    if (b->data()) be_->discard(b->data());
}

void* ModelWeights::grad_sink(void* g, int which) const {
  if (g || !has_adapters()) return g;
  const int64_t n = std::max<int64_t>(cfg_.hidden_size, cfg_.head_size());
  return compute_at(grad_sink_.data(), which * n);
}

// ---- addressing ----

void* ModelWeights::param(int index, bool grads) const {
  void* base = grads ? compute_grads() : compute_weights();
  if (trained_copy(index))
    return compute_at(grads ? compute_adapter_grads() : compute_adapters(),
                      trained_copy_at_[static_cast<size_t>(index)]);
  if (index < 0 || !base) return nullptr;  // no such parameter, or a frozen base's gradient
  if (!grads && base_staged()) {  // a bf16 base: only the f32 copies are addressed directly
    const int64_t off = kept_f32_at_[static_cast<size_t>(index)];
    LMT_CHECK(off >= 0, "param: " + params_[static_cast<size_t>(index)].name +
                            " of a bf16 base is read through staging");
    return compute_at(kept_f32_.data(), off);
  }
  return compute_at(base, params_[static_cast<size_t>(index)].offset);
}

const void* ModelWeights::base_param(int index) const {
  return static_cast<const char*>(weights_.data()) +
         static_cast<size_t>(params_[static_cast<size_t>(index)].offset) * dtype_size(base_dt_);
}

void ModelWeights::stage_layer(int64_t l) {
  const auto [begin, end] = layer_range_[static_cast<size_t>(l)];
  be_->convert(
      compute_dt_, staging_.data(), base_dt_,
      static_cast<const char*>(weights_.data()) + static_cast<size_t>(begin) * dtype_size(base_dt_),
      end - begin);
}

void* ModelWeights::staged_param(int index, int64_t l) const {
  if (index < 0 || !staged(index)) return param(index, false);
  return compute_at(staging_.data(), params_[static_cast<size_t>(index)].offset -
                                         layer_range_[static_cast<size_t>(l)].first);
}

void* ModelWeights::adapter(int index) const {
  return compute_at(compute_adapters(), adapters_.params[static_cast<size_t>(index)].offset);
}

void* ModelWeights::adapter_grad(int index) const {
  return compute_at(compute_adapter_grads(), adapters_.params[static_cast<size_t>(index)].offset);
}

// ---- LoRA and a bf16 base ----

void ModelWeights::add_adapters(LoraLayout layout, uint64_t seed) {
  adapters_ = std::move(layout);
  const size_t bytes = static_cast<size_t>(adapters_.flat_size) * dtype_size(held_dt_);
  adapter_weights_ = Buffer(be_, bytes);
  adapter_grads_ = Buffer(be_, bytes);
  describe_flat(adapter_weights_.data(), adapters_.params, held_dt_, "");
  describe_flat(adapter_grads_.data(), adapters_.params, held_dt_, "grad.");
  grads_ = Buffer(), compute_grads_ = Buffer();  // the base is frozen
  if (mixed()) {
    const size_t es = dtype_size(compute_dt_);
    compute_adapters_ = Buffer(be_, static_cast<size_t>(adapters_.flat_size) * es);
    compute_adapter_grads_ = Buffer(be_, static_cast<size_t>(adapters_.flat_size) * es);
  }
  trained_copy_at_.assign(params_.size(), -1);
  for (const SavedParam& sp : adapters_.saved) {  // trained copies start as the base's values
    const ParamInfo& copy = adapters_.params[static_cast<size_t>(sp.index)];
    const auto it = std::find_if(params_.begin(), params_.end(),
                                 [&](const ParamInfo& p) { return p.name == sp.base_name; });
    LMT_CHECK(it != params_.end(), "add_lora: no base parameter " + sp.base_name);
    trained_copy_at_[static_cast<size_t>(it - params_.begin())] = copy.offset;
    be_->copy(held_at(adapter_weights_.data(), copy.offset), held_at(weights_.data(), it->offset),
              static_cast<size_t>(copy.numel()) * dtype_size(held_dt_));
  }
  // Sized for f64, the widest compute dtype, so that set_compute_dtype() may come later.
  grad_sink_ = Buffer(
      be_, static_cast<size_t>(2 * std::max<int64_t>(cfg_.hidden_size, cfg_.head_size())) * 8);
  // PEFT: kaiming_uniform_(A, a=sqrt(5)), a bound of 1/sqrt(fan_in); B = 0.
  for (const LoraTarget& t : adapters_.targets) {
    const ParamInfo& p = adapters_.params[static_cast<size_t>(t.a)];
    const double bound = 1.0 / std::sqrt(static_cast<double>(p.shape[1]));
    std::vector<double> host(static_cast<size_t>(p.numel()));
    const uint64_t stream = (uint64_t{1} << 32) + static_cast<uint64_t>(t.a);
    for (size_t k = 0; k < host.size(); ++k)
      host[k] = (2.0 * uniform01(seed, stream, k) - 1.0) * bound;
    void* dst = held_at(adapter_weights_.data(), p.offset);
    if (held_dt_ == DType::f64) {
      be_->from_host(dst, host.data(), host.size() * sizeof(double));
    } else {
      std::vector<float> f(host.begin(), host.end());
      be_->from_host(dst, f.data(), f.size() * sizeof(float));
    }
  }
}

void ModelWeights::set_base_dtype(DType dt, int64_t head_block_rows) {
  if (dt == base_dt_) return;
  LMT_CHECK(
      dt == DType::bf16 && compute_dt_ == DType::f32 && held_dt_ == DType::f32 && has_adapters(),
      "set_base_dtype: a bf16 base needs an f32 model (not mixed precision) with adapters "
      "(a frozen base)");
  const size_t es = dtype_size(compute_dt_);
  int64_t kept = 0;
  kept_f32_at_.assign(params_.size(), -1);
  for (size_t i = 0; i < params_.size(); ++i)
    if (kept_f32(params_[i].name, cfg_)) {
      kept_f32_at_[i] = kept;
      kept += align_param(params_[i].numel());
    }
  kept_f32_ = Buffer(be_, static_cast<size_t>(kept) * es);
  for (size_t i = 0; i < params_.size(); ++i)
    if (kept_f32_at_[i] >= 0) {
      void* dst = compute_at(kept_f32_.data(), kept_f32_at_[i]);
      be_->describe(dst, TensorDesc{params_[i].name, compute_dt_, params_[i].shape.dims()});
      be_->copy(dst, compute_at(weights_.data(), params_[i].offset),
                static_cast<size_t>(params_[i].numel()) * es);
    }
  Buffer half(be_, static_cast<size_t>(flat_size_) * dtype_size(dt));
  describe_flat(half.data(), params_, dt, "");
  for (const ParamInfo& p : params_)  // per tensor, as the parts of `half` are
    be_->convert(dt, static_cast<char*>(half.data()) + p.offset * dtype_size(dt), compute_dt_,
                 compute_at(weights_.data(), p.offset), p.numel());
  weights_ = std::move(half);
  base_dt_ = dt;
  const auto [rows, elems] = staging_shape(cfg_, layer_range_, head_block_rows);
  head_rows_ = rows;
  staging_ = Buffer(be_, static_cast<size_t>(elems) * es);
}

size_t ModelWeights::base_bytes(const ModelConfig& cfg, DType base_dt) {
  int64_t flat = 0;
  const std::vector<ParamInfo> params = param_layout(cfg, &flat);
  if (base_dt != DType::bf16) return static_cast<size_t>(flat) * dtype_size(base_dt);
  const auto [rows, staging] = staging_shape(cfg, layer_ranges(params, cfg), 0);
  int64_t kept = 0;
  for (const ParamInfo& p : params)
    if (kept_f32(p.name, cfg)) kept += align_param(p.numel());
  return static_cast<size_t>(flat) * 2 + static_cast<size_t>(staging + kept) * sizeof(float);
}

void ModelWeights::check_fits(const ModelConfig& cfg, DType dt, uint64_t available) {
  const int64_t n = cfg.parameter_count();  // at most kMaxParameters: the product fits
  const uint64_t bytes = static_cast<uint64_t>(n) * dtype_size(dt);
  if (available == 0 || bytes <= available) return;
  throw UserError(fmt::format(
      "the model's {} parameters need {} of {} weights but this machine has {} of memory: lower "
      "model.num_hidden_layers, model.hidden_size, model.intermediate_size or model.vocab_size "
      "(config.json: num_hidden_layers, hidden_size, intermediate_size, vocab_size)",
      n, gib_text(bytes), dtype_name(dt), gib_text(available)));
}

// ---- values ----

void ModelWeights::init(uint64_t seed) {
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
      void* dst = held_at(weights_.data(), p.offset + k);
      if (held_dt_ == DType::f64) {
        be_->from_host(dst, host.data(), host.size() * sizeof(double));
      } else {
        host_f.assign(host.begin(), host.end());
        be_->from_host(dst, host_f.data(), host_f.size() * sizeof(float));
      }
    }
  }
}

void ModelWeights::copy_values_from(const ModelWeights& from) {
  auto copy = [&](void* dst, const void* src, size_t bytes) {
    if (bytes == 0) return;
    std::vector<uint8_t> host(bytes);
    from.be_->to_host(host.data(), src, bytes);
    be_->from_host(dst, host.data(), bytes);
  };
  copy(weights_.data(), from.weights_.data(), from.weights_.bytes());
  copy(kept_f32_.data(), from.kept_f32_.data(), from.kept_f32_.bytes());
  copy(adapter_weights_.data(), from.adapter_weights_.data(), from.adapter_weights_.bytes());
}

}  // namespace lmt

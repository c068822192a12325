// The Transformer's passes: construction and settings, the batch and its activation plan, the
// whole model forward and backward, the output head with its loss, and LoRA's adapters. The
// layers themselves are in transformer_layers.cpp, incremental decoding in kv_cache.cpp.
#include "model/transformer.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "model/rope.h"

namespace lmt {

namespace {

Activation activation_of(const std::string& hidden_act) {
  if (hidden_act == "silu") return Activation::silu;
  if (hidden_act == "gelu_pytorch_tanh") return Activation::gelu_tanh;
  if (hidden_act == "relu") return Activation::relu;
  LMT_CHECK(hidden_act == "relu2", "Transformer: unknown hidden_act " + hidden_act);
  return Activation::relu2;
}

const ModelConfig& checked(const ModelConfig& cfg, DType dt) {
  LMT_CHECK(dt == DType::f32 || dt == DType::f64, "Transformer: dtype must be f32 or f64");
  cfg.validate();
  return cfg;
}

}  // namespace

// ---- construction and settings ----

Transformer::Transformer(Backend* be, const ModelConfig& cfg, DType dt)
    : be_(be),
      cfg_(checked(cfg, dt)),
      traits_(cfg_.traits()),
      dims_(ModelDims::of(cfg_)),
      act_(activation_of(cfg_.hidden_act)),
      compute_dt_(dt),
      weights_(be, cfg_, dt) {
  index_layers();
  set_rope(0);  // the gradient buffer comes with the first backward (none for a frozen base)
}

Transformer::~Transformer() = default;

// (Re)makes the RoPE tables for sequences of seq_len positions (only rope_type dynamic cares).
// Tables that follow the length (rope_type dynamic) are written for every batch, even when the
// length is the one before: a training step's writes are then the same every step, as a
// replayed step (Backend::replay) needs.
void Transformer::set_rope(int64_t seq_len) {
  if (traits_.learned_positions) return;
  const bool follows = rope_depends_on_length(cfg_);
  const int64_t len = follows ? seq_len : 0;
  if (len == rope_len_ && !follows) return;
  rope_len_ = len;
  auto make = [&](Rope& r, bool local) {
    const RopeFrequencies f = rope_frequencies(cfg_, local, len);
    std::vector<float> inv(f.inv_freq.begin(), f.inv_freq.end());
    if (!r.inv_freq.data()) {
      r.inv_freq = Buffer(be_, inv.size() * sizeof(float));
      be_->describe(r.inv_freq.data(), TensorDesc{local ? "rope.local_inv_freq" : "rope.inv_freq",
                                                  DType::f32,
                                                  {static_cast<int64_t>(inv.size())}});
    }
    be_->from_host(r.inv_freq.data(), inv.data(), inv.size() * sizeof(float));
    r.attention_factor = f.attention_factor;
  };
  make(rope_global_, false);
  if (cfg_.rope_local_base_freq > 0) make(rope_local_, true);
}

const Transformer::Rope& Transformer::rope_of(int64_t l) const {
  return cfg_.rope_local_base_freq > 0 && cfg_.is_sliding_layer(l) ? rope_local_ : rope_global_;
}

const ParamInfo& Transformer::param(const std::string& name) const {
  for (const auto& p : params())
    if (p.name == name) return p;
  throw UserError("model: no parameter named '" + name + "'");
}

int64_t Transformer::num_params() const {
  int64_t n = 0;
  for (const auto& p : params()) n += p.numel();
  return n;
}

int64_t Transformer::lora_num_params() const {
  int64_t n = 0;
  for (const ParamInfo& p : lora_params()) n += p.numel();
  return n;
}

void* Transformer::at(void* base, int64_t elems) const {
  return static_cast<char*>(base) + static_cast<size_t>(elems) * dtype_size(compute_dt_);
}

void Transformer::set_compute_dtype(DType dt) {
  if (dt == compute_dt_) return;
  plan_.reset();  // activations change size
  weights_.set_compute_dtype(dt);
  compute_dt_ = dt;
}

void Transformer::set_activation_checkpointing(bool on) {
  if (on != settings_.checkpointing) plan_.reset();
  settings_.checkpointing = on;
}

std::string Transformer::activation_bits_unsupported(const ModelConfig& cfg) {
  if (cfg.hidden_act != "relu" && cfg.hidden_act != "relu2")
    return "needs model.hidden_act relu or relu2 (it is " + cfg.hidden_act +
           "): only their derivatives are recovered exactly from a sign bit or their output";
  if (cfg.traits().gated_mlp)
    return "needs a non-gated MLP (the gpt2 family; " + cfg.family +
           "'s is gated): a gated MLP's up-projection gradient needs act(gate)'s value, which "
           "neither a sign bit nor the product act(gate) * up gives back";
  return "";
}

void Transformer::set_activation_bits(int bits) {
  LMT_CHECK(bits == 0 || bits == 1, "Transformer: activation_bits must be 0 or 1");
  if (bits == 1) {
    const std::string why = activation_bits_unsupported(cfg_);
    LMT_CHECK(why.empty(), "Transformer: activation_bits 1 " + why);
  }
  if (bits != settings_.activation_bits) plan_.reset();
  settings_.activation_bits = bits;
}

void Transformer::set_loss_chunk_tokens(int64_t n) {
  if (n != settings_.loss_chunk_tokens) plan_.reset();
  settings_.loss_chunk_tokens = n;
}

void Transformer::set_loss(const LossSpec& loss, int64_t vocab_tile) {
  loss_ = loss;
  settings_.loss_vocab_tile = vocab_tile;
  plan_.reset();  // the scratch of the loss changes size
}

// ---- LoRA ----

void Transformer::add_lora(const LoraSpec& spec, uint64_t seed) {
  LMT_CHECK(!has_lora(), "add_lora: the model has adapters already");
  LoraLayout layout = lora_layout(cfg_, spec);
  lora_spec_ = spec;
  layer_lora_.assign(static_cast<size_t>(cfg_.num_hidden_layers), LayerLora{});
  for (size_t i = 0; i < layout.targets.size(); ++i) {
    const LoraTarget& t = layout.targets[i];
    LayerLora& l = layer_lora_[static_cast<size_t>(t.layer)];
    std::vector<int>& group = t.module.group == LoraGroup::qkv  ? l.qkv
                              : t.module.group == LoraGroup::o  ? l.o
                              : t.module.group == LoraGroup::up ? l.up
                                                                : l.down;
    group.push_back(static_cast<int>(i));
  }
  weights_.add_adapters(std::move(layout), seed);
}

std::unique_ptr<Transformer> Transformer::clone(Backend* be) const {
  auto m = std::make_unique<Transformer>(be, cfg_, dtype());
  if (has_lora()) m->add_lora(lora_spec_, 0);
  if (base_dtype() != dtype()) m->set_base_dtype(base_dtype(), weights_.head_block_rows());
  m->weights_.copy_values_from(weights_);
  return m;
}

// ---- the batch ----

void Transformer::plan(int64_t B, int64_t T) {
  if (plan_ && plan_->B == B && plan_->T == T) return;
  plan_.reset();
  plan_ = std::make_unique<ActivationPlan>(be_, cfg_, compute_dt_, B, T, settings_);
}

void Transformer::upload_batch(const int32_t* ids, const int32_t* labels, int64_t B, int64_t T,
                               const Packing* packing) {
  if (traits_.learned_positions && T > cfg_.max_position_embeddings &&
      !(packing && packing->positions))
    throw UserError("model: sequence length " + std::to_string(T) +
                    " is longer than max_position_embeddings (" +
                    std::to_string(cfg_.max_position_embeddings) + ") of this " + cfg_.family +
                    " model");
  plan(B, T);
  const int64_t N = B * T;
  for (int64_t i = 0; i < N; ++i) {
    if (ids[i] < 0 || ids[i] >= cfg_.vocab_size)
      throw UserError("model: token id " + std::to_string(ids[i]) +
                      " is outside the vocabulary [0, " + std::to_string(cfg_.vocab_size) + ")");
  }
  std::vector<int32_t> pos(static_cast<size_t>(N));
  for (int64_t i = 0; i < N; ++i) pos[i] = static_cast<int32_t>(i % T);
  if (packing && packing->positions) {
    for (int64_t i = 0; i < N; ++i) {
      // Learned positions have a table of max_position_embeddings rows; RoPE takes any position
      // (as transformers does), which training at a length beyond it with packing needs.
      const bool beyond =
          traits_.learned_positions && packing->positions[i] >= cfg_.max_position_embeddings;
      if (packing->positions[i] < 0 || beyond)
        throw UserError("model: position " + std::to_string(packing->positions[i]) +
                        (traits_.learned_positions ? " is outside [0, max_position_embeddings)"
                                                   : " is negative"));
      pos[i] = packing->positions[i];
    }
  }
  packed_ = packing && packing->doc_start;
  set_rope(N > 0 ? *std::max_element(pos.begin(), pos.end()) + 1 : 0);
  be_->from_host(plan_->ids, ids, sizeof(int32_t) * N);
  be_->from_host(plan_->pos, pos.data(), sizeof(int32_t) * N);
  if (packed_) be_->from_host(plan_->doc_start, packing->doc_start, sizeof(int32_t) * N);
  batch_labels_.assign(static_cast<size_t>(N), kIgnoreIndex);
  if (labels) {
    for (int64_t i = 0; i < N; ++i) {
      if (labels[i] != kIgnoreIndex && (labels[i] < 0 || labels[i] >= cfg_.vocab_size))
        throw UserError("model: label " + std::to_string(labels[i]) + " is outside the vocabulary");
      batch_labels_[i] = labels[i];
    }
  }
  be_->from_host(plan_->labels, batch_labels_.data(), sizeof(int32_t) * N);
}

// ---- the whole model and its head ----

void Transformer::forward_trunk() {
  const ActivationPlan& p = *plan_;
  embed(p.res[0], p.ids, p.pos, p.dh, p.N);
  const size_t nc_bytes = static_cast<size_t>(p.N * dims_.C) * dtype_size(compute_dt_);
  for (int64_t l = 0; l < cfg_.num_hidden_layers; ++l) {
    be_->keep({p.res[l], nc_bytes}, p.N);
    layer_forward(l);
  }
  final_norm(p.hf, p.meanf, p.rstdf, p.res[cfg_.num_hidden_layers], p.N);
}

void Transformer::head_forward(const void* h, void* logits, int64_t n) {
  const int64_t C = dims_.C, V = dims_.V;
  weights_.for_head_blocks(head_, [&](const void* w, int64_t v0, int64_t rows) {
    be_->gemm(compute_dt_, false, true, n, rows, C, 1.0, h, C, w, C, 0.0, at(logits, v0), V);
  });
}

void Transformer::head_backward_input(const void* dlogits, void* dh, int64_t n) {
  const int64_t C = dims_.C, V = dims_.V;
  weights_.for_head_blocks(head_, [&](const void* w, int64_t v0, int64_t rows) {
    be_->gemm(compute_dt_, false, false, n, C, rows, 1.0, at(const_cast<void*>(dlogits), v0), V, w,
              C, v0 == 0 ? 0.0 : 1.0, dh, C);
  });
}

// The chunked cross-entropy head: logits exist for `chunk` tokens at a time (Backend::head_loss).
// With backward, the chunks' gradients flow into dh (d loss / d final norm output) and the head's
// weight gradient. The losses add to device scalars, and every chunk runs whatever its labels (no
// decision on the data): the sums are read when their owner wants them, as a compiled step
// returns them. A head held in bf16 (a LoRA base) goes through its blocks of converted rows here
// instead.
int64_t Transformer::head_loss(bool backward, double grad_scale, LossSums& sums) {
  const ActivationPlan& p = *plan_;
  LMT_CHECK(sums.plain() == loss_.plain(), "Transformer: loss sums of another objective");
  HeadLossArgs a;
  a.N = p.N, a.C = cfg_.hidden_size, a.V = dims_.V, a.chunk = p.chunk;
  a.ignore_index = kIgnoreIndex;
  a.grad_scale = backward ? grad_scale : 0.0;
  a.grad_scale_at = backward ? grad_scale_.as<double>() : nullptr;
  a.softcap = cfg_.final_logit_softcapping;
  a.loss = loss_;
  a.vocab_tile = settings_.loss_vocab_tile;
  double* ce = loss_.plain() ? nullptr : sums.cross_entropy();
  if (!weights_.staged(head_))
    be_->head_loss(compute_dt_, a, p.hf, param_ptr(head_, false), p.labels, sums.objective(), p.dh,
                   param_ptr(head_, true), p.logits, p.losses, ce);
  else
    staged_head_loss(a, sums.objective(), ce);
  return labelled_tokens();
}

int64_t Transformer::labelled_tokens() const {
  int64_t tokens = 0;
  for (int32_t label : batch_labels_) tokens += label != kIgnoreIndex;
  return tokens;
}

// Backend::head_loss's chunks with the head's rows converted from the bf16 base a block at a time
// (a frozen head: no weight gradient).
void Transformer::staged_head_loss(const HeadLossArgs& a, double* loss_sum, double* ce_sum) {
  LMT_CHECK(!a.cut(), "the cut cross-entropy needs the head in the model's dtype");
  const ActivationPlan& p = *plan_;
  const DType stat = compute_dt_ == DType::f64 ? DType::f64 : DType::f32;
  void* ce = ce_sum ? static_cast<char*>(p.losses) + p.chunk * dtype_size(stat) : nullptr;
  for (int64_t s = 0; s < a.N; s += a.chunk) {
    const int64_t n = std::min(a.chunk, a.N - s);
    head_forward(at(p.hf, s * a.C), p.logits, n);
    be_->cross_entropy(compute_dt_, p.logits, p.losses, p.labels + s, n, a.V, a.ignore_index,
                       a.grad_scale, a.softcap, a.loss, ce);
    be_->sum(stat, loss_sum, p.losses, n);
    if (ce_sum) be_->sum(stat, ce_sum, ce, n);
    if (a.grad_scale != 0) head_backward_input(p.logits, at(p.dh, s * a.C), n);
  }
}

// The head's per-token scores (Backend::head_logprobs), chunked as head_loss chunks the loss; a
// head held in bf16 (a LoRA base) goes through its blocks of converted rows, a chunk of logits at a
// time, and token_logprobs.
void Transformer::head_logprobs(void* logprobs, void* greedy) {
  const ActivationPlan& p = *plan_;
  HeadLossArgs a;
  a.N = p.N, a.C = cfg_.hidden_size, a.V = dims_.V, a.chunk = p.chunk;
  a.ignore_index = kIgnoreIndex;
  a.softcap = cfg_.final_logit_softcapping;
  a.vocab_tile = settings_.loss_vocab_tile;
  if (!weights_.staged(head_)) {
    be_->head_logprobs(compute_dt_, a, p.hf, param_ptr(head_, false), p.labels, logprobs, greedy,
                       p.logits);
    return;
  }
  LMT_CHECK(!a.cut(), "the vocabulary tiles need the head in the model's dtype");
  for (int64_t s = 0; s < a.N; s += a.chunk) {
    const int64_t n = std::min(a.chunk, a.N - s);
    head_forward(at(p.hf, s * a.C), p.logits, n);
    be_->token_logprobs(compute_dt_, p.logits, p.labels + s, n, a.V, a.ignore_index, a.softcap,
                        stat_at(logprobs, s), static_cast<int32_t*>(greedy) + s);
  }
}

void Transformer::discard_scratch() {
  for (const Buffer* b : {&plan_->arena, &lora_scratch_, &grad_scale_, &dropout_key_})
    if (b->data()) be_->discard(b->data());
  weights_.discard_scratch();  // staging, the gradient sink, the compute copies
}

// ---- passes ----

int64_t Transformer::forward_backward(const int32_t* ids, const int32_t* labels, int64_t B,
                                      int64_t T, double grad_scale, LossSums& sums,
                                      const Packing* packing) {
  weights_.ensure_grads();
  write_inputs(ids, labels, B, T, grad_scale, packing);
  weights_.to_compute();  // mixed precision: the compute copies of this pass
  weights_.zero_compute_grads();
  struct Training {  // LoRA dropout applies inside this call only, whatever leaves it
    bool& on;
    explicit Training(bool& f) : on(f) { on = true; }
    ~Training() { on = false; }
  } training(training_);
  forward_trunk();
  const int64_t tokens = head_loss(true, grad_scale, sums);
  const ActivationPlan& p = *plan_;
  const int64_t L = cfg_.num_hidden_layers, C = cfg_.hidden_size;
  const size_t nc_bytes = static_cast<size_t>(p.N * C) * dtype_size(compute_dt_);
  be_->zero(p.dx, nc_bytes);
  norm_backward(param_ptr(norm_, false), param_ptr(norm_, true), param_ptr(norm_b_, true), p.dx,
                p.dh, p.res[L], p.meanf, p.rstdf, p.N);
  for (int64_t l = L - 1; l >= 0; --l) {
    if (settings_.checkpointing) {  // recompute this layer's working set from its input first
      be_->recompute_from({{p.res[l], nc_bytes}}, {p.dx, nc_bytes});
      layer_forward(l);
    }
    layer_backward(l);
    be_->keep({p.dx, nc_bytes}, p.N);
  }
  embed_backward(p.dx, p.ids, p.pos, p.N);
  weights_.fold_compute_grads();
  discard_scratch();
  return tokens;
}

int64_t Transformer::write_inputs(const int32_t* ids, const int32_t* labels, int64_t B, int64_t T,
                                  double grad_scale, const Packing* packing) {
  LMT_CHECK(grad_scale != 0.0, "forward_backward needs a non-zero grad_scale");
  upload_batch(ids, labels, B, T, packing);
  auto device = [&](Buffer& b, const char* name, DType dt, std::vector<int64_t> shape) {
    if (b.data()) return;
    const TensorDesc desc{name, dt, std::move(shape)};
    b = Buffer(be_, desc.bytes());
    be_->describe(b.data(), desc);
  };
  device(grad_scale_, "loss.grad_scale", DType::f64, {});
  be_->from_host(grad_scale_.data(), &grad_scale, sizeof grad_scale);
  if (has_lora() && lora_spec_.dropout > 0) {
    device(dropout_key_, "dropout.key", DType::i32, {4});  // u64 {seed, stream} as its words
    const uint64_t key[2] = {dropout_seed_, dropout_micro_ << 24};
    be_->from_host(dropout_key_.data(), key, sizeof key);
  }
  return labelled_tokens();
}

int64_t Transformer::forward_loss(const int32_t* ids, const int32_t* labels, int64_t B, int64_t T,
                                  LossSums& sums, const Packing* packing) {
  upload_batch(ids, labels, B, T, packing);
  weights_.to_compute();
  forward_trunk();
  const int64_t tokens = head_loss(false, 0.0, sums);
  discard_scratch();
  return tokens;
}

LossSum batch_loss(Transformer& model, const int32_t* ids, const int32_t* labels, int64_t B,
                   int64_t T, const Transformer::Packing* packing) {
  LossSums sums = model.make_loss_sums();
  sums.zero();
  const int64_t tokens = model.forward_loss(ids, labels, B, T, sums, packing);
  return sums.read(tokens);
}

Transformer::TokenScores Transformer::forward_token_scores(const int32_t* ids,
                                                           const int32_t* labels, int64_t B,
                                                           int64_t T, const Packing* packing) {
  upload_batch(ids, labels, B, T, packing);
  weights_.to_compute();
  forward_trunk();
  const int64_t N = plan_->N;
  // The results outlive the pass's scratch: their own buffers, read once the pass is queued (a
  // compiling backend runs the whole pass as one program at the first read).
  Buffer logprobs(be_, static_cast<size_t>(N) * stat_size(compute_dt_));
  Buffer greedy(be_, static_cast<size_t>(N) * sizeof(int32_t));
  head_logprobs(logprobs.data(), greedy.data());
  discard_scratch();
  TokenScores out;
  out.logprob.resize(static_cast<size_t>(N));
  out.greedy.resize(static_cast<size_t>(N));
  if (N == 0) return out;
  std::vector<int32_t> flags(static_cast<size_t>(N));
  be_->to_host(flags.data(), greedy.data(), flags.size() * sizeof(int32_t));
  if (compute_dt_ == DType::f64) {
    be_->to_host(out.logprob.data(), logprobs.data(), out.logprob.size() * sizeof(double));
  } else {
    std::vector<float> lp(static_cast<size_t>(N));
    be_->to_host(lp.data(), logprobs.data(), lp.size() * sizeof(float));
    std::copy(lp.begin(), lp.end(), out.logprob.begin());
  }
  for (size_t i = 0; i < flags.size(); ++i) out.greedy[i] = flags[i] != 0;
  return out;
}

std::vector<double> Transformer::host_logits(const void* logits, int64_t n) const {
  std::vector<double> out(static_cast<size_t>(n));
  if (compute_dt_ == DType::f64) {
    be_->to_host(out.data(), logits, out.size() * 8);
  } else {
    std::vector<uint8_t> raw(out.size() * dtype_size(compute_dt_));
    be_->to_host(raw.data(), logits, raw.size());
    for (int64_t i = 0; i < n; ++i)
      out[static_cast<size_t>(i)] = load_element(compute_dt_, raw.data(), i);
  }
  const double cap = cfg_.final_logit_softcapping;  // gemma2
  if (cap > 0)
    for (double& z : out) z = cap * std::tanh(z / cap);
  return out;
}

std::vector<double> Transformer::forward_logits(const int32_t* ids, int64_t B, int64_t T,
                                                const Packing* packing) {
  upload_batch(ids, nullptr, B, T, packing);
  weights_.to_compute();
  forward_trunk();
  const ActivationPlan& p = *plan_;
  const int64_t V = cfg_.vocab_size;
  Buffer logits(be_, static_cast<size_t>(p.N * V) * dtype_size(compute_dt_));
  head_forward(p.hf, logits.data(), p.N);
  discard_scratch();
  return host_logits(logits.data(), p.N * V);
}

}  // namespace lmt

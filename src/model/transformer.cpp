#include "model/transformer.h"

#include <cmath>
#include <cstring>

#include "core/error.h"
#include "core/rng.h"
#include "model/rope.h"

namespace lmt {

struct Transformer::Plan {
  int64_t B = 0, T = 0, N = 0;
  bool checkpointing = false;
  Buffer arena;
  size_t bytes = 0;
  int32_t* ids = nullptr;     // [N]
  int32_t* labels = nullptr;  // [N]
  int32_t* pos = nullptr;     // [N]
  std::vector<int32_t> host_labels;
  std::vector<void*> res;       // L + 1 residual streams [N, C]; res[l] is layer l's input
  std::vector<LayerActs> sets;  // L sets, or 1 shared set with checkpointing
  void* hf = nullptr;           // [N, C] final norm output
  void* rstdf = nullptr;        // [N]
  void* dx = nullptr;           // [N, C] gradient of the residual stream
  void* dh = nullptr;           // [N, C] gradient of a norm output
  void* dqkv = nullptr;         // [N, Q + 2 KV]
  void* datt = nullptr;         // [N, Q]
  void* dgu = nullptr;          // [N, 2F]
  void* da = nullptr;           // [N, F]
  void* logits = nullptr;       // [chunk, V]
  void* losses = nullptr;       // [chunk]
  int64_t chunk = 0;
};

namespace {

constexpr int64_t kAlignElems = 64;

int64_t align_up(int64_t x, int64_t a) {
  return (x + a - 1) / a * a;
}

// Hands out 64-byte aligned regions of one arena; a dry run (base 0) only measures.
class ArenaCarver {
 public:
  explicit ArenaCarver(uintptr_t base) : base_(base) {}
  void* take(size_t bytes) {
    size_t off = used_;
    used_ += (bytes + 63) / 64 * 64;
    return reinterpret_cast<void*>(base_ + off);
  }
  size_t used() const { return used_; }

 private:
  uintptr_t base_;
  size_t used_ = 0;
};

}  // namespace

Transformer::Transformer(Backend* be, const ModelConfig& cfg, DType dt)
    : be_(be), cfg_(cfg), dt_(dt), es_(dtype_size(dt)) {
  LMT_CHECK(dt == DType::f32 || dt == DType::f64, "Transformer: dtype must be f32 or f64");
  cfg_.validate();
  if (cfg_.family == "qwen2") cfg_.attention_bias = true;  // a family trait, also from YAML
  const int Hq = static_cast<int>(cfg_.num_attention_heads),
            Hkv = static_cast<int>(cfg_.kv_heads());
  const int D = static_cast<int>(cfg_.head_size());
  dims_ = Dims{cfg_.hidden_size,
               cfg_.intermediate_size,
               cfg_.vocab_size,
               int64_t{Hq} * D,
               int64_t{Hkv} * D,
               int64_t{Hq + 2 * Hkv} * D,
               Hq,
               Hkv,
               D};
  build_layout();
  weights_ = Buffer(be_, static_cast<size_t>(flat_size_) * es_);
  grads_ = Buffer(be_, static_cast<size_t>(flat_size_) * es_);
  // RoPE inverse frequencies, as Hugging Face computes them (theta^(-2i/d), then rope scaling).
  const std::vector<double> inv_d = rope_frequencies(cfg_, false, 0).inv_freq;
  std::vector<float> inv(inv_d.begin(), inv_d.end());
  inv_freq_ = Buffer(be_, inv.size() * sizeof(float));
  be_->from_host(inv_freq_.data(), inv.data(), inv.size() * sizeof(float));
}

Transformer::~Transformer() = default;

void Transformer::build_layout() {
  params_ = param_layout(cfg_, &flat_size_);
}

std::vector<ParamInfo> Transformer::param_layout(const ModelConfig& cfg, int64_t* flat_size) {
  std::vector<ParamInfo> params;
  ModelConfig c = cfg;
  c.validate();
  if (c.family == "qwen2") c.attention_bias = true;
  const int64_t C = c.hidden_size, F = c.intermediate_size, V = c.vocab_size;
  const int64_t Q = c.num_attention_heads * c.head_size(), KV = c.kv_heads() * c.head_size();
  int64_t off = 0;
  auto add = [&](std::string name, Shape shape, ParamKind kind, bool fused_with_previous = false) {
    if (!fused_with_previous) off = align_up(off, kAlignElems);
    params.push_back(ParamInfo{std::move(name), shape, off, kind});
    off += shape.numel();
  };
  add("model.embed_tokens.weight", {V, C}, ParamKind::embedding);
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    add(p + "input_layernorm.weight", {C}, ParamKind::norm);
    add(p + "self_attn.q_proj.weight", {Q, C}, ParamKind::matrix);
    add(p + "self_attn.k_proj.weight", {KV, C}, ParamKind::matrix, true);
    add(p + "self_attn.v_proj.weight", {KV, C}, ParamKind::matrix, true);
    add(p + "self_attn.o_proj.weight", {C, Q}, ParamKind::matrix);
    add(p + "post_attention_layernorm.weight", {C}, ParamKind::norm);
    add(p + "mlp.gate_proj.weight", {F, C}, ParamKind::matrix);
    add(p + "mlp.up_proj.weight", {F, C}, ParamKind::matrix, true);
    add(p + "mlp.down_proj.weight", {C, F}, ParamKind::matrix);
    if (c.attention_bias) {  // last in the layer, so the indices above stay fixed
      add(p + "self_attn.q_proj.bias", {Q}, ParamKind::bias);
      add(p + "self_attn.k_proj.bias", {KV}, ParamKind::bias, true);
      add(p + "self_attn.v_proj.bias", {KV}, ParamKind::bias, true);
    }
  }
  add("model.norm.weight", {C}, ParamKind::norm);
  if (!c.tie_word_embeddings) add("lm_head.weight", {V, C}, ParamKind::matrix);
  if (flat_size) *flat_size = align_up(off, kAlignElems);
  return params;
}

size_t Transformer::activation_bytes(const ModelConfig& cfg, DType dt, int64_t B, int64_t T,
                                     bool checkpointing, int64_t loss_chunk_tokens) {
  ModelConfig c = cfg;
  c.validate();
  const int64_t N = B * T, L = c.num_hidden_layers;
  const int64_t C = c.hidden_size, F = c.intermediate_size;
  const int64_t Hq = c.num_attention_heads, Q = Hq * c.head_size();
  const int64_t QKV = Q + 2 * c.kv_heads() * c.head_size();
  const int64_t chunk = std::min<int64_t>(std::max<int64_t>(loss_chunk_tokens, 1), N);
  const size_t es = dtype_size(dt);
  ArenaCarver a(0);
  auto e = [&](int64_t n) { return static_cast<size_t>(n) * es; };
  a.take(3 * sizeof(int32_t) * N);
  for (int64_t l = 0; l <= L; ++l) a.take(e(N * C));
  const int64_t sets = checkpointing ? 1 : L;
  for (int64_t s = 0; s < sets; ++s) {
    a.take(e(N * C));
    a.take(e(N));
    a.take(e(N * QKV));
    a.take(e(N * Q));
    a.take(e(B * Hq * T));
    a.take(e(N * C));
    a.take(e(N * C));
    a.take(e(N));
    a.take(e(N * 2 * F));
    a.take(e(N * F));
  }
  a.take(e(N * C));
  a.take(e(N));
  a.take(e(N * C));
  a.take(e(N * C));
  a.take(e(N * QKV));
  a.take(e(N * Q));
  a.take(e(N * 2 * F));
  a.take(e(N * F));
  a.take(e(chunk * c.vocab_size));
  a.take(e(chunk));
  return a.used();
}

const ParamInfo& Transformer::param(const std::string& name) const {
  for (const auto& p : params_)
    if (p.name == name) return p;
  throw UserError("model: no parameter named '" + name + "'");
}

int64_t Transformer::num_params() const {
  int64_t n = 0;
  for (const auto& p : params_) n += p.numel();
  return n;
}

void* Transformer::at(void* base, int64_t elems) const {
  return static_cast<char*>(base) + static_cast<size_t>(elems) * es_;
}

Transformer::LayerWeights Transformer::layer_weights(int64_t l, bool grads) const {
  void* base = grads ? grads_.data() : weights_.data();
  // Parameters of layer l start at index 1 + per_layer() l in params_ (after the embedding).
  const size_t i = 1 + per_layer() * static_cast<size_t>(l);
  return LayerWeights{at(base, params_[i].offset),
                      at(base, params_[i + 1].offset),
                      at(base, params_[i + 4].offset),
                      at(base, params_[i + 5].offset),
                      at(base, params_[i + 6].offset),
                      at(base, params_[i + 8].offset),
                      cfg_.attention_bias ? at(base, params_[i + 9].offset) : nullptr};
}

Transformer::LayerActs Transformer::layer_acts(int64_t l) const {
  return plan_->sets[plan_->checkpointing ? 0 : static_cast<size_t>(l)];
}

void Transformer::init_weights(uint64_t seed) {
  const int64_t L = cfg_.num_hidden_layers;
  const double std = cfg_.initializer_range;
  const double resid_std = std / std::sqrt(2.0 * static_cast<double>(L));
  std::vector<double> host;
  for (size_t i = 0; i < params_.size(); ++i) {
    const ParamInfo& p = params_[i];
    host.assign(static_cast<size_t>(p.numel()), 1.0);
    if (p.kind == ParamKind::bias) host.assign(host.size(), 0.0);
    if (p.kind != ParamKind::norm && p.kind != ParamKind::bias) {
      const bool resid = p.name.ends_with("o_proj.weight") || p.name.ends_with("down_proj.weight");
      fill_normal(host.data(), p.numel(), 0.0, resid ? resid_std : std, seed, /*stream=*/i);
    }
    void* dst = at(weights_.data(), p.offset);
    if (dt_ == DType::f64) {
      be_->from_host(dst, host.data(), host.size() * sizeof(double));
    } else {
      std::vector<float> f(host.begin(), host.end());
      be_->from_host(dst, f.data(), f.size() * sizeof(float));
    }
  }
}

void Transformer::zero_grads() {
  be_->zero(grads_.data(), static_cast<size_t>(flat_size_) * es_);
}

void Transformer::set_activation_checkpointing(bool on) {
  if (on != checkpointing_) plan_.reset();
  checkpointing_ = on;
}

size_t Transformer::activation_bytes(int64_t B, int64_t T) const {
  return activation_bytes(cfg_, dt_, B, T, checkpointing_, loss_chunk_);
}

void Transformer::plan(int64_t B, int64_t T) {
  if (plan_ && plan_->B == B && plan_->T == T) return;
  plan_.reset();
  auto p = std::make_unique<Plan>();
  p->B = B;
  p->T = T;
  p->N = B * T;
  p->checkpointing = checkpointing_;
  p->bytes = activation_bytes(B, T);
  p->arena = Buffer(be_, p->bytes);
  const int64_t N = p->N, L = cfg_.num_hidden_layers;
  const auto& [C, F, V, Q, KV, QKV, Hq, Hkv, D] = dims_;
  p->chunk = std::min<int64_t>(std::max<int64_t>(loss_chunk_, 1), N);
  // Same order of take() calls as activation_bytes().
  ArenaCarver c(reinterpret_cast<uintptr_t>(p->arena.data()));
  auto e = [&](int64_t n) { return static_cast<size_t>(n) * es_; };
  auto* ints = static_cast<int32_t*>(c.take(3 * sizeof(int32_t) * N));
  p->ids = ints;
  p->labels = ints + N;
  p->pos = ints + 2 * N;
  for (int64_t l = 0; l <= L; ++l) p->res.push_back(c.take(e(N * C)));
  const int64_t sets = checkpointing_ ? 1 : L;
  for (int64_t s = 0; s < sets; ++s) {
    LayerActs a{};
    a.h1 = c.take(e(N * C));
    a.rstd1 = c.take(e(N));
    a.qkv = c.take(e(N * QKV));
    a.att = c.take(e(N * Q));
    a.lse = c.take(e(B * Hq * T));
    a.x_mid = c.take(e(N * C));
    a.h2 = c.take(e(N * C));
    a.rstd2 = c.take(e(N));
    a.gu = c.take(e(N * 2 * F));
    a.a = c.take(e(N * F));
    p->sets.push_back(a);
  }
  p->hf = c.take(e(N * C));
  p->rstdf = c.take(e(N));
  p->dx = c.take(e(N * C));
  p->dh = c.take(e(N * C));
  p->dqkv = c.take(e(N * QKV));
  p->datt = c.take(e(N * Q));
  p->dgu = c.take(e(N * 2 * F));
  p->da = c.take(e(N * F));
  p->logits = c.take(e(p->chunk * cfg_.vocab_size));
  p->losses = c.take(e(p->chunk));
  LMT_CHECK(c.used() == p->bytes, "activation plan size mismatch");
  plan_ = std::move(p);
}

void Transformer::upload_batch(const int32_t* ids, const int32_t* labels, int64_t B, int64_t T,
                               const Packing* packing) {
  plan(B, T);
  const int64_t N = B * T;
  for (int64_t i = 0; i < N; ++i) {
    if (ids[i] < 0 || ids[i] >= cfg_.vocab_size)
      throw UserError("model: token id " + std::to_string(ids[i]) +
                      " is outside the vocabulary [0, " + std::to_string(cfg_.vocab_size) + ")");
  }
  std::vector<int32_t> pos(static_cast<size_t>(N));
  for (int64_t i = 0; i < N; ++i) pos[i] = static_cast<int32_t>(i % T);
  doc_start_.clear();
  if (packing && packing->positions) {
    for (int64_t i = 0; i < N; ++i) {
      if (packing->positions[i] < 0 || packing->positions[i] >= cfg_.max_position_embeddings)
        throw UserError("model: position " + std::to_string(packing->positions[i]) +
                        " is outside [0, max_position_embeddings)");
      pos[i] = packing->positions[i];
    }
  }
  if (packing && packing->doc_start) doc_start_.assign(packing->doc_start, packing->doc_start + N);
  be_->from_host(plan_->ids, ids, sizeof(int32_t) * N);
  be_->from_host(plan_->pos, pos.data(), sizeof(int32_t) * N);
  plan_->host_labels.assign(static_cast<size_t>(N), kIgnoreIndex);
  if (labels) {
    for (int64_t i = 0; i < N; ++i) {
      if (labels[i] != kIgnoreIndex && (labels[i] < 0 || labels[i] >= cfg_.vocab_size))
        throw UserError("model: label " + std::to_string(labels[i]) + " is outside the vocabulary");
      plan_->host_labels[i] = labels[i];
    }
  }
  be_->from_host(plan_->labels, plan_->host_labels.data(), sizeof(int32_t) * N);
}

// Norm, fused q|k|v projection and RoPE of one block: a.h1, a.rstd1 and a.qkv from x[N, C].
void Transformer::block_qkv(const LayerWeights& w, const LayerActs& a, const void* x,
                            const int32_t* pos, int64_t N) {
  const auto& [C, F, V, Q, KV, QKV, Hq, Hkv, D] = dims_;
  be_->rmsnorm_forward(dt_, a.h1, a.rstd1, x, w.ln1, N, C, cfg_.rms_norm_eps, 0.0);
  be_->gemm(dt_, false, true, N, QKV, C, 1.0, a.h1, C, w.qkv, C, 0.0, a.qkv, QKV);
  if (w.qkv_bias) be_->add_bias(dt_, a.qkv, w.qkv_bias, N, QKV);
  const auto* inv = inv_freq_.as<float>();
  be_->rope(dt_, a.qkv, pos, inv, N, QKV, Hq, D, D, 1.0, false);
  be_->rope(dt_, at(a.qkv, Q), pos, inv, N, QKV, Hkv, D, D, 1.0, false);
}

// The rest of the block: attention of a.qkv's queries over keys k and values v (as args lays
// them out), o_proj, residual, MLP. y[N, C] may be x itself: x is last read before y is written.
void Transformer::block_rest(const LayerWeights& w, const LayerActs& a, const void* x, void* y,
                             int64_t N, const AttentionArgs& args, const void* k, const void* v) {
  const auto& [C, F, V, Q, KV, QKV, Hq, Hkv, D] = dims_;
  be_->attention_forward(dt_, args, a.att, a.lse, a.qkv, k, v);
  be_->gemm(dt_, false, true, N, C, Q, 1.0, a.att, Q, w.o, Q, 0.0, a.x_mid, C);
  be_->accumulate(dt_, a.x_mid, x, N * C);
  be_->rmsnorm_forward(dt_, a.h2, a.rstd2, a.x_mid, w.ln2, N, C, cfg_.rms_norm_eps, 0.0);
  be_->gemm(dt_, false, true, N, 2 * F, C, 1.0, a.h2, C, w.gate_up, C, 0.0, a.gu, 2 * F);
  be_->glu_forward(dt_, Activation::silu, a.a, a.gu, N, F);
  be_->gemm(dt_, false, true, N, C, F, 1.0, a.a, F, w.down, F, 0.0, y, C);
  be_->accumulate(dt_, y, a.x_mid, N * C);
}

void Transformer::layer_forward(int64_t l) {
  const Plan& p = *plan_;
  const LayerWeights w = layer_weights(l, false);
  const LayerActs a = layer_acts(l);
  block_qkv(w, a, p.res[l], p.pos, p.N);
  block_rest(w, a, p.res[l], p.res[l + 1], p.N, attention_args(p.B, p.T), at(a.qkv, dims_.Q),
             at(a.qkv, dims_.Q + dims_.KV));
}

// On entry p.dx holds d loss / d res[l+1]; on exit, d loss / d res[l].
void Transformer::layer_backward(int64_t l) {
  const Plan& p = *plan_;
  const LayerWeights w = layer_weights(l, false);
  const LayerWeights g = layer_weights(l, true);
  const LayerActs a = layer_acts(l);
  const int64_t N = p.N;
  const auto& [C, F, V, Q, KV, QKV, Hq, Hkv, D] = dims_;

  // MLP branch: y = x_mid + down(act(gate) * up)
  be_->gemm(dt_, false, false, N, F, C, 1.0, p.dx, C, w.down, F, 0.0, p.da, F);
  be_->gemm(dt_, true, false, C, F, N, 1.0, p.dx, C, a.a, F, 1.0, g.down, F);
  be_->glu_backward(dt_, Activation::silu, p.dgu, p.da, a.gu, N, F);
  be_->gemm(dt_, true, false, 2 * F, C, N, 1.0, p.dgu, 2 * F, a.h2, C, 1.0, g.gate_up, C);
  be_->gemm(dt_, false, false, N, C, 2 * F, 1.0, p.dgu, 2 * F, w.gate_up, C, 0.0, p.dh, C);
  be_->rmsnorm_backward(dt_, p.dx, g.ln2, p.dh, a.x_mid, w.ln2, a.rstd2, N, C, 0.0);
  // Attention branch: x_mid = x + o_proj(attention(rope(q), rope(k), v))
  be_->gemm(dt_, false, false, N, Q, C, 1.0, p.dx, C, w.o, Q, 0.0, p.datt, Q);
  be_->gemm(dt_, true, false, C, Q, N, 1.0, p.dx, C, a.att, Q, 1.0, g.o, Q);
  AttentionArgs args = attention_args(p.B, p.T);
  be_->attention_backward(dt_, args, p.dqkv, at(p.dqkv, Q), at(p.dqkv, Q + KV), p.datt, a.qkv,
                          at(a.qkv, Q), at(a.qkv, Q + KV), a.att, a.lse);
  const auto* inv = inv_freq_.as<float>();
  be_->rope(dt_, p.dqkv, p.pos, inv, N, QKV, Hq, D, D, 1.0, true);
  be_->rope(dt_, at(p.dqkv, Q), p.pos, inv, N, QKV, Hkv, D, D, 1.0, true);
  if (g.qkv_bias) be_->bias_backward(dt_, g.qkv_bias, p.dqkv, N, QKV);
  be_->gemm(dt_, true, false, QKV, C, N, 1.0, p.dqkv, QKV, a.h1, C, 1.0, g.qkv, C);
  be_->gemm(dt_, false, false, N, C, QKV, 1.0, p.dqkv, QKV, w.qkv, C, 0.0, p.dh, C);
  be_->rmsnorm_backward(dt_, p.dx, g.ln1, p.dh, p.res[l], w.ln1, a.rstd1, N, C, 0.0);
}

AttentionArgs Transformer::attention_args(int64_t B, int64_t T) const {
  const Dims& d = dims_;
  AttentionArgs a;
  a.batch = B;
  a.q_len = T;
  a.kv_len = T;
  a.num_heads = d.Hq;
  a.num_kv_heads = d.Hkv;
  a.head_dim = d.D;
  a.q_row_stride = d.QKV;  // q, k and v are read from the packed [N, Q + 2 KV] rows
  a.q_batch_stride = T * d.QKV;
  a.kv_row_stride = d.QKV;
  a.kv_batch_stride = T * d.QKV;
  a.out_row_stride = d.Q;
  a.out_batch_stride = T * d.Q;
  a.scale = 1.0 / std::sqrt(static_cast<double>(d.D));
  a.window = cfg_.sliding_window;
  a.doc_start = doc_start_.empty() ? nullptr : doc_start_.data();
  return a;
}

void Transformer::forward_trunk() {
  const Plan& p = *plan_;
  be_->embedding_forward(dt_, p.res[0], p.ids, weights_.data(), p.N, cfg_.hidden_size);
  for (int64_t l = 0; l < cfg_.num_hidden_layers; ++l) layer_forward(l);
  const ParamInfo& norm = params_[1 + per_layer() * static_cast<size_t>(cfg_.num_hidden_layers)];
  be_->rmsnorm_forward(dt_, p.hf, p.rstdf, p.res[cfg_.num_hidden_layers],
                       at(weights_.data(), norm.offset), p.N, cfg_.hidden_size, cfg_.rms_norm_eps,
                       0.0);
}

// The chunked cross-entropy head: logits exist for `chunk` tokens at a time. With backward, each
// chunk's logits become their gradient in place and flow into dh (d loss / d final norm output)
// and the head's weight gradient before the next chunk overwrites them.
LossSum Transformer::head_loss(bool backward, double grad_scale) {
  const Plan& p = *plan_;
  const int64_t C = cfg_.hidden_size, V = cfg_.vocab_size;
  const ParamInfo& head = cfg_.tie_word_embeddings ? params_.front() : params_.back();
  const void* w = at(weights_.data(), head.offset);
  void* gw = at(grads_.data(), head.offset);
  LossSum out;
  std::vector<double> host(static_cast<size_t>(p.chunk));
  std::vector<float> host_f(static_cast<size_t>(p.chunk));
  for (int64_t s = 0; s < p.N; s += p.chunk) {
    const int64_t n = std::min(p.chunk, p.N - s);
    bool any = false;
    for (int64_t i = s; i < s + n; ++i) any |= p.host_labels[i] != kIgnoreIndex;
    if (!any) {
      if (backward) be_->zero(at(p.dh, s * C), static_cast<size_t>(n * C) * es_);
      continue;
    }
    be_->gemm(dt_, false, true, n, V, C, 1.0, at(p.hf, s * C), C, w, C, 0.0, p.logits, V);
    be_->cross_entropy(dt_, p.logits, p.losses, p.labels + s, n, V, kIgnoreIndex,
                       backward ? grad_scale : 0.0, 0.0);
    if (dt_ == DType::f64) {
      be_->to_host(host.data(), p.losses, static_cast<size_t>(n) * 8);
      for (int64_t i = 0; i < n; ++i) out.sum += host[i];
    } else {
      be_->to_host(host_f.data(), p.losses, static_cast<size_t>(n) * 4);
      for (int64_t i = 0; i < n; ++i) out.sum += host_f[i];
    }
    for (int64_t i = s; i < s + n; ++i) out.tokens += p.host_labels[i] != kIgnoreIndex;
    if (backward) {
      be_->gemm(dt_, false, false, n, C, V, 1.0, p.logits, V, w, C, 0.0, at(p.dh, s * C), C);
      be_->gemm(dt_, true, false, V, C, n, 1.0, p.logits, V, at(p.hf, s * C), C, 1.0, gw, C);
    }
  }
  return out;
}

LossSum Transformer::forward_backward(const int32_t* ids, const int32_t* labels, int64_t B,
                                      int64_t T, double grad_scale, const Packing* packing) {
  LMT_CHECK(grad_scale != 0.0, "forward_backward needs a non-zero grad_scale");
  upload_batch(ids, labels, B, T, packing);
  forward_trunk();
  LossSum loss = head_loss(true, grad_scale);
  const Plan& p = *plan_;
  const int64_t L = cfg_.num_hidden_layers, C = cfg_.hidden_size;
  const ParamInfo& norm = params_[1 + per_layer() * static_cast<size_t>(L)];
  be_->zero(p.dx, static_cast<size_t>(p.N * C) * es_);
  be_->rmsnorm_backward(dt_, p.dx, at(grads_.data(), norm.offset), p.dh, p.res[L],
                        at(weights_.data(), norm.offset), p.rstdf, p.N, C, 0.0);
  for (int64_t l = L - 1; l >= 0; --l) {
    if (checkpointing_) layer_forward(l);  // recompute this layer's working set
    layer_backward(l);
  }
  be_->embedding_backward(dt_, grads_.data(), p.dx, p.ids, p.N, C, cfg_.vocab_size);
  return loss;
}

LossSum Transformer::forward_loss(const int32_t* ids, const int32_t* labels, int64_t B, int64_t T,
                                  const Packing* packing) {
  upload_batch(ids, labels, B, T, packing);
  forward_trunk();
  return head_loss(false, 0.0);
}

std::vector<double> Transformer::forward_logits(const int32_t* ids, int64_t B, int64_t T,
                                               const Packing* packing) {
  upload_batch(ids, nullptr, B, T, packing);
  forward_trunk();
  const Plan& p = *plan_;
  const int64_t C = cfg_.hidden_size, V = cfg_.vocab_size;
  const ParamInfo& head = cfg_.tie_word_embeddings ? params_.front() : params_.back();
  Buffer logits(be_, static_cast<size_t>(p.N * V) * es_);
  be_->gemm(dt_, false, true, p.N, V, C, 1.0, p.hf, C, at(weights_.data(), head.offset), C, 0.0,
            logits.data(), V);
  std::vector<double> out(static_cast<size_t>(p.N * V));
  if (dt_ == DType::f64) {
    be_->to_host(out.data(), logits.data(), out.size() * 8);
  } else {
    std::vector<float> f(out.size());
    be_->to_host(f.data(), logits.data(), f.size() * 4);
    std::copy(f.begin(), f.end(), out.begin());
  }
  return out;
}

}  // namespace lmt

// The forward and backward pass of one transformer block for every family, the chunked loss head
// and the activation arena. A layer runs: norm1 -> q|k|v (+ bias) -> [q/k norm] -> [RoPE] ->
// attention -> o_proj (+ bias) -> [post-attention norm] -> residual -> norm2 -> up (+ bias) ->
// act / gated act -> down (+ bias) -> [post-MLP norm] -> residual; bracketed steps are family
// switches (ModelConfig::traits()).
#include "model/transformer.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "model/rope.h"

namespace lmt {

struct Transformer::Plan {
  int64_t B = 0, T = 0, N = 0;
  bool checkpointing = false;
  Buffer arena;
  size_t bytes = 0;
  int32_t* ids = nullptr;        // [N]
  int32_t* labels = nullptr;     // [N]
  int32_t* pos = nullptr;        // [N]
  int32_t* doc_start = nullptr;  // [N] (packed samples: where each token's document starts)
  std::vector<int32_t> host_labels;
  std::vector<void*> res;       // L + 1 residual streams [N, C]; res[l] is layer l's input
  std::vector<LayerActs> sets;  // L sets, or 1 shared set with checkpointing
  void* hf = nullptr;           // [N, C] final norm output
  void* meanf = nullptr;        // [N] (LayerNorm)
  void* rstdf = nullptr;        // [N]
  void* dx = nullptr;           // [N, C] gradient of the residual stream
  void* dh = nullptr;           // [N, C] gradient of a norm output / branch output; scratch
  void* dqkv = nullptr;         // [N, QKV]
  void* datt = nullptr;         // [N, Q]
  void* dgu = nullptr;          // [N, G]
  void* da = nullptr;           // [N, F]
  void* logits = nullptr;       // [chunk, V]
  void* losses = nullptr;       // [chunk]
  int64_t chunk = 0;
};

namespace {

// Hands out 64-byte aligned regions of one arena; a dry run (base 0) only measures.
class ArenaCarver {
 public:
  explicit ArenaCarver(uintptr_t base) : base_(base) {}
  void* take(size_t bytes) {
    if (bytes == 0) return nullptr;
    size_t off = used_;
    used_ += (bytes + 63) / 64 * 64;
    return reinterpret_cast<void*>(base_ + off);
  }
  size_t used() const { return used_; }

 private:
  uintptr_t base_;
  size_t used_ = 0;
};

Activation activation_of(const std::string& hidden_act) {
  if (hidden_act == "silu") return Activation::silu;
  if (hidden_act == "gelu_pytorch_tanh") return Activation::gelu_tanh;
  if (hidden_act == "relu") return Activation::relu;
  LMT_CHECK(hidden_act == "relu2", "Transformer: unknown hidden_act " + hidden_act);
  return Activation::relu2;
}

// What a layer keeps of its MLP's pre-activation for the backward.
enum class MlpKeeps { pre_activation, sign_mask, nothing };
MlpKeeps mlp_keeps(const ModelConfig& cfg, int activation_bits) {
  if (activation_bits != 1) return MlpKeeps::pre_activation;
  return cfg.hidden_act == "relu" ? MlpKeeps::sign_mask : MlpKeeps::nothing;
}

}  // namespace

// ---- construction and the activation arena ----

Transformer::Transformer(Backend* be, const ModelConfig& cfg, DType dt)
    : be_(be),
      cfg_(cfg),
      dt_(dt),
      es_(dtype_size(dt)),
      ss_(dtype_size(dt)),
      sdt_(dt),
      ses_(dtype_size(dt)),
      base_dt_(dt) {
  LMT_CHECK(dt == DType::f32 || dt == DType::f64, "Transformer: dtype must be f32 or f64");
  cfg_.validate();
  tr_ = cfg_.traits();
  act_ = activation_of(cfg_.hidden_act);
  dims_ = dims_of(cfg_);
  build_layout();
  weights_ = Buffer(be_, static_cast<size_t>(flat_size_) * ses_);
  describe_flat(weights_.data(), params_, sdt_, "");
  set_rope(0);  // the gradient buffer comes with the first backward (none for a frozen base)
}

Transformer::~Transformer() = default;

// (Re)makes the RoPE tables for sequences of seq_len positions (only rope_type dynamic cares).
void Transformer::set_rope(int64_t seq_len) {
  if (tr_.learned_positions) return;
  const int64_t len = rope_depends_on_length(cfg_) ? seq_len : 0;
  if (len == rope_len_) return;
  rope_len_ = len;
  auto make = [&](Rope& r, bool local) {
    const RopeFrequencies f = rope_frequencies(cfg_, local, len);
    std::vector<float> inv(f.inv_freq.begin(), f.inv_freq.end());
    if (!r.inv_freq.data()) {
      r.inv_freq = Buffer(be_, inv.size() * sizeof(float));
      be_->describe(r.inv_freq.data(), TensorDesc{local ? "rope.local_inv_freq" : "rope.inv_freq",
                                                  DType::f32, {static_cast<int64_t>(inv.size())}});
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

void* Transformer::sat(void* base, int64_t elems) const {
  return static_cast<char*>(base) + static_cast<size_t>(elems) * ses_;
}

void Transformer::set_compute_dtype(DType dt) {
  if (dt == dt_) return;
  plan_.reset();  // activations change size
  cw_ = Buffer(), cg_ = Buffer(), clw_ = Buffer(), clg_ = Buffer();
  if (dt == sdt_) {
    dt_ = dt, es_ = ss_ = ses_;
    return;
  }
  LMT_CHECK(dt == DType::bf16 && sdt_ == DType::f32 && !base_staged(),
            "set_compute_dtype: mixed precision computes in bf16 from an f32 model whose base is "
            "not held in bf16");
  dt_ = dt;
  es_ = dtype_size(dt);
  ss_ = sizeof(float);
  cw_ = Buffer(be_, static_cast<size_t>(flat_size_) * es_);
  if (grads_.data()) cg_ = Buffer(be_, static_cast<size_t>(flat_size_) * es_);
  if (has_lora()) {
    clw_ = Buffer(be_, static_cast<size_t>(lora_.flat_size) * es_);
    clg_ = Buffer(be_, static_cast<size_t>(lora_.flat_size) * es_);
  }
}

void Transformer::describe_flat(const void* base, const std::vector<ParamInfo>& params, DType dt,
                                const std::string& prefix) const {
  for (const ParamInfo& p : params)
    if (p.numel() > 0)
      be_->describe(static_cast<const char*>(base) + static_cast<size_t>(p.offset) * dtype_size(dt),
                    TensorDesc{prefix + p.name, dt, p.shape.dims()});
}

// Per tensor, so that a compiling backend converts each parameter on its own (one whole-buffer
// conversion would be one array of every parameter, concatenated and cut apart again).
void Transformer::sync_compute_weights() {
  if (!mixed()) return;
  for (const ParamInfo& p : params_)
    be_->convert(dt_, at(cw_.data(), p.offset), sdt_, sat(weights_.data(), p.offset), p.numel());
  for (const ParamInfo& p : lora_.params)
    be_->convert(dt_, at(clw_.data(), p.offset), sdt_, sat(lora_weights_.data(), p.offset),
                 p.numel());
}

void Transformer::fold_compute_grads() {
  if (!mixed()) return;
  const bool lora = has_lora();
  void* wide = lora ? lora_grads_.data() : grads_.data();
  void* narrow = lora ? clg_.data() : cg_.data();
  const std::vector<ParamInfo>& params = lora ? lora_.params : params_;
  int64_t largest = 0;
  for (const ParamInfo& p : params) largest = std::max(largest, p.numel());
  const Buffer scratch(be_, static_cast<size_t>(largest) * ses_);
  for (const ParamInfo& p : params) {
    be_->convert(sdt_, scratch.data(), dt_, at(narrow, p.offset), p.numel());
    be_->accumulate(sdt_, sat(wide, p.offset), scratch.data(), p.numel());
  }
  be_->discard(scratch.data());
}

Transformer::LayerActs Transformer::layer_acts(int64_t l) const {
  return plan_->sets[plan_->checkpointing ? 0 : static_cast<size_t>(l)];
}

void Transformer::ensure_grads() {
  if (has_lora()) return;
  if (!grads_.data()) {
    grads_ = Buffer(be_, static_cast<size_t>(flat_size_) * ses_);
    describe_flat(grads_.data(), params_, sdt_, "grad.");
  }
  if (mixed() && !cg_.data()) cg_ = Buffer(be_, static_cast<size_t>(flat_size_) * es_);
}

void Transformer::zero_grads() {
  ensure_grads();
  zero_loss_sums();
  if (has_lora()) {
    be_->zero(lora_grads_.data(), static_cast<size_t>(lora_.flat_size) * ses_);
    be_->zero(grad_sink_.data(), grad_sink_.bytes());
  } else {
    be_->zero(grads_.data(), static_cast<size_t>(flat_size_) * ses_);
  }
}

void Transformer::discard_grads() {
  if (void* g = trainable_grads_data()) be_->discard(g);
}

void* Transformer::grad_sink(void* g, int which) const {
  if (g || !has_lora()) return g;
  const int64_t n = std::max<int64_t>(dims_.C, dims_.D);
  return at(grad_sink_.data(), which * n);
}

void Transformer::set_activation_checkpointing(bool on) {
  if (on != checkpointing_) plan_.reset();
  checkpointing_ = on;
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
  if (bits != activation_bits_) plan_.reset();
  activation_bits_ = bits;
}

namespace {

// One layer's saved activations for N tokens of B sequences, carved in a fixed order.
template <class Acts>
Acts carve_layer(ArenaCarver& c, const ModelConfig::Traits& t, int64_t N, int64_t B, int64_t T,
                 int64_t C, int64_t Q, int64_t QKV, int64_t G, int64_t F, int Hq, int Hkv,
                 size_t es, size_t ss, MlpKeeps keeps) {
  auto e = [&](int64_t n) { return static_cast<size_t>(n) * es; };
  auto st = [&](int64_t n) { return static_cast<size_t>(n) * ss; };  // saved statistics
  Acts a{};
  a.h1 = c.take(e(N * C));
  a.mean1 = t.layernorm ? c.take(st(N)) : nullptr;
  a.rstd1 = c.take(st(N));
  a.qkv_raw = t.qk_norm ? c.take(e(N * QKV)) : nullptr;
  a.qk_rstd = t.qk_norm ? c.take(st(N * (Hq + Hkv))) : nullptr;
  a.qkv = c.take(e(N * QKV));
  a.att = c.take(e(N * Q));
  a.lse = c.take(st(B * Hq * T));
  a.o_raw = t.sandwich_norms ? c.take(e(N * C)) : nullptr;
  a.rstd_pa = t.sandwich_norms ? c.take(st(N)) : nullptr;
  a.x_mid = c.take(e(N * C));
  a.h2 = c.take(e(N * C));
  a.mean2 = t.layernorm ? c.take(st(N)) : nullptr;
  a.rstd2 = c.take(st(N));
  a.gu = keeps == MlpKeeps::pre_activation ? c.take(e(N * G)) : nullptr;  // else scratch
  a.a = c.take(e(N * F));
  a.mask = keeps == MlpKeeps::sign_mask ? c.take(sign_mask_bytes(N * F)) : nullptr;
  a.m_raw = t.sandwich_norms ? c.take(e(N * C)) : nullptr;
  a.rstd_pf = t.sandwich_norms ? c.take(st(N)) : nullptr;
  return a;
}

}  // namespace

// The arena's layout: one function carves it, for measuring (base 0) and for the real plan.
template <class PlanT, class Acts, class DimsT>
static void carve_plan(ArenaCarver& c, PlanT& p, const ModelConfig& cfg, const DimsT& d, size_t es,
                       size_t ss, int64_t B, int64_t T, bool checkpointing, int64_t chunk,
                       int64_t vocab_tile, MlpKeeps keeps) {
  const ModelConfig::Traits t = cfg.traits();
  const int64_t N = B * T, L = cfg.num_hidden_layers, C = d.C;
  auto e = [&](int64_t n) { return static_cast<size_t>(n) * es; };
  auto st = [&](int64_t n) { return static_cast<size_t>(n) * ss; };
  auto ints = [&]() { return static_cast<int32_t*>(c.take(sizeof(int32_t) * N)); };
  p.ids = ints();
  p.labels = ints();
  p.pos = ints();
  p.doc_start = ints();
  for (int64_t l = 0; l <= L; ++l) p.res.push_back(c.take(e(N * C)));
  const int64_t sets = checkpointing ? 1 : L;
  for (int64_t s = 0; s < sets; ++s)
    p.sets.push_back(
        carve_layer<Acts>(c, t, N, B, T, C, d.Q, d.QKV, d.G, d.F, d.Hq, d.Hkv, es, ss, keeps));
  p.hf = c.take(e(N * C));
  p.meanf = t.layernorm ? c.take(st(N)) : nullptr;
  p.rstdf = c.take(st(N));
  p.dx = c.take(e(N * C));
  p.dh = c.take(e(N * C));
  p.dqkv = c.take(e(N * d.QKV));
  p.datt = c.take(e(N * d.Q));
  p.dgu = c.take(e(N * d.G));
  p.da = c.take(e(N * d.F));
  for (Acts& a : p.sets)  // a pre-activation not kept lives in dgu, unused until the backward
    if (!a.gu) a.gu = p.dgu;
  const HeadLossScratch scratch = head_loss_scratch(chunk, cfg.vocab_size, vocab_tile);
  p.logits = c.take(e(scratch.logits));
  p.losses = c.take(st(scratch.losses));
}

Transformer::LayerActs Transformer::alloc_layer_acts(Buffer& arena, int64_t n) const {
  const Dims& d = dims_;
  ArenaCarver measure(0);
  carve_layer<LayerActs>(measure, tr_, n, 1, n, d.C, d.Q, d.QKV, d.G, d.F, d.Hq, d.Hkv, es_, ss_,
                         MlpKeeps::pre_activation);
  arena = Buffer(be_, measure.used());
  ArenaCarver c(reinterpret_cast<uintptr_t>(arena.data()));
  return carve_layer<LayerActs>(c, tr_, n, 1, n, d.C, d.Q, d.QKV, d.G, d.F, d.Hq, d.Hkv, es_, ss_,
                                MlpKeeps::pre_activation);
}

size_t Transformer::activation_bytes(const ModelConfig& cfg, DType dt, int64_t B, int64_t T,
                                     bool checkpointing, int64_t loss_chunk_tokens,
                                     int activation_bits, int64_t loss_vocab_tile) {
  const ModelConfig& c = cfg;
  c.validate();
  const int64_t chunk = std::min<int64_t>(std::max<int64_t>(loss_chunk_tokens, 1), B * T);
  ArenaCarver carver(0);
  Plan p;
  const size_t stat = dt == DType::f64 ? sizeof(double) : sizeof(float);
  carve_plan<Plan, LayerActs>(carver, p, c, dims_of(c), dtype_size(dt), stat, B, T, checkpointing,
                              chunk, loss_vocab_tile, mlp_keeps(c, activation_bits));
  return carver.used();
}

Transformer::LayerBytes Transformer::layer_activation_bytes(const ModelConfig& cfg, DType dt,
                                                            int64_t B, int64_t T,
                                                            int activation_bits) {
  cfg.validate();
  const Dims d = dims_of(cfg);
  const size_t es = dtype_size(dt), stat = dt == DType::f64 ? sizeof(double) : sizeof(float);
  const MlpKeeps keeps = mlp_keeps(cfg, activation_bits);
  ArenaCarver c(0);
  carve_layer<LayerActs>(c, cfg.traits(), B * T, B, T, d.C, d.Q, d.QKV, d.G, d.F, d.Hq, d.Hkv, es,
                         stat, keeps);
  ArenaCarver pre(0);  // the same rounding to the carver's alignment
  if (keeps == MlpKeeps::pre_activation) pre.take(static_cast<size_t>(B * T * d.G) * es);
  if (keeps == MlpKeeps::sign_mask) pre.take(sign_mask_bytes(B * T * d.F));
  return {c.used(), pre.used()};
}

size_t Transformer::activation_bytes(int64_t B, int64_t T) const {
  return activation_bytes(cfg_, dt_, B, T, checkpointing_, loss_chunk_, activation_bits_,
                          loss_vocab_tile_);
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
  p->chunk = std::min<int64_t>(std::max<int64_t>(loss_chunk_, 1), p->N);
  ArenaCarver c(reinterpret_cast<uintptr_t>(p->arena.data()));
  carve_plan<Plan, LayerActs>(c, *p, cfg_, dims_, es_, ss_, B, T, checkpointing_, p->chunk,
                              loss_vocab_tile_, mlp_keeps(cfg_, activation_bits_));
  LMT_CHECK(c.used() == p->bytes, "activation plan size mismatch");
  const std::pair<int32_t*, const char*> batch[] = {{p->ids, "batch.ids"},
                                                    {p->labels, "batch.labels"},
                                                    {p->pos, "batch.positions"},
                                                    {p->doc_start, "batch.doc_start"}};
  for (const auto& [at, name] : batch) be_->describe(at, TensorDesc{name, DType::i32, {B, T}});
  plan_ = std::move(p);
}

void Transformer::upload_batch(const int32_t* ids, const int32_t* labels, int64_t B, int64_t T,
                               const Packing* packing) {
  if (tr_.learned_positions && T > cfg_.max_position_embeddings && !(packing && packing->positions))
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
          tr_.learned_positions && packing->positions[i] >= cfg_.max_position_embeddings;
      if (packing->positions[i] < 0 || beyond)
        throw UserError(
            "model: position " + std::to_string(packing->positions[i]) +
            (tr_.learned_positions ? " is outside [0, max_position_embeddings)" : " is negative"));
      pos[i] = packing->positions[i];
    }
  }
  packed_ = packing && packing->doc_start;
  set_rope(N > 0 ? *std::max_element(pos.begin(), pos.end()) + 1 : 0);
  be_->from_host(plan_->ids, ids, sizeof(int32_t) * N);
  be_->from_host(plan_->pos, pos.data(), sizeof(int32_t) * N);
  if (packed_) be_->from_host(plan_->doc_start, packing->doc_start, sizeof(int32_t) * N);
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

// ---- building blocks ----

void Transformer::linear(const void* x, const void* w, const void* b, void* y, int64_t N,
                         int64_t in, int64_t out, const std::vector<int>* lora) {
  if (tr_.conv1d)
    be_->gemm(dt_, false, false, N, out, in, 1.0, x, in, w, out, 0.0, y, out);
  else
    be_->gemm(dt_, false, true, N, out, in, 1.0, x, in, w, in, 0.0, y, out);
  if (b) be_->add_bias(dt_, y, b, N, out);
  if (lora && !lora->empty()) lora_forward(*lora, x, y, N, in, out);
}

void Transformer::linear_backward(const void* dy, const void* x, const void* w, void* dx, void* dw,
                                  void* db, int64_t N, int64_t in, int64_t out,
                                  const std::vector<int>* lora) {
  if (tr_.conv1d) {
    be_->gemm(dt_, false, true, N, in, out, 1.0, dy, out, w, out, 0.0, dx, in);
    if (dw) be_->gemm(dt_, true, false, in, out, N, 1.0, x, in, dy, out, 1.0, dw, out);
  } else {
    be_->gemm(dt_, false, false, N, in, out, 1.0, dy, out, w, in, 0.0, dx, in);
    if (dw) be_->gemm(dt_, true, false, out, in, N, 1.0, dy, out, x, in, 1.0, dw, in);
  }
  if (db) be_->bias_backward(dt_, db, dy, N, out);
  if (lora && !lora->empty()) lora_backward(*lora, dy, x, dx, N, in, out);
}

void* Transformer::lora_scratch(int64_t N, int64_t in) {
  const int64_t elems = lora_scratch_elems(N, lora_spec_.rank, in, lora_dropping());
  const size_t need = static_cast<size_t>(elems) * es_;
  if (lora_scratch_.bytes() < need) lora_scratch_ = Buffer(be_, need);
  return lora_scratch_.data();
}

uint64_t Transformer::dropout_stream(int id) const {
  LMT_CHECK(static_cast<uint64_t>(id) < (uint64_t{1} << 24), "too many adapters for dropout");
  return (dropout_micro_ << 24) + static_cast<uint64_t>(id);
}

int64_t Transformer::lora_num_params() const {
  int64_t n = 0;
  for (const ParamInfo& p : lora_.params) n += p.numel();
  return n;
}

// y[:, o : o + out] += s (xd A^T) B^T per adapter, xd = dropout(x) in training (else x); u =
// xd A^T goes through the scratch.
void Transformer::lora_forward(const std::vector<int>& ids, const void* x, void* y, int64_t N,
                               int64_t in, int64_t ldy) {
  const int64_t r = lora_spec_.rank;
  const double s = lora_spec_.scaling();
  void* u = lora_scratch(N, in);
  void* xd = at(u, 2 * N * r);
  for (int id : ids) {
    const LoraTarget& t = lora_.targets[static_cast<size_t>(id)];
    const void* A = at(run_lora(), lora_.params[static_cast<size_t>(t.a)].offset);
    const void* B = at(run_lora(), lora_.params[static_cast<size_t>(t.b)].offset);
    const void* xin = x;
    if (lora_dropping()) {
      be_->dropout(dt_, xd, x, N * in, lora_spec_.dropout, dropout_seed_, dropout_stream(id));
      xin = xd;
    }
    be_->gemm(dt_, false, true, N, r, in, 1.0, xin, in, A, in, 0.0, u, r);
    be_->gemm(dt_, false, true, N, t.module.out, r, s, u, r, B, r, 1.0, at(y, t.module.out_offset),
              ldy);
  }
}

// With xd = dropout(x) and u = xd A^T recomputed: dB += s dy^T u, du = s dy B, dA += du^T xd,
// dx += dropout(du A) (the same mask: dropout's backward).
void Transformer::lora_backward(const std::vector<int>& ids, const void* dy, const void* x,
                                void* dx, int64_t N, int64_t in, int64_t ldy) {
  const int64_t r = lora_spec_.rank;
  const double s = lora_spec_.scaling();
  void* u = lora_scratch(N, in);
  void* du = at(u, N * r);
  void* xd = at(u, 2 * N * r);
  for (int id : ids) {
    const LoraTarget& t = lora_.targets[static_cast<size_t>(id)];
    const int64_t a_off = lora_.params[static_cast<size_t>(t.a)].offset;
    const int64_t b_off = lora_.params[static_cast<size_t>(t.b)].offset;
    const void* A = at(run_lora(), a_off);
    const void* B = at(run_lora(), b_off);
    const void* dyt = at(const_cast<void*>(dy), t.module.out_offset);
    const int64_t out = t.module.out;
    const bool drop = lora_dropping();
    const void* xin = x;
    if (drop) {
      be_->dropout(dt_, xd, x, N * in, lora_spec_.dropout, dropout_seed_, dropout_stream(id));
      xin = xd;
    }
    be_->gemm(dt_, false, true, N, r, in, 1.0, xin, in, A, in, 0.0, u, r);
    be_->gemm(dt_, true, false, out, r, N, s, dyt, ldy, u, r, 1.0, at(run_lora_grads(), b_off), r);
    be_->gemm(dt_, false, false, N, r, out, s, dyt, ldy, B, r, 0.0, du, r);
    be_->gemm(dt_, true, false, r, in, N, 1.0, du, r, xin, in, 1.0, at(run_lora_grads(), a_off),
              in);
    if (drop) {  // xd is read for the last time above; it now holds du A through the mask
      be_->gemm(dt_, false, false, N, in, r, 1.0, du, r, A, in, 0.0, xd, in);
      be_->dropout(dt_, xd, xd, N * in, lora_spec_.dropout, dropout_seed_, dropout_stream(id));
      be_->accumulate(dt_, dx, xd, N * in);
    } else {
      be_->gemm(dt_, false, false, N, in, r, 1.0, du, r, A, in, 1.0, dx, in);
    }
  }
}

// The family's norm over C: LayerNorm with bias, or RMSNorm scaled by (offset + w).
void Transformer::norm_forward(const void* w, const void* b, void* out, void* mean, void* rstd,
                               const void* x, int64_t N) {
  if (tr_.layernorm)
    be_->layernorm_forward(dt_, out, mean, rstd, x, w, b, N, dims_.C, cfg_.rms_norm_eps);
  else
    be_->rmsnorm_forward(dt_, out, rstd, x, w, N, dims_.C, cfg_.rms_norm_eps, tr_.norm_offset);
}

// dx += the norm's input gradient; dw (and db) +=.
void Transformer::norm_backward(const void* w, void* dw, void* db, void* dx, const void* dout,
                                const void* x, const void* mean, const void* rstd, int64_t N) {
  dw = grad_sink(dw, 0);
  if (tr_.layernorm) db = grad_sink(db, 1);
  if (tr_.layernorm)
    be_->layernorm_backward(dt_, dx, dw, db, dout, x, w, mean, rstd, N, dims_.C);
  else
    be_->rmsnorm_backward(dt_, dx, dw, dout, x, w, rstd, N, dims_.C, tr_.norm_offset);
}

// out[N, C] = token embedding (* sqrt(C) for gemma) (+ position embedding for gpt2).
void Transformer::embed(void* out, const int32_t* ids, const int32_t* pos, void* scratch,
                        int64_t N) {
  const int64_t C = dims_.C;
  if (base_staged() && !saved(embed_)) {  // gather rows of a bf16 base, then convert them
    be_->embedding_forward(base_dt_, scratch, ids,
                           base_at(params_[static_cast<size_t>(embed_)].offset), N, C);
    be_->convert(dt_, out, base_dt_, scratch, N * C);
  } else {
    be_->embedding_forward(dt_, out, ids, param_ptr(embed_, false), N, C);
  }
  if (tr_.embed_scale)  // transformers multiplies by sqrt(hidden) rounded to the model's dtype
    be_->scale(dt_, out, static_cast<float>(std::sqrt(static_cast<double>(C))), N * C);
  if (pos_embed_ >= 0) {
    be_->embedding_forward(dt_, scratch, pos, param_ptr(pos_embed_, false), N, C);
    be_->accumulate(dt_, out, scratch, N * C);
  }
}

// dx [N, C] (d loss / d embedding output) into the tables' gradients; dx is scaled in place.
void Transformer::embed_backward(void* dx, const int32_t* ids, const int32_t* pos, int64_t N) {
  const int64_t C = dims_.C;
  void* pos_grad = param_ptr(pos_embed_, true);  // null: a frozen table (or none)
  if (pos_grad) be_->embedding_backward(dt_, pos_grad, dx, pos, N, C, cfg_.max_position_embeddings);
  void* grad = param_ptr(embed_, true);
  if (!grad) return;
  if (tr_.embed_scale)
    be_->scale(dt_, dx, static_cast<float>(std::sqrt(static_cast<double>(C))), N * C);
  be_->embedding_backward(dt_, grad, dx, ids, N, C, cfg_.vocab_size);
}

void Transformer::final_norm(void* out, void* mean, void* rstd, const void* x, int64_t N) {
  norm_forward(param_ptr(norm_, false), param_ptr(norm_b_, false), out, mean, rstd, x, N);
}

// Norm, q|k|v projection, q/k norm and RoPE of one block: a.h1, a.rstd1, a.qkv (a.qkv_raw,
// a.qk_rstd) from x[N, C].
void Transformer::block_qkv(int64_t l, const LayerWeights& w, const LayerActs& a, const void* x,
                            const int32_t* pos, int64_t N) {
  const Dims& d = dims_;
  norm_forward(w.ln1, w.ln1_b, a.h1, a.mean1, a.rstd1, x, N);
  linear(a.h1, w.qkv, w.qkv_b, a.qkv, N, d.C, d.QKV, w.lora ? &w.lora->qkv : nullptr);
  if (tr_.qk_norm) {  // a.qkv keeps v; q and k are normalised per head from the raw copy
    be_->copy(a.qkv_raw, a.qkv, static_cast<size_t>(N * d.QKV) * es_);
    be_->head_rmsnorm_forward(dt_, a.qkv, a.qk_rstd, a.qkv_raw, w.q_norm, N, d.QKV, d.Hq, d.D,
                              cfg_.rms_norm_eps, tr_.norm_offset);
    be_->head_rmsnorm_forward(dt_, at(a.qkv, d.Q), stat_at(a.qk_rstd, N * d.Hq), at(a.qkv_raw, d.Q),
                              w.k_norm, N, d.QKV, d.Hkv, d.D, cfg_.rms_norm_eps, tr_.norm_offset);
  }
  if (!tr_.learned_positions) {
    const Rope& r = rope_of(l);
    const auto* inv = r.inv_freq.as<float>();
    be_->rope(dt_, a.qkv, pos, inv, N, d.QKV, d.Hq, d.D, d.D, r.attention_factor, false);
    be_->rope(dt_, at(a.qkv, d.Q), pos, inv, N, d.QKV, d.Hkv, d.D, d.D, r.attention_factor, false);
  }
}

// The rest of the block: attention of a.qkv's queries over keys k and values v (as args lays
// them out), output projection, residual, MLP. y[N, C] may be x itself: x is last read before y
// is written.
void Transformer::block_rest(const LayerWeights& w, const LayerActs& a, const void* x, void* y,
                             int64_t N, const AttentionArgs& args, const void* k, const void* v) {
  const Dims& d = dims_;
  const int64_t C = d.C;
  be_->attention_forward(dt_, args, a.att, a.lse, a.qkv, k, v);
  if (tr_.sandwich_norms) {
    linear(a.att, w.o, w.o_b, a.o_raw, N, d.Q, C, w.lora ? &w.lora->o : nullptr);
    be_->rmsnorm_forward(dt_, a.x_mid, a.rstd_pa, a.o_raw, w.post_attn, N, C, cfg_.rms_norm_eps,
                         tr_.norm_offset);
  } else {
    linear(a.att, w.o, w.o_b, a.x_mid, N, d.Q, C, w.lora ? &w.lora->o : nullptr);
  }
  be_->accumulate(dt_, a.x_mid, x, N * C);
  norm_forward(w.ln2, w.ln2_b, a.h2, a.mean2, a.rstd2, a.x_mid, N);
  linear(a.h2, w.up, w.up_b, a.gu, N, C, d.G, w.lora ? &w.lora->up : nullptr);
  if (a.mask) be_->relu_mask(dt_, a.mask, a.gu, N * d.F);
  if (tr_.gated_mlp)
    be_->glu_forward(dt_, act_, a.a, a.gu, N, d.F);
  else
    be_->act_forward(dt_, act_, a.a, a.gu, N * d.F);
  if (tr_.sandwich_norms) {
    linear(a.a, w.down, w.down_b, a.m_raw, N, d.F, C, w.lora ? &w.lora->down : nullptr);
    be_->rmsnorm_forward(dt_, y, a.rstd_pf, a.m_raw, w.post_ffw, N, C, cfg_.rms_norm_eps,
                         tr_.norm_offset);
  } else {
    linear(a.a, w.down, w.down_b, y, N, d.F, C, w.lora ? &w.lora->down : nullptr);
  }
  be_->accumulate(dt_, y, a.x_mid, N * C);
}

void Transformer::layer_forward(int64_t l) {
  const Plan& p = *plan_;
  const LayerWeights w = layer_weights(l, false);
  const LayerActs a = layer_acts(l);
  block_qkv(l, w, a, p.res[l], p.pos, p.N);
  block_rest(w, a, p.res[l], p.res[l + 1], p.N, attention_args(l, p.B, p.T), at(a.qkv, dims_.Q),
             at(a.qkv, dims_.Q + dims_.KV));
}

// On entry p.dx holds d loss / d res[l+1]; on exit, d loss / d res[l].
void Transformer::layer_backward(int64_t l) {
  const Plan& p = *plan_;
  const LayerWeights w = layer_weights(l, false);
  const LayerWeights g = layer_weights(l, true);
  const LayerActs a = layer_acts(l);
  const int64_t N = p.N;
  const Dims& d = dims_;
  const int64_t C = d.C;
  const size_t nc_bytes = static_cast<size_t>(N * C) * es_;

  // MLP branch: y = x_mid + [post_ffw](down(act(up(norm2(x_mid)))))
  const void* dm = p.dx;
  if (tr_.sandwich_norms) {  // p.dh = d/d m_raw
    be_->zero(p.dh, nc_bytes);
    be_->rmsnorm_backward(dt_, p.dh, grad_sink(g.post_ffw), p.dx, a.m_raw, w.post_ffw, a.rstd_pf, N,
                          C, tr_.norm_offset);
    dm = p.dh;
  }
  linear_backward(dm, a.a, w.down, p.da, g.down, g.down_b, N, d.F, C,
                  w.lora ? &w.lora->down : nullptr);
  if (tr_.gated_mlp)
    be_->glu_backward(dt_, act_, p.dgu, p.da, a.gu, N, d.F);
  else if (activation_bits_ == 0)
    be_->act_backward(dt_, act_, p.dgu, p.da, a.gu, N * d.F);
  else if (act_ == Activation::relu)
    be_->relu_backward_masked(dt_, p.dgu, p.da, a.mask, N * d.F);
  else
    be_->relu2_backward_from_output(dt_, p.dgu, p.da, a.a, N * d.F);
  linear_backward(p.dgu, a.h2, w.up, p.dh, g.up, g.up_b, N, C, d.G, w.lora ? &w.lora->up : nullptr);
  norm_backward(w.ln2, g.ln2, g.ln2_b, p.dx, p.dh, a.x_mid, a.mean2, a.rstd2, N);
  // Attention branch: x_mid = x + [post_attn](o(attention(rope(qk_norm(q)), rope(qk_norm(k)), v)))
  const void* dout = p.dx;
  if (tr_.sandwich_norms) {
    be_->zero(p.dh, nc_bytes);
    be_->rmsnorm_backward(dt_, p.dh, grad_sink(g.post_attn), p.dx, a.o_raw, w.post_attn, a.rstd_pa,
                          N, C, tr_.norm_offset);
    dout = p.dh;
  }
  linear_backward(dout, a.att, w.o, p.datt, g.o, g.o_b, N, d.Q, C, w.lora ? &w.lora->o : nullptr);
  AttentionArgs args = attention_args(l, p.B, p.T);
  be_->attention_backward(dt_, args, p.dqkv, at(p.dqkv, d.Q), at(p.dqkv, d.Q + d.KV), p.datt, a.qkv,
                          at(a.qkv, d.Q), at(a.qkv, d.Q + d.KV), a.att, a.lse);
  if (!tr_.learned_positions) {
    const Rope& r = rope_of(l);
    const auto* inv = r.inv_freq.as<float>();
    be_->rope(dt_, p.dqkv, p.pos, inv, N, d.QKV, d.Hq, d.D, d.D, r.attention_factor, true);
    be_->rope(dt_, at(p.dqkv, d.Q), p.pos, inv, N, d.QKV, d.Hkv, d.D, d.D, r.attention_factor,
              true);
  }
  if (tr_.qk_norm) {
    be_->head_rmsnorm_backward(dt_, p.dqkv, grad_sink(g.q_norm), p.dqkv, a.qkv_raw, w.q_norm,
                               a.qk_rstd, N, d.QKV, d.Hq, d.D, tr_.norm_offset);
    be_->head_rmsnorm_backward(dt_, at(p.dqkv, d.Q), grad_sink(g.k_norm, 1), at(p.dqkv, d.Q),
                               at(a.qkv_raw, d.Q), w.k_norm, stat_at(a.qk_rstd, N * d.Hq), N, d.QKV,
                               d.Hkv, d.D, tr_.norm_offset);
  }
  linear_backward(p.dqkv, a.h1, w.qkv, p.dh, g.qkv, g.qkv_b, N, C, d.QKV,
                  w.lora ? &w.lora->qkv : nullptr);
  norm_backward(w.ln1, g.ln1, g.ln1_b, p.dx, p.dh, p.res[l], a.mean1, a.rstd1, N);
}

AttentionArgs Transformer::attention_args(int64_t l, int64_t B, int64_t T) const {
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
  const double s = cfg_.query_pre_attn_scalar > 0 ? cfg_.query_pre_attn_scalar : d.D;
  a.scale = 1.0 / std::sqrt(s);
  a.softcap = cfg_.attn_logit_softcapping;
  a.window = cfg_.is_sliding_layer(l) ? cfg_.sliding_window : 0;
  a.doc_start = packed_ ? plan_->doc_start : nullptr;
  return a;
}

// ---- the whole model ----

void Transformer::forward_trunk() {
  const Plan& p = *plan_;
  embed(p.res[0], p.ids, p.pos, p.dh, p.N);
  const size_t nc_bytes = static_cast<size_t>(p.N * dims_.C) * es_;
  for (int64_t l = 0; l < cfg_.num_hidden_layers; ++l) {
    be_->keep({p.res[l], nc_bytes}, p.N);
    layer_forward(l);
  }
  final_norm(p.hf, p.meanf, p.rstdf, p.res[cfg_.num_hidden_layers], p.N);
}

template <class F>
void Transformer::for_head_blocks(F&& f) {
  const int64_t C = dims_.C, V = dims_.V, offset = params_[static_cast<size_t>(head_)].offset;
  if (!base_staged() || saved(head_))
    return f(static_cast<const void*>(param_ptr(head_, false)), 0, V);
  for (int64_t v0 = 0; v0 < V; v0 += head_rows_) {
    const int64_t rows = std::min(head_rows_, V - v0);
    be_->convert(dt_, staging_.data(), base_dt_, base_at(offset + v0 * C), rows * C);
    f(static_cast<const void*>(staging_.data()), v0, rows);
  }
}

void Transformer::head_forward(const void* h, void* logits, int64_t n) {
  const int64_t C = dims_.C, V = dims_.V;
  for_head_blocks([&](const void* w, int64_t v0, int64_t rows) {
    be_->gemm(dt_, false, true, n, rows, C, 1.0, h, C, w, C, 0.0, at(logits, v0), V);
  });
}

void Transformer::head_backward_input(const void* dlogits, void* dh, int64_t n) {
  const int64_t C = dims_.C, V = dims_.V;
  for_head_blocks([&](const void* w, int64_t v0, int64_t rows) {
    be_->gemm(dt_, false, false, n, C, rows, 1.0, at(const_cast<void*>(dlogits), v0), V, w, C,
              v0 == 0 ? 0.0 : 1.0, dh, C);
  });
}

// The chunked cross-entropy head: logits exist for `chunk` tokens at a time (Backend::head_loss).
// With backward, the chunks' gradients flow into dh (d loss / d final norm output) and the head's
// weight gradient. The loss sum accumulates in a device scalar, and every chunk runs whatever its
// labels (no decision on the data): the sum is read after the backward, or at the step's end
// (take_loss_sum), as a compiled step returns it. A head held in bf16 (a LoRA base) goes through
// its blocks of converted rows here instead.
LossSum Transformer::head_loss(bool backward, double grad_scale) {
  const Plan& p = *plan_;
  HeadLossArgs a;
  a.N = p.N, a.C = cfg_.hidden_size, a.V = dims_.V, a.chunk = p.chunk;
  a.ignore_index = kIgnoreIndex;
  a.grad_scale = backward ? grad_scale : 0.0;
  a.softcap = cfg_.final_logit_softcapping;
  a.loss = loss_;
  a.vocab_tile = loss_vocab_tile_;
  double* ce = loss_.plain() ? nullptr : ce_acc();
  if (!base_staged() || saved(head_))
    be_->head_loss(dt_, a, p.hf, param_ptr(head_, false), p.labels, loss_acc(), p.dh,
                   param_ptr(head_, true), p.logits, p.losses, ce);
  else
    staged_head_loss(a, ce);
  LossSum out;
  for (int32_t label : p.host_labels) out.tokens += label != kIgnoreIndex;
  return out;
}

// Backend::head_loss's chunks with the head's rows converted from the bf16 base a block at a time
// (a frozen head: no weight gradient).
void Transformer::staged_head_loss(const HeadLossArgs& a, double* ce_sum) {
  LMT_CHECK(!a.cut(), "the cut cross-entropy needs the head in the model's dtype");
  const Plan& p = *plan_;
  const DType stat = dt_ == DType::f64 ? DType::f64 : DType::f32;
  void* ce = ce_sum ? static_cast<char*>(p.losses) + p.chunk * dtype_size(stat) : nullptr;
  for (int64_t s = 0; s < a.N; s += a.chunk) {
    const int64_t n = std::min(a.chunk, a.N - s);
    head_forward(at(p.hf, s * a.C), p.logits, n);
    be_->cross_entropy(dt_, p.logits, p.losses, p.labels + s, n, a.V, a.ignore_index, a.grad_scale,
                       a.softcap, a.loss, ce);
    be_->sum(stat, loss_acc(), p.losses, n);
    if (ce_sum) be_->sum(stat, ce_sum, ce, n);
    if (a.grad_scale != 0) head_backward_input(p.logits, at(p.dh, s * a.C), n);
  }
}

void Transformer::set_loss(const LossSpec& loss, int64_t vocab_tile) {
  loss_ = loss;
  loss_vocab_tile_ = vocab_tile;
  plan_.reset();  // the scratch of the loss changes size
}

double* Transformer::loss_acc() {
  if (!loss_acc_.data()) {
    loss_acc_ = Buffer(be_, sizeof(double));  // zeroed
    be_->describe(loss_acc_.data(), TensorDesc{"loss_sum", DType::f64, {}});
  }
  return loss_acc_.as<double>();
}

double* Transformer::ce_acc() {
  if (loss_.plain()) return loss_acc();
  if (!ce_acc_.data()) {
    ce_acc_ = Buffer(be_, sizeof(double));  // zeroed
    be_->describe(ce_acc_.data(), TensorDesc{"ce_sum", DType::f64, {}});
  }
  return ce_acc_.as<double>();
}

void Transformer::zero_loss_sums() {
  be_->zero(loss_acc(), sizeof(double));
  if (!loss_.plain()) be_->zero(ce_acc(), sizeof(double));
}

double Transformer::take_loss_sum() {
  double sum = 0;
  be_->to_host(&sum, loss_acc(), sizeof(double));
  return sum;
}

double Transformer::take_ce_sum() {
  if (loss_.plain()) return take_loss_sum();
  double sum = 0;
  be_->to_host(&sum, ce_acc(), sizeof(double));
  return sum;
}

void Transformer::copy_loss_sum(double* dst) {
  be_->copy(dst, loss_acc(), sizeof(double));
  be_->copy(dst + 1, ce_acc(), sizeof(double));
}

void Transformer::discard_scratch() {
  for (const Buffer* b : {&plan_->arena, &lora_scratch_, &staging_, &grad_sink_, &cw_, &cg_, &clw_,
                          &clg_})  // mixed precision: each pass remakes its compute copies
    if (b->data()) be_->discard(b->data());
}

LossSum Transformer::forward_backward(const int32_t* ids, const int32_t* labels, int64_t B,
                                      int64_t T, double grad_scale, const Packing* packing,
                                      bool read_loss) {
  LMT_CHECK(grad_scale != 0.0, "forward_backward needs a non-zero grad_scale");
  if (read_loss) zero_loss_sums();
  ensure_grads();
  upload_batch(ids, labels, B, T, packing);
  if (mixed()) {  // this pass's gradients start from zero; fold_compute_grads adds them up
    sync_compute_weights();
    be_->zero(has_lora() ? run_lora_grads() : run_grads(),
              static_cast<size_t>(trainable_flat_size()) * es_);
  }
  struct Training {  // LoRA dropout applies inside this call only, whatever leaves it
    bool& on;
    explicit Training(bool& f) : on(f) { on = true; }
    ~Training() { on = false; }
  } training(training_);
  forward_trunk();
  LossSum loss = head_loss(true, grad_scale);
  const Plan& p = *plan_;
  const int64_t L = cfg_.num_hidden_layers, C = cfg_.hidden_size;
  be_->zero(p.dx, static_cast<size_t>(p.N * C) * es_);
  norm_backward(param_ptr(norm_, false), param_ptr(norm_, true), param_ptr(norm_b_, true), p.dx,
                p.dh, p.res[L], p.meanf, p.rstdf, p.N);
  const size_t nc_bytes = static_cast<size_t>(p.N * C) * es_;
  for (int64_t l = L - 1; l >= 0; --l) {
    if (checkpointing_) {  // recompute this layer's working set from its input, once dx is there
      be_->recompute_from({{p.res[l], nc_bytes}}, {p.dx, nc_bytes});
      layer_forward(l);
    }
    layer_backward(l);
    be_->keep({p.dx, nc_bytes}, p.N);
  }
  embed_backward(p.dx, p.ids, p.pos, p.N);
  fold_compute_grads();
  discard_scratch();
  loss.sum = read_loss ? take_loss_sum() : std::nan("");
  loss.ce = read_loss ? take_ce_sum() : std::nan("");
  return loss;
}

LossSum Transformer::forward_loss(const int32_t* ids, const int32_t* labels, int64_t B, int64_t T,
                                  const Packing* packing) {
  zero_loss_sums();
  upload_batch(ids, labels, B, T, packing);
  sync_compute_weights();
  forward_trunk();
  LossSum loss = head_loss(false, 0.0);
  discard_scratch();
  loss.sum = take_loss_sum();
  loss.ce = take_ce_sum();
  return loss;
}

std::vector<double> Transformer::host_logits(const void* logits, int64_t n) const {
  std::vector<double> out(static_cast<size_t>(n));
  if (dt_ == DType::f64) {
    be_->to_host(out.data(), logits, out.size() * 8);
  } else {
    std::vector<uint8_t> raw(out.size() * es_);
    be_->to_host(raw.data(), logits, raw.size());
    for (int64_t i = 0; i < n; ++i) out[static_cast<size_t>(i)] = load_element(dt_, raw.data(), i);
  }
  const double cap = cfg_.final_logit_softcapping;  // gemma2
  if (cap > 0)
    for (double& z : out) z = cap * std::tanh(z / cap);
  return out;
}

std::vector<double> Transformer::forward_logits(const int32_t* ids, int64_t B, int64_t T,
                                                const Packing* packing) {
  upload_batch(ids, nullptr, B, T, packing);
  sync_compute_weights();
  forward_trunk();
  const Plan& p = *plan_;
  const int64_t V = cfg_.vocab_size;
  Buffer logits(be_, static_cast<size_t>(p.N * V) * es_);
  head_forward(p.hf, logits.data(), p.N);
  discard_scratch();
  return host_logits(logits.data(), p.N * V);
}

}  // namespace lmt

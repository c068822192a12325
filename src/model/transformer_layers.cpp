// The layers of the Transformer: the building blocks every family shares (linear with its
// adapters, norms, embeddings) and one block's forward and backward. A layer runs: norm1 -> q|k|v
// (+ bias) -> [q/k norm] -> [RoPE] -> attention -> o_proj (+ bias) -> [post-attention norm] ->
// residual -> norm2 -> up (+ bias) -> act / gated act -> down (+ bias) -> [post-MLP norm] ->
// residual; bracketed steps are family switches (ModelConfig::traits()).
#include <cmath>
#include <string>
#include <unordered_map>

#include "core/error.h"
#include "model/rope.h"
#include "model/transformer.h"

namespace lmt {

// Each layer's roles by name, so the layer code is family-blind.
void Transformer::index_layers() {
  std::unordered_map<std::string, int> index;
  const std::vector<ParamInfo>& ps = params();
  for (size_t i = 0; i < ps.size(); ++i) index[ps[i].name] = static_cast<int>(i);
  auto find = [&](const std::string& name) {
    auto it = index.find(name);
    return it == index.end() ? -1 : it->second;
  };
  const bool gpt2 = traits_.conv1d;
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
      if (traits_.sandwich_norms) {
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
}

Transformer::LayerWeights Transformer::layer_weights(int64_t l, bool grads) {
  const LayerIndex& x = layers_[static_cast<size_t>(l)];
  const bool staged = !grads && base_dtype() != dtype();
  if (staged) weights_.stage_layer(l);
  auto p = [&](int i) -> void* {
    return staged ? weights_.staged_param(i, l) : weights_.param(i, grads);
  };
  LayerWeights w{p(x.ln1),  p(x.ln1_b), p(x.qkv),       p(x.qkv_b),   p(x.q_norm), p(x.k_norm),
                 p(x.o),    p(x.o_b),   p(x.post_attn), p(x.ln2),     p(x.ln2_b),  p(x.up),
                 p(x.up_b), p(x.down),  p(x.down_b),    p(x.post_ffw)};
  if (has_lora()) w.lora = &layer_lora_[static_cast<size_t>(l)];
  return w;
}

void Transformer::linear(const void* x, const void* w, const void* b, void* y, int64_t N,
                         int64_t in, int64_t out, const std::vector<int>* lora) {
  if (traits_.conv1d)
    be_->gemm(compute_dt_, false, false, N, out, in, 1.0, x, in, w, out, 0.0, y, out);
  else
    be_->gemm(compute_dt_, false, true, N, out, in, 1.0, x, in, w, in, 0.0, y, out);
  if (b) be_->add_bias(compute_dt_, y, b, N, out);
  if (lora && !lora->empty()) lora_forward(*lora, x, y, N, in, out);
}

void Transformer::linear_backward(const void* dy, const void* x, const void* w, void* dx, void* dw,
                                  void* db, int64_t N, int64_t in, int64_t out,
                                  const std::vector<int>* lora) {
  if (traits_.conv1d) {
    be_->gemm(compute_dt_, false, true, N, in, out, 1.0, dy, out, w, out, 0.0, dx, in);
    if (dw) be_->gemm(compute_dt_, true, false, in, out, N, 1.0, x, in, dy, out, 1.0, dw, out);
  } else {
    be_->gemm(compute_dt_, false, false, N, in, out, 1.0, dy, out, w, in, 0.0, dx, in);
    if (dw) be_->gemm(compute_dt_, true, false, out, in, N, 1.0, dy, out, x, in, 1.0, dw, in);
  }
  if (db) be_->bias_backward(compute_dt_, db, dy, N, out);
  if (lora && !lora->empty()) lora_backward(*lora, dy, x, dx, N, in, out);
}

void* Transformer::lora_scratch(int64_t N, int64_t in) {
  const int64_t elems = lora_scratch_elems(N, lora_spec_.rank, in, lora_dropping());
  const size_t need = static_cast<size_t>(elems) * dtype_size(compute_dt_);
  if (lora_scratch_.bytes() < need) lora_scratch_ = Buffer(be_, need);
  return lora_scratch_.data();
}

// Adapter `id`'s mask under the micro-batch's key {seed, micro-batch << 24}: its stream is
// (micro-batch << 24) + id, the id xor'ed into the key's zero low bits.
uint64_t Transformer::dropout_stream(int id) const {
  LMT_CHECK(static_cast<uint64_t>(id) < (uint64_t{1} << 24), "too many adapters for dropout");
  return static_cast<uint64_t>(id);
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
    const LoraTarget& t = weights_.adapters().targets[static_cast<size_t>(id)];
    const void* A = weights_.adapter(t.a);
    const void* B = weights_.adapter(t.b);
    const void* xin = x;
    if (lora_dropping()) {
      be_->dropout(compute_dt_, xd, x, N * in, lora_spec_.dropout, dropout_key_.as<uint64_t>(),
                   dropout_stream(id));
      xin = xd;
    }
    be_->gemm(compute_dt_, false, true, N, r, in, 1.0, xin, in, A, in, 0.0, u, r);
    be_->gemm(compute_dt_, false, true, N, t.module.out, r, s, u, r, B, r, 1.0,
              at(y, t.module.out_offset), ldy);
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
    const LoraTarget& t = weights_.adapters().targets[static_cast<size_t>(id)];
    const void* A = weights_.adapter(t.a);
    const void* B = weights_.adapter(t.b);
    const void* dyt = at(const_cast<void*>(dy), t.module.out_offset);
    const int64_t out = t.module.out;
    const bool drop = lora_dropping();
    const void* xin = x;
    if (drop) {
      be_->dropout(compute_dt_, xd, x, N * in, lora_spec_.dropout, dropout_key_.as<uint64_t>(),
                   dropout_stream(id));
      xin = xd;
    }
    be_->gemm(compute_dt_, false, true, N, r, in, 1.0, xin, in, A, in, 0.0, u, r);
    be_->gemm(compute_dt_, true, false, out, r, N, s, dyt, ldy, u, r, 1.0,
              weights_.adapter_grad(t.b), r);
    be_->gemm(compute_dt_, false, false, N, r, out, s, dyt, ldy, B, r, 0.0, du, r);
    be_->gemm(compute_dt_, true, false, r, in, N, 1.0, du, r, xin, in, 1.0,
              weights_.adapter_grad(t.a), in);
    if (drop) {  // xd is read for the last time above; it now holds du A through the mask
      be_->gemm(compute_dt_, false, false, N, in, r, 1.0, du, r, A, in, 0.0, xd, in);
      be_->dropout(compute_dt_, xd, xd, N * in, lora_spec_.dropout, dropout_key_.as<uint64_t>(),
                   dropout_stream(id));
      be_->accumulate(compute_dt_, dx, xd, N * in);
    } else {
      be_->gemm(compute_dt_, false, false, N, in, r, 1.0, du, r, A, in, 1.0, dx, in);
    }
  }
}

// The family's norm over C: LayerNorm with bias, or RMSNorm scaled by (offset + w).
void Transformer::norm_forward(const void* w, const void* b, void* out, void* mean, void* rstd,
                               const void* x, int64_t N) {
  if (traits_.layernorm)
    be_->layernorm_forward(compute_dt_, out, mean, rstd, x, w, b, N, dims_.C, cfg_.rms_norm_eps);
  else
    be_->rmsnorm_forward(compute_dt_, out, rstd, x, w, N, dims_.C, cfg_.rms_norm_eps,
                         traits_.norm_offset);
}

// dx += the norm's input gradient; dw (and db) +=.
void Transformer::norm_backward(const void* w, void* dw, void* db, void* dx, const void* dout,
                                const void* x, const void* mean, const void* rstd, int64_t N) {
  dw = weights_.grad_sink(dw, 0);
  if (traits_.layernorm) db = weights_.grad_sink(db, 1);
  if (traits_.layernorm)
    be_->layernorm_backward(compute_dt_, dx, dw, db, dout, x, w, mean, rstd, N, dims_.C);
  else
    be_->rmsnorm_backward(compute_dt_, dx, dw, dout, x, w, rstd, N, dims_.C, traits_.norm_offset);
}

// out[N, C] = token embedding (* sqrt(C) for gemma) (+ position embedding for gpt2).
void Transformer::embed(void* out, const int32_t* ids, const int32_t* pos, void* scratch,
                        int64_t N) {
  const int64_t C = dims_.C;
  if (weights_.staged(embed_)) {  // gather rows of a bf16 base, then convert them
    const DType base_dt = weights_.base_dtype();
    be_->embedding_forward(base_dt, scratch, ids, weights_.base_param(embed_), N, C, dims_.V);
    be_->convert(compute_dt_, out, base_dt, scratch, N * C);
  } else {
    be_->embedding_forward(compute_dt_, out, ids, param_ptr(embed_, false), N, C, dims_.V);
  }
  if (traits_.embed_scale)  // transformers multiplies by sqrt(hidden) rounded to the model's dtype
    be_->scale(compute_dt_, out, static_cast<float>(std::sqrt(static_cast<double>(C))), N * C);
  if (pos_embed_ >= 0) {
    be_->embedding_forward(compute_dt_, scratch, pos, param_ptr(pos_embed_, false), N, C,
                           cfg_.max_position_embeddings);
    be_->accumulate(compute_dt_, out, scratch, N * C);
  }
}

// dx [N, C] (d loss / d embedding output) into the tables' gradients; dx is scaled in place.
void Transformer::embed_backward(void* dx, const int32_t* ids, const int32_t* pos, int64_t N) {
  const int64_t C = dims_.C;
  void* pos_grad = param_ptr(pos_embed_, true);  // null: a frozen table (or none)
  if (pos_grad)
    be_->embedding_backward(compute_dt_, pos_grad, dx, pos, N, C, cfg_.max_position_embeddings);
  void* grad = param_ptr(embed_, true);
  if (!grad) return;
  if (traits_.embed_scale)
    be_->scale(compute_dt_, dx, static_cast<float>(std::sqrt(static_cast<double>(C))), N * C);
  be_->embedding_backward(compute_dt_, grad, dx, ids, N, C, cfg_.vocab_size);
}

void Transformer::final_norm(void* out, void* mean, void* rstd, const void* x, int64_t N) {
  norm_forward(param_ptr(norm_, false), param_ptr(norm_b_, false), out, mean, rstd, x, N);
}

// Norm, q|k|v projection, q/k norm and RoPE of one block: a.h1, a.rstd1, a.qkv (a.qkv_raw,
// a.qk_rstd) from x[N, C].
void Transformer::block_qkv(int64_t l, const LayerWeights& w, const LayerActs& a, const void* x,
                            const int32_t* pos, int64_t N) {
  const ModelDims& d = dims_;
  norm_forward(w.ln1, w.ln1_b, a.h1, a.mean1, a.rstd1, x, N);
  linear(a.h1, w.qkv, w.qkv_b, a.qkv, N, d.C, d.QKV, w.lora ? &w.lora->qkv : nullptr);
  if (traits_.qk_norm) {  // a.qkv keeps v; q and k are normalised per head from the raw copy
    be_->copy(a.qkv_raw, a.qkv, static_cast<size_t>(N * d.QKV) * dtype_size(compute_dt_));
    be_->head_rmsnorm_forward(compute_dt_, a.qkv, a.qk_rstd, a.qkv_raw, w.q_norm, N, d.QKV, d.Hq,
                              d.D, cfg_.rms_norm_eps, traits_.norm_offset);
    be_->head_rmsnorm_forward(compute_dt_, at(a.qkv, d.Q), stat_at(a.qk_rstd, N * d.Hq),
                              at(a.qkv_raw, d.Q), w.k_norm, N, d.QKV, d.Hkv, d.D, cfg_.rms_norm_eps,
                              traits_.norm_offset);
  }
  if (!traits_.learned_positions) {
    const Rope& r = rope_of(l);
    const auto* inv = r.inv_freq.as<float>();
    be_->rope(compute_dt_, a.qkv, pos, inv, N, d.QKV, d.Hq, d.D, d.D, r.attention_factor, false);
    be_->rope(compute_dt_, at(a.qkv, d.Q), pos, inv, N, d.QKV, d.Hkv, d.D, d.D, r.attention_factor,
              false);
  }
}

// The rest of the block: attention of a.qkv's queries over keys k and values v (as args lays
// them out), output projection, residual, MLP. y[N, C] may be x itself: x is last read before y
// is written.
void Transformer::block_rest(const LayerWeights& w, const LayerActs& a, const void* x, void* y,
                             int64_t N, const AttentionArgs& args, const void* k, const void* v) {
  const ModelDims& d = dims_;
  const int64_t C = d.C;
  be_->attention_forward(compute_dt_, args, a.att, a.lse, a.qkv, k, v);
  if (traits_.sandwich_norms) {
    linear(a.att, w.o, w.o_b, a.o_raw, N, d.Q, C, w.lora ? &w.lora->o : nullptr);
    be_->rmsnorm_forward(compute_dt_, a.x_mid, a.rstd_pa, a.o_raw, w.post_attn, N, C,
                         cfg_.rms_norm_eps, traits_.norm_offset);
  } else {
    linear(a.att, w.o, w.o_b, a.x_mid, N, d.Q, C, w.lora ? &w.lora->o : nullptr);
  }
  be_->accumulate(compute_dt_, a.x_mid, x, N * C);
  norm_forward(w.ln2, w.ln2_b, a.h2, a.mean2, a.rstd2, a.x_mid, N);
  linear(a.h2, w.up, w.up_b, a.gu, N, C, d.G, w.lora ? &w.lora->up : nullptr);
  if (a.mask) be_->relu_mask(compute_dt_, a.mask, a.gu, N * d.F);
  if (traits_.gated_mlp)
    be_->glu_forward(compute_dt_, act_, a.a, a.gu, N, d.F);
  else
    be_->act_forward(compute_dt_, act_, a.a, a.gu, N * d.F);
  if (traits_.sandwich_norms) {
    linear(a.a, w.down, w.down_b, a.m_raw, N, d.F, C, w.lora ? &w.lora->down : nullptr);
    be_->rmsnorm_forward(compute_dt_, y, a.rstd_pf, a.m_raw, w.post_ffw, N, C, cfg_.rms_norm_eps,
                         traits_.norm_offset);
  } else {
    linear(a.a, w.down, w.down_b, y, N, d.F, C, w.lora ? &w.lora->down : nullptr);
  }
  be_->accumulate(compute_dt_, y, a.x_mid, N * C);
}

void Transformer::layer_forward(int64_t l) {
  const ActivationPlan& p = *plan_;
  const LayerWeights w = layer_weights(l, false);
  const LayerActs& a = plan_->layer(l);
  block_qkv(l, w, a, p.res[l], p.pos, p.N);
  block_rest(w, a, p.res[l], p.res[l + 1], p.N, attention_args(l, p.B, p.T), at(a.qkv, dims_.Q),
             at(a.qkv, dims_.Q + dims_.KV));
}

// On entry p.dx holds d loss / d res[l+1]; on exit, d loss / d res[l].
void Transformer::layer_backward(int64_t l) {
  const ActivationPlan& p = *plan_;
  const LayerWeights w = layer_weights(l, false);
  const LayerWeights g = layer_weights(l, true);
  const LayerActs& a = plan_->layer(l);
  const int64_t N = p.N;
  const ModelDims& d = dims_;
  const int64_t C = d.C;
  const size_t nc_bytes = static_cast<size_t>(N * C) * dtype_size(compute_dt_);

  // MLP branch: y = x_mid + [post_ffw](down(act(up(norm2(x_mid)))))
  const void* dm = p.dx;
  if (traits_.sandwich_norms) {  // p.dh = d/d m_raw
    be_->zero(p.dh, nc_bytes);
    be_->rmsnorm_backward(compute_dt_, p.dh, weights_.grad_sink(g.post_ffw, 0), p.dx, a.m_raw,
                          w.post_ffw, a.rstd_pf, N, C, traits_.norm_offset);
    dm = p.dh;
  }
  linear_backward(dm, a.a, w.down, p.da, g.down, g.down_b, N, d.F, C,
                  w.lora ? &w.lora->down : nullptr);
  if (traits_.gated_mlp)
    be_->glu_backward(compute_dt_, act_, p.dgu, p.da, a.gu, N, d.F);
  else if (settings_.activation_bits == 0)
    be_->act_backward(compute_dt_, act_, p.dgu, p.da, a.gu, N * d.F);
  else if (act_ == Activation::relu)
    be_->relu_backward_masked(compute_dt_, p.dgu, p.da, a.mask, N * d.F);
  else
    be_->relu2_backward_from_output(compute_dt_, p.dgu, p.da, a.a, N * d.F);
  // A fused product's gradient assembled from pieces (gate | up here; q | k | v rotated or
  // normalised below) is one array for both of its GEMMs: a compiler that fused the pieces into
  // the weight gradient's product would have to concatenate them again for the input gradient's.
  const bool whole = be_->fused_groups_whole();
  if (traits_.gated_mlp && whole)
    be_->assemble({p.dgu, static_cast<size_t>(N * d.G) * dtype_size(compute_dt_)}, N);
  linear_backward(p.dgu, a.h2, w.up, p.dh, g.up, g.up_b, N, C, d.G, w.lora ? &w.lora->up : nullptr);
  norm_backward(w.ln2, g.ln2, g.ln2_b, p.dx, p.dh, a.x_mid, a.mean2, a.rstd2, N);
  // Attention branch: x_mid = x + [post_attn](o(attention(rope(qk_norm(q)), rope(qk_norm(k)), v)))
  const void* dout = p.dx;
  if (traits_.sandwich_norms) {
    be_->zero(p.dh, nc_bytes);
    be_->rmsnorm_backward(compute_dt_, p.dh, weights_.grad_sink(g.post_attn, 0), p.dx, a.o_raw,
                          w.post_attn, a.rstd_pa, N, C, traits_.norm_offset);
    dout = p.dh;
  }
  linear_backward(dout, a.att, w.o, p.datt, g.o, g.o_b, N, d.Q, C, w.lora ? &w.lora->o : nullptr);
  AttentionArgs args = attention_args(l, p.B, p.T);
  be_->attention_backward(compute_dt_, args, p.dqkv, at(p.dqkv, d.Q), at(p.dqkv, d.Q + d.KV),
                          p.datt, a.qkv, at(a.qkv, d.Q), at(a.qkv, d.Q + d.KV), a.att, a.lse);
  if (!traits_.learned_positions) {
    const Rope& r = rope_of(l);
    const auto* inv = r.inv_freq.as<float>();
    be_->rope(compute_dt_, p.dqkv, p.pos, inv, N, d.QKV, d.Hq, d.D, d.D, r.attention_factor, true);
    be_->rope(compute_dt_, at(p.dqkv, d.Q), p.pos, inv, N, d.QKV, d.Hkv, d.D, d.D,
              r.attention_factor, true);
  }
  if (traits_.qk_norm) {
    be_->head_rmsnorm_backward(compute_dt_, p.dqkv, weights_.grad_sink(g.q_norm, 0), p.dqkv,
                               a.qkv_raw, w.q_norm, a.qk_rstd, N, d.QKV, d.Hq, d.D,
                               traits_.norm_offset);
    be_->head_rmsnorm_backward(compute_dt_, at(p.dqkv, d.Q), weights_.grad_sink(g.k_norm, 1),
                               at(p.dqkv, d.Q), at(a.qkv_raw, d.Q), w.k_norm,
                               stat_at(a.qk_rstd, N * d.Hq), N, d.QKV, d.Hkv, d.D,
                               traits_.norm_offset);
  }
  if ((!traits_.learned_positions || traits_.qk_norm) && whole)
    be_->assemble({p.dqkv, static_cast<size_t>(N * d.QKV) * dtype_size(compute_dt_)}, N);
  linear_backward(p.dqkv, a.h1, w.qkv, p.dh, g.qkv, g.qkv_b, N, C, d.QKV,
                  w.lora ? &w.lora->qkv : nullptr);
  norm_backward(w.ln1, g.ln1, g.ln1_b, p.dx, p.dh, p.res[l], a.mean1, a.rstd1, N);
}

AttentionArgs Transformer::attention_args(int64_t l, int64_t B, int64_t T) const {
  const ModelDims& d = dims_;
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

}  // namespace lmt

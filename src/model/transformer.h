// A decoder-only transformer with an explicit forward and backward per layer. Every family
// (llama, mistral, qwen2, qwen3, gemma, gemma2, gemma3, gpt2) is the same block with switches
// (ModelConfig::traits(): norm kind and offset, q/k norm, sandwich norms, learned positions,
// biases, gated MLP, Conv1D weight layout), never a separate code path per family.
// The class holds the layers and runs them; what it runs them on lives apart: the weights with
// their gradients, adapters and precision copies (model_weights.h), the activations of a pass in
// one arena planned per (batch, seq_len) (activation_plan.h), and the loss sums the output head
// adds to, which belong to the caller (loss_sums.h). With activation checkpointing the arena
// keeps only each layer's input and one layer's working set, and backward recomputes the layer
// before differentiating it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "model/activation_plan.h"
#include "model/lora.h"
#include "model/loss_sums.h"
#include "model/model_config.h"
#include "model/model_weights.h"
#include "model/param_layout.h"

namespace lmt {

// Keys and values of past positions for incremental decoding (batch 1).
struct KvCache {
  int64_t max_len = 0;
  int64_t length = 0;        // positions filled
  std::vector<Buffer> k, v;  // per layer [max_len, KV]
};

class Transformer {
 public:
  static constexpr int32_t kIgnoreIndex = -100;  // = kNoLabel of data/packing.h

  // dt: f32 for training on the CPU, f64 for gradient checks. It is the dtype of the weights,
  // gradients and adapters the model holds (what checkpoints, loaders and the optimizer see),
  // and the dtype it computes in unless set_compute_dtype() changes that.
  Transformer(Backend* be, const ModelConfig& cfg, DType dt = DType::f32);
  ~Transformer();
  Transformer(const Transformer&) = delete;
  Transformer& operator=(const Transformer&) = delete;

  const ModelConfig& config() const { return cfg_; }
  Backend* backend() const { return be_; }
  DType dtype() const { return weights_.held_dtype(); }  // of the weights, gradients, adapters
  DType compute_dtype() const { return compute_dt_; }    // of the kernels and activations

  // ---- the weights (model_weights.h) ----
  const std::vector<ParamInfo>& params() const { return weights_.params(); }
  const ParamInfo& param(const std::string& name) const;
  int64_t num_params() const;                                 // sum of sizes (no padding)
  int64_t flat_size() const { return weights_.flat_size(); }  // elements in the flat buffer
  void* params_data() const { return weights_.data(); }       // in base_dtype()
  // The gradient buffer: allocated (zeroed) by the first zero_grads() or forward_backward(), so
  // a model that never trains, or trains adapters only, never holds one.
  void* grads_data() const { return weights_.grads(); }
  // Mixed precision (train.precision: bf16): the model computes in `dt` (bf16; activations,
  // matrix products with f32 accumulation, per-layer gradients) from a copy of the f32 weights
  // made at the start of every pass, and each backward adds its bf16 gradients, widened, into the
  // f32 gradient buffer: the weights, gradients, adapters, optimizer and checkpoints stay f32
  // (the master copy), and an update smaller than bf16's resolution is not lost. `dt` equal to
  // dtype() turns it off. Needs an f32 model whose base is not held in bf16, and a backend with
  // bf16 kernels.
  void set_compute_dtype(DType dt);
  // LoRA: keeps the frozen base in `dt` (ModelWeights::set_base_dtype). Call it after the base
  // weights are loaded and after add_lora().
  void set_base_dtype(DType dt, int64_t head_block_rows = 0) {
    weights_.set_base_dtype(dt, head_block_rows);
  }
  DType base_dtype() const { return weights_.base_dtype(); }
  void init_weights(uint64_t seed) { weights_.init(seed); }
  double norm_init() const { return weights_.norm_init(); }
  void zero_grads() { weights_.zero_grads(); }
  // The gradients are no longer needed (the optimizer has stepped): until the next zero_grads()
  // or forward_backward() their values are unspecified. A compiling backend then keeps them
  // inside the step's program instead of writing them out.
  void discard_grads() { weights_.discard_grads(); }

  // ---- LoRA ----
  // Adds the adapters of `spec`, initialised as PEFT does (A uniform in +-1/sqrt(in), B zero, so
  // the model still computes what it did), and freezes the base: its gradient buffer is released,
  // backward computes no weight gradient GEMM for it, and the gradients are the adapters'. The
  // modules of spec.modules_to_save train as copies in the adapter buffer, which the model then
  // reads instead of the base's. Throws UserError for a bad spec (lora_layout()).
  void add_lora(const LoraSpec& spec, uint64_t seed);
  bool has_lora() const { return weights_.has_adapters(); }
  const LoraSpec& lora_spec() const { return lora_spec_; }
  const std::vector<ParamInfo>& lora_params() const { return weights_.adapters().params; }
  const std::vector<LoraTarget>& lora_targets() const { return weights_.adapters().targets; }
  const std::vector<SavedParam>& lora_saved() const { return weights_.adapters().saved; }
  int64_t lora_num_params() const;  // sum of adapter sizes (no padding); 0 without adapters
  int64_t lora_flat_size() const { return weights_.adapters().flat_size; }
  void* lora_data() const { return weights_.adapter_data(); }
  void* lora_grads_data() const { return weights_.adapter_grads(); }
  // What an optimizer steps: the adapters with LoRA, else every parameter.
  const std::vector<ParamInfo>& trainable_params() const {
    return has_lora() ? lora_params() : params();
  }
  int64_t trainable_flat_size() const { return has_lora() ? lora_flat_size() : flat_size(); }
  void* trainable_data() const { return has_lora() ? lora_data() : params_data(); }
  void* trainable_grads_data() const { return has_lora() ? lora_grads_data() : grads_data(); }
  // LoRA dropout: the masks of the next forward_backward are Philox streams under `seed`, one per
  // (micro_batch, adapter), so a layer recomputed under checkpointing, and a resumed run, draw
  // the same masks. Forward passes outside forward_backward apply no dropout.
  void set_dropout(uint64_t seed, uint64_t micro_batch) {
    dropout_seed_ = seed;
    dropout_micro_ = micro_batch;
  }

  // ---- memory settings (activation_plan.h) and the objective ----
  void set_activation_checkpointing(bool on);
  // train.activation_bits: 0 keeps the MLP's pre-activation for the backward; 1 (ReLU or ReLU^2,
  // non-gated MLP only, see activation_bits_unsupported) keeps less and gives the same gradients:
  // ReLU a sign mask of 1 bit per element, ReLU^2 nothing beyond its output, which the down
  // projection's weight gradient needs anyway.
  void set_activation_bits(int bits);
  // Empty when activation_bits 1 applies to the config, else why not.
  static std::string activation_bits_unsupported(const ModelConfig& cfg);
  void set_loss_chunk_tokens(int64_t n);
  // The objective (backend/loss.h) and, vocab_tile > 0, the cut cross-entropy's vocabulary tile
  // (HeadLossArgs::vocab_tile). Call before the first pass.
  void set_loss(const LossSpec& loss, int64_t vocab_tile);
  // Bytes of the activation arena for a batch shape, as planned.
  size_t activation_bytes(int64_t B, int64_t T) const {
    return ActivationPlan::bytes(cfg_, compute_dt_, B, T, settings_);
  }
  // Loss sums on this model's backend for its objective.
  LossSums make_loss_sums() const { return LossSums(be_, loss_.plain()); }

  // ---- passes ----
  // Packed samples (host arrays [B, T]): positions restart at every document (RoPE), and
  // doc_start says where each token's document begins, so attention stays inside it. A row then
  // computes exactly what its documents would compute as separate sequences. Null: positions
  // 0..T-1 and plain causal attention over the whole row.
  struct Packing {
    const int32_t* positions = nullptr;
    const int32_t* doc_start = nullptr;
  };
  // One micro-batch: ids and labels are host arrays [B, T] (labels == kIgnoreIndex: no loss).
  // Adds grad_scale * d(sum of token losses)/dparams to the gradient buffer and the batch's loss
  // sums to `sums` (on the device: a step's micro-batches and its update then read nothing back
  // until the step's end, so a compiling backend (pjrt) runs the step as one program). Returns
  // the batch's labelled tokens.
  int64_t forward_backward(const int32_t* ids, const int32_t* labels, int64_t B, int64_t T,
                           double grad_scale, LossSums& sums, const Packing* packing = nullptr);
  // What forward_backward writes to the backend from the host, and nothing else: the batch (ids,
  // positions, document starts, labels; the RoPE tables where they follow the positions),
  // grad_scale, and with LoRA dropout the dropout key of set_dropout's micro-batch, in
  // forward_backward's order (it starts with this). A replayed step (Backend::replay) makes only
  // these calls. Returns the batch's labelled tokens.
  int64_t write_inputs(const int32_t* ids, const int32_t* labels, int64_t B, int64_t T,
                       double grad_scale, const Packing* packing = nullptr);
  // The loss only (evaluation), added to `sums`; returns the labelled tokens.
  int64_t forward_loss(const int32_t* ids, const int32_t* labels, int64_t B, int64_t T,
                       LossSums& sums, const Packing* packing = nullptr);
  // Logits of every position for one batch, copied to the host as f64 [B, T, V] (tests, small T).
  std::vector<double> forward_logits(const int32_t* ids, int64_t B, int64_t T,
                                     const Packing* packing = nullptr);

  // Per-token scores of one batch (evaluation: lmtrain eval's log-likelihoods): the forward
  // pass of forward_loss (adapters, mixed precision and packing alike) whose head computes
  // Backend::head_logprobs instead of the loss, chunked as the loss is. ids and labels are host
  // arrays [B, T]; [B * T] results, row-major: logprob = log_softmax(logits)[label] (logits
  // soft-capped where the family caps them) and greedy = 1 where the label is the argmax (ties:
  // the lowest id), 0 and 0 where the label is kIgnoreIndex. Read back once per batch.
  struct TokenScores {
    std::vector<double> logprob;
    std::vector<uint8_t> greedy;
  };
  TokenScores forward_token_scores(const int32_t* ids, const int32_t* labels, int64_t B, int64_t T,
                                   const Packing* packing = nullptr);

  // The same model (config, weights, adapters, base dtype) on another backend, copied through the
  // host: generation for a model trained where incremental decoding is not available. The copy
  // computes in dtype() (a mixed-precision model's copy runs on its f32 weights).
  std::unique_ptr<Transformer> clone(Backend* be) const;

  // Generation with a KV cache (batch 1). feed() runs n new tokens at positions
  // [cache.length, cache.length + n) and returns the last token's logits (f32, [V]).
  std::unique_ptr<KvCache> make_kv_cache(int64_t max_len) const;
  std::vector<float> feed(KvCache& cache, const int32_t* ids, int64_t n);

 private:
  // Where each of a layer's parameters sits in params() (-1: the family has none). q|k|v and
  // gate|up are each one contiguous group ([q; k; v] and [gate; up] rows, or gpt2's single
  // c_attn / c_fc), so each is one GEMM.
  struct LayerIndex {
    int ln1 = -1, ln1_b = -1, qkv = -1, qkv_b = -1, q_norm = -1, k_norm = -1, o = -1, o_b = -1,
        post_attn = -1, ln2 = -1, ln2_b = -1, up = -1, up_b = -1, down = -1, down_b = -1,
        post_ffw = -1;
  };
  // The adapters of one layer per fused GEMM (indices into lora_targets()).
  struct LayerLora {
    std::vector<int> qkv, o, up, down;
  };
  // The weights (or their gradients) of one layer; null where LayerIndex is -1, or for the
  // gradients of a frozen base.
  struct LayerWeights {
    void *ln1, *ln1_b, *qkv, *qkv_b, *q_norm, *k_norm, *o, *o_b, *post_attn, *ln2, *ln2_b, *up,
        *up_b, *down, *down_b, *post_ffw;
    const LayerLora* lora = nullptr;  // the layer's adapters (forward and backward alike)
  };
  // The RoPE table of one kind of layer (f32 [D / 2] on the backend) and its cos/sin factor.
  struct Rope {
    Buffer inv_freq;
    double attention_factor = 1.0;
  };

  void index_layers();
  void set_rope(int64_t seq_len);
  const Rope& rope_of(int64_t l) const;
  void plan(int64_t B, int64_t T);
  void upload_batch(const int32_t* ids, const int32_t* labels, int64_t B, int64_t T,
                    const Packing* packing);
  // Pointers to layer l's weights (or gradients); with a bf16 base, the weights are converted
  // into the staging buffer first (valid until the next layer_weights or head call).
  LayerWeights layer_weights(int64_t l, bool grads);
  void* param_ptr(int index, bool grads) const { return weights_.param(index, grads); }

  // ---- building blocks (transformer_blocks.cpp) ----
  // y[N,out] = x[N,in] W^T (+ b) for a weight stored as Hugging Face stores it, plus the
  // adapters `lora` (null: none) on their slices of y.
  void linear(const void* x, const void* w, const void* b, void* y, int64_t N, int64_t in,
              int64_t out, const std::vector<int>* lora = nullptr);
  // dx[N,in] = dy W (beta 0) plus the adapters' share, dw += x^T dy in the weight's layout, db +=
  // column sums (dw, db null: not computed); the adapters' gradients accumulate.
  void linear_backward(const void* dy, const void* x, const void* w, void* dx, void* dw, void* db,
                       int64_t N, int64_t in, int64_t out, const std::vector<int>* lora = nullptr);
  // The adapters' part of linear() and linear_backward() for output rows of stride ldy.
  void lora_forward(const std::vector<int>& ids, const void* x, void* y, int64_t N, int64_t in,
                    int64_t ldy);
  void lora_backward(const std::vector<int>& ids, const void* dy, const void* x, void* dx,
                     int64_t N, int64_t in, int64_t ldy);
  // The scratch of lora_forward / lora_backward: u and du, [N, rank] each, then (with dropout)
  // the adapter's input through its mask, [N, in].
  void* lora_scratch(int64_t N, int64_t in);
  // Whether adapters read their input through dropout now (LoRA dropout, in forward_backward),
  // and the mask stream of adapter `id`.
  bool lora_dropping() const { return training_ && lora_spec_.dropout > 0; }
  uint64_t dropout_stream(int id) const;
  void norm_forward(const void* w, const void* b, void* out, void* mean, void* rstd, const void* x,
                    int64_t N);
  void norm_backward(const void* w, void* dw, void* db, void* dx, const void* dout, const void* x,
                     const void* mean, const void* rstd, int64_t N);
  void embed(void* out, const int32_t* ids, const int32_t* pos, void* scratch, int64_t N);
  void embed_backward(void* dx, const int32_t* ids, const int32_t* pos, int64_t N);
  void final_norm(void* out, void* mean, void* rstd, const void* x, int64_t N);

  // ---- one layer ----
  void block_qkv(int64_t l, const LayerWeights& w, const LayerActs& a, const void* x,
                 const int32_t* pos, int64_t N);
  void block_rest(const LayerWeights& w, const LayerActs& a, const void* x, void* y, int64_t N,
                  const AttentionArgs& args, const void* k, const void* v);
  void layer_forward(int64_t l);
  void layer_backward(int64_t l);
  // Attention arguments of layer l for a batch (window, scale, soft-cap, document masking).
  AttentionArgs attention_args(int64_t l, int64_t B, int64_t T) const;

  // ---- the whole model and its head ----
  void forward_trunk();
  // logits[n, V] = h[n, C] W_head^T, and dh[n, C] = dlogits[n, V] W_head (beta 0).
  void head_forward(const void* h, void* logits, int64_t n);
  void head_backward_input(const void* dlogits, void* dh, int64_t n);
  // Adds the batch's losses to `sums` (on the device); returns the labelled tokens. With
  // backward, the gradient scale is write_inputs' (its value grad_scale).
  int64_t head_loss(bool backward, double grad_scale, LossSums& sums);
  int64_t labelled_tokens() const;
  // The batch's head_logprobs into logprobs [N] (f32, f64 for f64) and greedy [N] (i32).
  void head_logprobs(void* logprobs, void* greedy);
  void staged_head_loss(const HeadLossArgs& a, double* loss_sum, double* ce_sum);
  // Tells the backend that the activation arena and the other per-pass scratch are dead.
  void discard_scratch();
  // n logits of the backend's buffer on the host as f64, soft-capped where the family caps them.
  std::vector<double> host_logits(const void* logits, int64_t n) const;
  void* at(void* base, int64_t elems) const;        // elems of the compute dtype after base
  void* stat_at(void* base, int64_t elems) const {  // elems of saved statistics after base
    return static_cast<char*>(base) + static_cast<size_t>(elems) * stat_size(compute_dt_);
  }

  Backend* be_;
  ModelConfig cfg_;
  ModelConfig::Traits traits_;
  ModelDims dims_;
  Activation act_;  // the MLP's, from cfg_.hidden_act
  DType compute_dt_;
  ModelWeights weights_;
  std::vector<LayerIndex> layers_;
  int embed_ = -1, pos_embed_ = -1, norm_ = -1, norm_b_ = -1, head_ = -1;
  Rope rope_global_, rope_local_;  // local: sliding layers of a model with rope_local_base_freq
  int64_t rope_len_ = -1;          // the length the tables were made for (rope_type dynamic)
  ActivationSettings settings_;
  LossSpec loss_;
  std::unique_ptr<ActivationPlan> plan_;
  std::vector<int32_t> batch_labels_;  // the batch's labels on the host (kIgnoreIndex padded)
  bool packed_ = false;  // the current batch is packed: attention reads plan_->doc_start
  LoraSpec lora_spec_;
  std::vector<LayerLora> layer_lora_;  // per layer, with adapters
  Buffer lora_scratch_;  // u = x A^T and its gradient, [N, rank] each, grown on demand
  uint64_t dropout_seed_ = 0, dropout_micro_ = 0;
  // A training pass's values from the host, on the device (written by write_inputs, dead after
  // the pass): its gradient scale (f64, "loss.grad_scale") and its dropout key ({seed, micro-batch
  // << 24} as u64, "dropout.key"). Made on first use.
  Buffer grad_scale_, dropout_key_;
  bool training_ = false;  // inside forward_backward
};

// The loss of one batch, read back: forward_loss on fresh sums (a one-off evaluation: lmtrain
// logits, tests). A run's evaluation keeps its sums across batches instead.
LossSum batch_loss(Transformer& model, const int32_t* ids, const int32_t* labels, int64_t B,
                   int64_t T, const Transformer::Packing* packing = nullptr);

}  // namespace lmt
